package prober_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// TestQualityGroundTruth sends quality-checked requests of every check to
// every API of a simulator that answers a share of them wrong, and
// compares the prober's verdicts with the simulator's own count of the
// replies it got wrong: they must agree request for request, not only in
// share.
func TestQualityGroundTruth(t *testing.T) {
	sim, url := startSim(t, `
slots: 0
fixed: {ttft: 1ms, itl: 1ms}
reasoning_tokens: {distribution: fixed, value: 3}
faults: {wrong_answer_rate: 0.2, invalid_json_rate: 0.2, wrong_tool_rate: 0.2}
`)
	checks := map[string]string{
		"known_answer": `{known_answer: {}}`,
		"json_schema":  `{json_schema: {schema: {type: object, required: [city, temp_c], properties: {city: {type: string, minLength: 1}, temp_c: {type: number, minimum: -90, maximum: 60}}}}}`,
		"tool_call": `{tool_call: {prompt: "What is the weather in Paris?", tools: [{name: get_weather, parameters: {type: object, required: [city, unit],
			properties: {city: {type: string}, unit: {type: string, enum: [c, f]}}}}]}}`,
	}
	const n = 60
	for _, api := range []string{"chat", "responses", "messages"} {
		for name, check := range checks {
			t.Run(api+"/"+name, func(t *testing.T) {
				cfg, err := config.Load([]byte(fmt.Sprintf(`
targets: [{name: sim, url: %q, model: sim-model, api: %s}]
scenarios: [{name: s, input_tokens: 64, output_tokens: 64, slo: {ttft: 10s}, check: %s}]
canary: [{target: sim, scenario: s, rate: 1}]
`, url, api, check)), false)
				require.NoError(t, err)
				s := cfg.Scenarios[0]
				c := newClient(t, cfg.Targets[0])
				before := sim.Stats().Quality[api]
				failed := 0
				for i := range n {
					req := prober.NewRequest(s, config.Key{Target: "sim", Scenario: "s", Test: "canary"}, prober.NewCalibrator())
					r := &prober.Result{Scheduled: time.Now()}
					c.Do(t.Context(), req, r)
					require.Equal(t, prober.OutcomeOK, r.Outcome, "%d: %s", i, r.Error())
					require.NotNil(t, r.Check, "%d: an ok reply has a verdict", i)
					m := prober.Measure(r, s.SLOs())
					require.Equal(t, !r.Check.Passed, !m.Good, "%d: good is the check's verdict (the latency SLO holds)", i)
					// Chunks read at once share their time: the order is
					// in the chunks' indexes.
					require.Positive(t, r.FirstAnswer, "%d: reasoning comes first", i)
					require.GreaterOrEqual(t, m.TTFA, m.TTFT, "%d: reasoning comes first", i)
					if !r.Check.Passed {
						failed++
						require.Equal(t, []string{name}, m.Missed)
						require.NotEmpty(t, r.Check.Reason)
					}
				}
				after := sim.Stats().Quality[api]
				var wrong int64
				switch name {
				case "known_answer":
					wrong = after.AnswersWrong - before.AnswersWrong
					require.EqualValues(t, n, after.Questions-before.Questions)
				case "json_schema":
					wrong = after.StructuredInvalid - before.StructuredInvalid
					require.EqualValues(t, n, after.Structured-before.Structured)
				case "tool_call":
					wrong = after.ToolCallsWrong - before.ToolCallsWrong
					require.EqualValues(t, n, after.ToolCalls-before.ToolCalls)
				}
				require.EqualValues(t, wrong, failed, "the prober failed exactly the replies the simulator got wrong")
				require.Positive(t, failed, "20%% of %d replies are wrong", n)
			})
		}
	}
}
