package prober_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// recorder keeps every finished result, by scenario.
type recorder struct {
	mu      sync.Mutex
	results map[string][]*prober.Result
	dropped int
}

func (r *recorder) Observe(info prober.LoadInfo) prober.Observer { return &recObs{r, info.Scenario} }
func (r *recorder) Update(prober.LoadInfo)                       {}
func (r *recorder) Forget(prober.LoadInfo)                       {}

func (r *recorder) get(scenario string) []*prober.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*prober.Result(nil), r.results[scenario]...)
}

type recObs struct {
	r        *recorder
	scenario string
}

func (o *recObs) Scheduled()                    {}
func (o *recObs) Sent(time.Time, time.Duration) {}
func (o *recObs) Dropped(prober.DropReason) {
	o.r.mu.Lock()
	o.r.dropped++
	o.r.mu.Unlock()
}
func (o *recObs) Finished(res *prober.Result, _ *prober.Measurement) {
	o.r.mu.Lock()
	defer o.r.mu.Unlock()
	if o.r.results == nil {
		o.r.results = map[string][]*prober.Result{}
	}
	o.r.results[o.scenario] = append(o.r.results[o.scenario], res)
}

// runLoads applies a configuration (YAML, with %s the simulator's base URL,
// read from dir) and returns the recorder and a stop function.
func runLoads(t *testing.T, dir, yml, url string) (*recorder, func()) {
	t.Helper()
	file := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(yml, url)), 0o600))
	cfg, err := config.LoadFile(file, false)
	require.NoError(t, err)
	rec := &recorder{}
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	require.NoError(t, m.ApplyConfig(cfg))
	var once sync.Once
	stop := func() { once.Do(func() { m.Stop(5 * time.Second) }) }
	t.Cleanup(stop)
	return rec, stop
}

// TestReplayAgainstSimulator: a replay sends at the trace's relative times
// (scaled), with the trace's lengths, and its hash ids make real prefix
// cache hits in the server.
func TestReplayAgainstSimulator(t *testing.T) {
	sim := simtest.Start(t, `
slots: 4
prefill: {base: 1ms, per_token: 20us}
decode: {base: 5ms, per_sequence: 0s}
prefix_cache: {block_tokens: 512}
`)
	dir := t.TempDir()
	trace := `{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}
{"timestamp": 200, "input_length": 600, "output_length": 3, "hash_ids": [0, 3]}
{"timestamp": 400, "input_length": 1024, "output_length": 2, "hash_ids": [0, 1]}
{"timestamp": 1000, "input_length": 300, "output_length": 4, "hash_ids": [4]}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trace.jsonl"), []byte(trace), 0o600))
	rec, stop := runLoads(t, dir, `
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: replayed, ignore_eos: true}]
canary:
  - {target: sim, scenario: replayed, replay: {file: trace.jsonl, format: mooncake, speed: 2, loop: false}}
`, sim.URL)
	require.Eventually(t, func() bool { return len(rec.get("replayed")) == 4 }, 10*time.Second, 10*time.Millisecond)
	stop()
	rs := rec.get("replayed")
	sort.Slice(rs, func(i, j int) bool { return rs[i].Scheduled.Before(rs[j].Scheduled) })
	for i, want := range []struct {
		at            time.Duration
		in, out, hits int
	}{
		{0, 1100, 5, 0},
		{100 * time.Millisecond, 600, 3, 512},   // block 0 shared
		{200 * time.Millisecond, 1024, 2, 1023}, // blocks 0 and 1 (one token is always computed)
		{500 * time.Millisecond, 300, 4, 0},
	} {
		r := rs[i]
		require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
		require.Equal(t, want.at, r.Scheduled.Sub(rs[0].Scheduled), "request %d due at its trace time / speed", i)
		require.Less(t, r.Lag(), 50*time.Millisecond)
		require.Equal(t, want.in, r.Usage.PromptTokens, "request %d input", i)
		require.Equal(t, want.out, r.Usage.CompletionTokens, "request %d output", i)
		require.NotNil(t, r.Timings.CacheN)
		require.Equal(t, want.hits, *r.Timings.CacheN, "request %d prefix cache hits", i)
	}
}

// TestConversationHistory: each turn resends the history with the server's
// real replies, a think time after the previous reply.
func TestConversationHistory(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	sim := simtest.StartWith(t, "slots: 0\nfixed: {ttft: 5ms, itl: 1ms}\n", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/chat/completions" {
				h.ServeHTTP(w, r) // calibration
				return
			}
			b, _ := io.ReadAll(r.Body)
			var body map[string]any
			_ = json.Unmarshal(b, &body)
			mu.Lock()
			bodies = append(bodies, body)
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
			h.ServeHTTP(w, r)
		})
	})
	rec, stop := runLoads(t, t.TempDir(), `
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios:
  - {name: conv, input_tokens: 20, output_tokens: 5, ignore_eos: true, conversation: {turns: 3, think_time: 100ms}}
canary:
  - {target: sim, scenario: conv, rate: 6, arrival: constant}
`, sim.URL)
	// Conversations start at 6/3 = 2 per second; wait for two whole ones.
	require.Eventually(t, func() bool {
		n := 0
		for _, r := range rec.get("conv") {
			if r.Usage != nil && r.Usage.PromptTokens == 70 {
				n++
			}
		}
		return n >= 2
	}, 10*time.Second, 10*time.Millisecond)
	stop()

	byFirst := map[string][][]any{}
	mu.Lock()
	for _, b := range bodies {
		msgs := b["messages"].([]any)
		first := msgs[0].(map[string]any)["content"].(string)
		byFirst[first] = append(byFirst[first], msgs)
	}
	mu.Unlock()
	whole := 0
	for _, turns := range byFirst {
		if len(turns) < 3 {
			continue
		}
		whole++
		sort.Slice(turns, func(i, j int) bool { return len(turns[i]) < len(turns[j]) })
		for k, msgs := range turns {
			require.Len(t, msgs, 2*k+1, "turn %d sends the history", k+1)
			for i, m := range msgs {
				role := m.(map[string]any)["role"]
				require.Equal(t, map[bool]string{true: "user", false: "assistant"}[i%2 == 0], role)
			}
			if k > 0 {
				require.Equal(t, turns[k-1], msgs[:2*k-1], "the history is kept")
				reply := msgs[2*k-1].(map[string]any)["content"].(string)
				require.Len(t, reply, 5*4, "the previous reply: 5 tokens of 4 characters")
			}
		}
	}
	require.GreaterOrEqual(t, whole, 2)

	// The server counts the whole history; sloprober's estimate agrees.
	var prompt []int
	for _, r := range rec.get("conv") {
		require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
		require.Equal(t, r.InputTokens, r.Usage.PromptTokens)
		prompt = append(prompt, r.Usage.PromptTokens)
	}
	require.Subset(t, []int{20, 45, 70}, prompt)
	require.Contains(t, prompt, 45)
	// Later turns are due a think time after the previous reply ended.
	var firsts, seconds []*prober.Result
	for _, r := range rec.get("conv") {
		switch r.Usage.PromptTokens {
		case 20:
			firsts = append(firsts, r)
		case 45:
			seconds = append(seconds, r)
		}
	}
	for _, s := range seconds {
		ok := false
		for _, f := range firsts {
			gap := s.Scheduled.Sub(f.Sent.Add(f.Ended))
			if gap >= 100*time.Millisecond && gap < 150*time.Millisecond {
				ok = true
			}
		}
		require.True(t, ok, "a second turn is due 100ms after a first turn's reply")
	}
}

// TestCalibration: whatever the server's tokenizer, after a warm-up of at
// most 10 responses the input tokens it counts are within tolerance of the
// requested length (5%, or 8 tokens below 256) for at least 90% of requests,
// with /tokenize and from usage alone.
func TestCalibration(t *testing.T) {
	for _, tok := range []string{"{words: true}", "{chars_per_token: 2}", "{chars_per_token: 6}"} {
		for _, withTokenize := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s tokenize=%v", tok, withTokenize), func(t *testing.T) {
				t.Parallel()
				sim := simtest.StartWith(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\ntokenizer: "+tok+"\n", func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path == "/tokenize" && !withTokenize {
							http.NotFound(w, r)
							return
						}
						h.ServeHTTP(w, r)
					})
				})
				rec, stop := runLoads(t, t.TempDir(), `
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios:
  - {name: cal, input_tokens: {distribution: uniform, min: 50, max: 2000}, output_tokens: 1, ignore_eos: true}
canary:
  - {target: sim, scenario: cal, rate: 20, arrival: constant}
`, sim.URL)
				require.Eventually(t, func() bool { return len(rec.get("cal")) >= 50 }, 20*time.Second, 20*time.Millisecond)
				stop()
				rs := rec.get("cal")
				sort.Slice(rs, func(i, j int) bool { return rs[i].Sent.Before(rs[j].Sent) })
				within, n := 0, 0
				for _, r := range rs[10:] {
					require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
					n++
					if prober.InputWithinTolerance(r.InputTokens, r.Usage.PromptTokens) {
						within++
					}
				}
				require.GreaterOrEqual(t, float64(within), 0.9*float64(n), "%d of %d within tolerance", within, n)
			})
		}
	}
}

// forgetCounter counts Forget calls by scenario.
type forgetCounter struct {
	recorder
	mu     sync.Mutex
	forgot map[string]int
}

func (f *forgetCounter) Forget(info prober.LoadInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot[info.Scenario]++
}

// TestReloadAddingALoadKeepsTheOthers: a load added to a target changes the
// target's connection pools (here from one to two), not the loads already
// running on it: they keep their series and schedule.
func TestReloadAddingALoadKeepsTheOthers(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	load := func(yml string) *config.Config {
		cfg, err := config.Load([]byte(fmt.Sprintf(yml, sim.URL)), false)
		require.NoError(t, err)
		return cfg
	}
	one := load(`
global: {max_in_flight: 5000}
targets: [{name: sim, url: "%s/v1", model: sim-model, max_in_flight: 1000}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}, {name: b, input_tokens: 8, output_tokens: 2}]
canary: [{target: sim, scenario: a, rate: 20, arrival: constant}]
`)
	two := load(`
global: {max_in_flight: 5000}
targets: [{name: sim, url: "%s/v1", model: sim-model, max_in_flight: 1000}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}, {name: b, input_tokens: 8, output_tokens: 2}]
canary: [{target: sim, scenario: a, rate: 20, arrival: constant}, {target: sim, scenario: b, rate: 20, arrival: constant}]
`)
	f := &forgetCounter{forgot: map[string]int{}}
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.ApplyConfig(one))
	require.Eventually(t, func() bool { return len(f.get("a")) >= 3 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, m.ApplyConfig(two))
	require.Eventually(t, func() bool { return len(f.get("b")) >= 3 }, 5*time.Second, 5*time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Zero(t, f.forgot["a"], "load a was not restarted")
	for _, r := range f.get("a") {
		require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
	}
}

// TestTokenizeSmallContext: a server whose context is 1,024 tokens and
// whose /tokenize refuses longer prompts (as llama-server -c 1024 does) is
// calibrated from /tokenize all the same: the calibration prompts fit its
// context (before, the 1,024-word prompt was refused and calibration fell
// back to one token a word).
func TestTokenizeSmallContext(t *testing.T) {
	sim := simtest.StartWith(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\nmax_model_len: 1024\ntokenizer: {chars_per_token: 3}\n", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/tokenize" {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			var reply struct{ Count int }
			if err := json.Unmarshal(rec.Body.Bytes(), &reply); err == nil && reply.Count > 1024 {
				http.Error(w, `{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}`, http.StatusBadRequest)
				return
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
	})
	c := newClient(t, target(sim.URL+"/v1"))
	cal := prober.NewCalibrator()
	info := c.Tokenize(context.Background(), cal)
	require.Equal(t, 1024, info.Context)
	require.NotEmpty(t, info.Tokenize, "calibrated from /tokenize: %v", info.Err)
	require.NoError(t, info.Err)
}

// TestNoTokenize: a server without /tokenize (404 to each form) is told
// apart from one whose /tokenize fails: the first is logged in plain
// words, without its two 404s as an error.
func TestNoTokenize(t *testing.T) {
	for code, want := range map[int]bool{http.StatusNotFound: true, http.StatusInternalServerError: false} {
		sim := simtest.StartWith(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/tokenize" {
					http.Error(w, "no", code)
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		info := newClient(t, target(sim.URL+"/v1")).Tokenize(context.Background(), prober.NewCalibrator())
		require.Empty(t, info.Tokenize)
		require.Error(t, info.Err)
		require.Equal(t, want, prober.NoTokenize(info.Err), "HTTP %d: %v", code, info.Err)
	}
	require.False(t, prober.NoTokenize(nil))
}

// TestCheckInputLength: a quality check's additions (its question, its
// message, the tool definitions a chat template renders into the prompt)
// are measured from the server's counts, so that filler and additions make
// the requested length. The server here renders the tools into the prompt
// as llama.cpp's templates do: a 300-token tool_call request was counted
// about 2x before, every one a mismatch; after the first reply, the
// server's counts are within tolerance.
func TestCheckInputLength(t *testing.T) {
	for name, check := range map[string]string{
		"tool_call": `{tool_call: {prompt: "What is the weather in Paris?", tools: [{name: get_weather, description: "Current weather in a city, in Celsius or Fahrenheit, with the wind and the humidity.",
			parameters: {type: object, required: [city, unit], properties: {city: {type: string, description: "The city"}, unit: {type: string, enum: [c, f]}}}}]}}`,
		"known_answer": `{known_answer: {}}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sim := simtest.StartWith(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n", func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/v1/chat/completions" {
						body, _ := io.ReadAll(r.Body)
						var req map[string]any
						if json.Unmarshal(body, &req) == nil && req["tools"] != nil {
							tools, _ := json.Marshal(req["tools"])
							msgs := req["messages"].([]any)
							first := msgs[0].(map[string]any)
							first["content"] = strings.Join(strings.FieldsFunc(string(tools), func(c rune) bool { return strings.ContainsRune(`{}[]":, `, c) }), " ") + " " + first["content"].(string)
							body, _ = json.Marshal(req)
						}
						r.Body = io.NopCloser(bytes.NewReader(body))
						r.ContentLength = int64(len(body))
					}
					h.ServeHTTP(w, r)
				})
			})
			rec, stop := runLoads(t, t.TempDir(), `
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: s, input_tokens: 300, output_tokens: 8, check: `+check+`}]
canary: [{target: sim, scenario: s, rate: 20, arrival: constant}]
`, sim.URL)
			require.Eventually(t, func() bool { return len(rec.get("s")) >= 30 }, 20*time.Second, 10*time.Millisecond)
			stop()
			rs := rec.get("s")
			sort.Slice(rs, func(i, j int) bool { return rs[i].Sent.Before(rs[j].Sent) })
			mismatches, judged := 0, 0
			for _, r := range rs[5:] {
				require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
				require.False(t, r.InputUnjudged)
				judged++
				if prober.Measure(r, nil).InputMismatch {
					mismatches++
				}
			}
			require.LessOrEqual(t, mismatches, judged/10, "%d of %d requests off the requested length", mismatches, judged)
		})
	}
}
