package prober

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
)

// compiledCheck loads a scenario's check section from YAML, as the
// configuration does.
func compiledCheck(t *testing.T, check string) *config.CheckConfig {
	t.Helper()
	cfg, err := config.Load([]byte(`
targets: [{name: t, url: "http://127.0.0.1:1/v1", model: m}]
scenarios: [{name: s, check: `+check+`}]
canary: [{target: t, scenario: s, rate: 1}]
`), false)
	require.NoError(t, err)
	return cfg.Scenarios[0].Check
}

func TestJudge(t *testing.T) {
	schema := compiledCheck(t, `{json_schema: {schema: {type: object, required: [city, temp], properties: {city: {type: string}, temp: {type: number}}}}}`)
	tools := compiledCheck(t, `{tool_call: {prompt: "Weather in Paris?", tools: [
		{name: get_time},
		{name: get_weather, parameters: {type: object, required: [city], properties: {city: {type: string}}, additionalProperties: false}}],
		expect: get_weather}}`)
	answer := func(a config.KnownAnswer) *CheckRequest {
		if a.Regex != "" {
			a.Compiled = regexp.MustCompile(a.Regex)
		}
		return &CheckRequest{Name: config.CheckKnownAnswer, Answer: &a, cfg: &config.CheckConfig{KnownAnswer: &config.KnownAnswerCheck{}}}
	}
	num := func(v float64) *float64 { return &v }
	str := func(s string) *string { return &s }
	ok := func(reply string, calls ...ToolCall) *Result {
		return &Result{Outcome: OutcomeOK, Chunks: []time.Duration{time.Millisecond}, Reply: reply, ToolCalls: calls}
	}
	for _, tc := range []struct {
		name    string
		check   *CheckRequest
		r       *Result
		passed  bool
		reason  string
		excerpt string
	}{
		{name: "schema passes", check: &CheckRequest{Name: "json_schema", cfg: schema}, r: ok(` {"city": "Paris", "temp": 21.5} `), passed: true},
		{name: "schema: not JSON", check: &CheckRequest{Name: "json_schema", cfg: schema}, r: ok(`{"city": "Paris", "temp": 21`),
			reason: "the reply is not JSON", excerpt: `{"city": "Paris", "temp": 21`},
		{name: "schema: trailing text", check: &CheckRequest{Name: "json_schema", cfg: schema}, r: ok(`{"city": "Paris", "temp": 1} Hope this helps!`),
			reason: "the reply is not JSON"},
		{name: "schema: missing field", check: &CheckRequest{Name: "json_schema", cfg: schema}, r: ok(`{"city": "Paris"}`),
			reason: "does not follow the schema"},
		{name: "schema: a long reply's excerpt is bounded", check: &CheckRequest{Name: "json_schema", cfg: schema}, r: ok(strings.Repeat("\x1b[31mx", 1000)),
			reason: "the reply is not JSON"},
		{name: "schema: the reason names the first error and counts the others", check: &CheckRequest{Name: "json_schema", cfg: schema}, r: ok(`{"city": 7, "temp": "warm"}`),
			reason: "at '/city': got number, want string (and 1 more errors)"},
		{name: "tool called right", check: &CheckRequest{Name: "tool_call", cfg: tools}, r: ok("", ToolCall{"get_time", ""}, ToolCall{"get_weather", `{"city": "Paris"}`}), passed: true},
		{name: "tool: wrong tool", check: &CheckRequest{Name: "tool_call", cfg: tools}, r: ok("", ToolCall{"get_time", "{}"}),
			reason: "no call to get_weather; called get_time"},
		{name: "tool: text instead", check: &CheckRequest{Name: "tool_call", cfg: tools}, r: ok("It is sunny."),
			reason: "no tool call: the reply is text", excerpt: "It is sunny."},
		{name: "tool: arguments not JSON", check: &CheckRequest{Name: "tool_call", cfg: tools}, r: ok("", ToolCall{"get_weather", `{"city": `}),
			reason: "the arguments of get_weather are not JSON", excerpt: `{"city":`},
		{name: "tool: arguments off the schema", check: &CheckRequest{Name: "tool_call", cfg: tools}, r: ok("", ToolCall{"get_weather", `{"town": "Paris"}`}),
			reason: "do not follow its parameters"},
		{name: "answer: number", check: answer(config.KnownAnswer{Number: num(5198)}), r: ok("5198"), passed: true},
		{name: "answer: number in a sentence, with a separator", check: answer(config.KnownAnswer{Number: num(5198)}), r: ok("The answer is 5,198."), passed: true},
		{name: "answer: number within tolerance", check: answer(config.KnownAnswer{Number: num(3.14159), Tolerance: 0.01}), r: ok("about 3.14"), passed: true},
		{name: "answer: wrong number", check: answer(config.KnownAnswer{Number: num(5198)}), r: ok("5199 is the result"),
			reason: "wrong answer: expected 5198, found 5199", excerpt: "5199 is the result"},
		{name: "answer: negative", check: answer(config.KnownAnswer{Number: num(-12)}), r: ok("-12"), passed: true},
		{name: "answer: no number", check: answer(config.KnownAnswer{Number: num(1)}), r: ok("I cannot say."), reason: "found no number"},
		{name: "answer: exact", check: answer(config.KnownAnswer{Exact: str("Paris")}), r: ok(" Paris\n"), passed: true},
		{name: "answer: not exact", check: answer(config.KnownAnswer{Exact: str("Paris")}), r: ok("Paris, France"), reason: `expected exactly "Paris"`},
		{name: "answer: regex", check: answer(config.KnownAnswer{Regex: `(?i)\bparis\b`}), r: ok("It is PARIS."), passed: true},
		{name: "answer: regex misses", check: answer(config.KnownAnswer{Regex: `(?i)\bparis\b`}), r: ok("Lyon"), reason: "expected a match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.check.Judge(tc.r)
			require.NotNil(t, v)
			require.Equal(t, tc.passed, v.Passed, v.Reason)
			require.Equal(t, tc.check.Name, v.Name)
			if tc.passed {
				require.Empty(t, v.Reason)
				return
			}
			require.Contains(t, v.Reason, tc.reason)
			require.Contains(t, v.Excerpt, tc.excerpt)
			require.LessOrEqual(t, len(v.Excerpt), MaxExcerptBytes)
			require.NotContains(t, v.Excerpt, "\x1b", "printable")
		})
	}
	// A reply of reasoning only fails every check, saying so.
	for _, c := range []*CheckRequest{{Name: "json_schema", cfg: schema}, {Name: "tool_call", cfg: tools}, answer(config.KnownAnswer{Exact: str("")})} {
		r := ok("")
		r.FirstAnswer = -1
		v := c.Judge(r)
		require.False(t, v.Passed, c.Name)
		require.Equal(t, "no answer: the reply is reasoning only, without answer text or a tool call", v.Reason, c.Name)
	}
	// Failed requests and requests without text have no verdict: they
	// are bad already.
	c := &CheckRequest{Name: "json_schema", cfg: schema}
	require.Nil(t, c.Judge(&Result{Outcome: OutcomeHTTP5xx}))
	require.Nil(t, c.Judge(&Result{Outcome: OutcomeOK}))
	require.Nil(t, (*CheckRequest)(nil).Judge(ok("x")))
}

// TestJudgeManyErrors: a reply with an error in every item of a large
// array is judged at the cost of its validation; the reason names the
// first error, not the whole tree (whose text, built and then cut to 512
// bytes, cost 4 times the allocations of decoding and validating the
// reply, and most of the time: 7 s and 1.9 GB for a 4 MiB reply).
func TestJudgeManyErrors(t *testing.T) {
	check := &CheckRequest{Name: "json_schema", cfg: compiledCheck(t, `{json_schema: {schema: {type: object, properties: {items: {type: array, items: {type: string}}}}}}`)}
	const n = 20_000
	r := &Result{Outcome: OutcomeOK, Chunks: []time.Duration{time.Millisecond}, Reply: `{"items": [` + strings.Repeat("0,", n-1) + `0]}`}
	v := check.Judge(r)
	require.False(t, v.Passed)
	require.Equal(t, fmt.Sprintf("the reply does not follow the schema: at '/items/0': got number, want string (and %d more errors)", n-1), v.Reason)
	// The reason's text costs no allocation an error: Judge allocates
	// little more than the validation itself.
	validate := testing.AllocsPerRun(3, func() {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(r.Reply))
		require.NoError(t, err)
		require.Error(t, check.cfg.JSONSchema.Compiled.Validate(doc))
	})
	judge := testing.AllocsPerRun(3, func() { check.Judge(r) })
	require.Less(t, judge, validate+100, "allocations: Judge %v, decoding and validation %v", judge, validate)
}

// TestMeasureCheck: a failed check is a missed SLO named after the check,
// the outcome stays ok, and the request is not good.
func TestMeasureCheck(t *testing.T) {
	slos := []config.SLO{{Name: "ttft", Threshold: time.Second}, {Name: config.CheckKnownAnswer}}
	r := &Result{Outcome: OutcomeOK, Chunks: []time.Duration{time.Millisecond}, FirstAnswer: 0}
	r.Check = &CheckVerdict{Name: config.CheckKnownAnswer, Passed: false}
	m := Measure(r, slos)
	require.Equal(t, OutcomeOK, m.Outcome)
	require.False(t, m.Good)
	require.Equal(t, []string{config.CheckKnownAnswer}, m.Missed)
	r.Check.Passed = true
	m = Measure(r, slos)
	require.True(t, m.Good)
	require.Empty(t, m.Missed)
}

// TestBuiltinQuestion: the built-in questions are arithmetic whose answer
// the question itself determines (the simulator evaluates it on its own).
func TestBuiltinQuestion(t *testing.T) {
	re := regexp.MustCompile(`^What is (\d+) ([-+*]) (\d+)\? Reply with the number only\.$`)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		q, v := BuiltinQuestion(rng)
		m := re.FindStringSubmatch(q)
		require.NotNil(t, m, q)
		a, b := atoi(t, m[1]), atoi(t, m[3])
		want := map[string]int{"+": a + b, "-": a - b, "*": a * b}[m[2]]
		require.Equal(t, float64(want), v, q)
	}
}

func atoi(t *testing.T, s string) int {
	n := 0
	for _, c := range s {
		n = 10*n + int(c-'0')
	}
	return n
}
