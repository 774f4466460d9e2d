package capacity

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/prober"
)

// faultPlan runs a soak's fault plan: a step with simulator faults sets
// them through PUT /sim/faults and restores the faults it had at the
// step's end; a step with a fault action runs it through a
// faultaction.Runner, and its undo at the end.
type faultPlan struct {
	admin  string // the simulator's /sim/faults; "" when no step sets faults
	client *http.Client
	runner *faultaction.Runner
	logger *slog.Logger

	mu     sync.Mutex
	events []FaultEvent
	// ran are the steps' times as they ran: start when the step was
	// applied (its action sent), end when it was undone.
	ran map[int]stepTimes
	// notRun says, by step, how a step did not run as configured: its
	// do failed, it began late, it was in place for less than its for,
	// or it began while another step's undo was still under way.
	notRun map[int]string
	// undoing are the action steps whose undo is under way.
	undoing map[int]bool
}

// planSlack is how far a step may begin after its at, or fall short of
// its for, and still have run as configured: a second, or a tenth of its
// for if that is more (an action's own call takes tens of milliseconds).
const planSlack = time.Second

// stepTimes are when a step that took effect began and ended, and
// whether it was a dry run (nothing was done).
type stepTimes struct {
	start, end time.Time
	dryRun     bool
}

// newFaultPlan returns the plan's applier for a target's base URL
// (http://host:port/v1: a simulator serves /sim/faults at its root) and
// the runner of its fault actions. Exec actions the runner does not allow
// are refused here, when the soak starts, not hours in.
func newFaultPlan(target string, steps []config.FaultStep, runner *faultaction.Runner, logger *slog.Logger) (*faultPlan, error) {
	if runner == nil {
		runner = &faultaction.Runner{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &faultPlan{client: &http.Client{Timeout: 5 * time.Second}, runner: runner, logger: logger, ran: map[int]stepTimes{}, notRun: map[int]string{}, undoing: map[int]bool{}}
	for i := range steps {
		st := &steps[i]
		if st.Kind() != config.FaultSimulator {
			if err := runner.Check(&st.Action); err != nil {
				return nil, fmt.Errorf("step %d: %w", i, err)
			}
			continue
		}
		if p.admin != "" {
			continue
		}
		u, err := url.Parse(target)
		if err != nil {
			return nil, err
		}
		u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") + "/sim/faults"
		u.RawQuery, u.Fragment = "", ""
		p.admin = u.String()
	}
	return p, nil
}

// run applies the steps at their times from start until ctx is done; it
// ends (restores or undoes) a step in force when ctx ends. Each step
// runs on its own timer: an undo that hangs does not push the next step
// back (check config refuses steps that overlap). Simulator steps still
// take turns: a step's restore must not land after the next one's set.
func (p *faultPlan) run(ctx context.Context, start time.Time, steps []config.FaultStep) {
	var wg sync.WaitGroup
	var prevSim chan struct{} // the last simulator step's end
	for i := range steps {
		st := &steps[i]
		var after, done chan struct{}
		if st.Kind() == config.FaultSimulator {
			after, done = prevSim, make(chan struct{})
			prevSim = done
		}
		wg.Go(func() {
			if done != nil {
				defer close(done)
			}
			if !prober.Sleep(ctx, time.Until(start.Add(time.Duration(st.At)))) {
				return
			}
			if st.Kind() != config.FaultSimulator {
				p.runAction(ctx, i, start, st)
				return
			}
			if after != nil {
				select {
				case <-after:
				case <-ctx.Done():
					return
				}
			}
			p.runSimulator(ctx, i, start, st)
		})
	}
	wg.Wait()
}

// runAction runs a step's fault action, and its undo at the step's end
// (or when ctx ends first: a gateway must not keep a replica out after
// the soak).
func (p *faultPlan) runAction(ctx context.Context, i int, start time.Time, st *config.FaultStep) {
	began := time.Now()
	// Steps run on their own timers: one whose undo hangs may still be
	// undoing when the next begins (two replicas out where the plan
	// had one, or the first back in the middle of the second).
	p.mu.Lock()
	undoing := slices.Sorted(maps.Keys(p.undoing))
	p.mu.Unlock()
	for _, j := range undoing {
		p.setNotRun(i, st, fmt.Sprintf("began while step %d's undo was still under way", j))
	}
	e := p.runner.Do(ctx, &st.Action)
	p.recordEvent(i, e)
	inPlace := time.Now()
	ok := prober.Sleep(ctx, time.Until(start.Add(time.Duration(st.At+st.For))))
	ended := time.Now()
	if st.Action.Undoable() {
		// Even after a failed action (it may have half done its work)
		// and when the soak ends: the runner bounds the undo by the
		// action's own timeout.
		p.mu.Lock()
		p.undoing[i] = true
		p.mu.Unlock()
		p.recordEvent(i, p.runner.Undo(context.WithoutCancel(ctx), &st.Action))
		p.mu.Lock()
		delete(p.undoing, i)
		p.mu.Unlock()
	}
	if e.Failed() {
		// A step that failed did nothing to measure.
		p.setNotRun(i, st, "its do failed: "+e.Error)
		return
	}
	p.mu.Lock()
	p.ran[i] = stepTimes{start: began, end: ended, dryRun: e.DryRun}
	p.mu.Unlock()
	if ok {
		p.checkTimes(i, start, st, began, inPlace, ended)
	}
}

// checkTimes notes a step that began later than planSlack after its at,
// or was in place (from its do's end to its end) for less than its for
// by more than planSlack: "began 7s late; in place 3ms instead of 3s (its
// do took 10.2s)".
func (p *faultPlan) checkTimes(i int, start time.Time, st *config.FaultStep, began, inPlace, ended time.Time) {
	slack := max(planSlack, time.Duration(st.For)/10)
	var notes []string
	if late := began.Sub(start.Add(time.Duration(st.At))); late > slack {
		notes = append(notes, fmt.Sprintf("began %s late", late.Round(time.Millisecond)))
	}
	if held := ended.Sub(inPlace); time.Duration(st.For)-held > slack {
		notes = append(notes, fmt.Sprintf("in place %s instead of %s (its do took %s)", max(held, 0).Round(time.Millisecond),
			time.Duration(st.For), inPlace.Sub(began).Round(time.Millisecond)))
	}
	if len(notes) > 0 {
		p.setNotRun(i, st, strings.Join(notes, "; "))
	}
}

// setNotRun records how step i did not run as configured, after what
// was recorded of it already.
func (p *faultPlan) setNotRun(i int, st *config.FaultStep, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if note, ok := p.notRun[i]; ok {
		p.notRun[i] = note + "; " + why
		return
	}
	p.notRun[i] = fmt.Sprintf("step %d (%s at %s): %s", i, stepKind(st), time.Duration(st.At), why)
}

// stepKind names a step for a note: "simulator faults", "exec", "http".
func stepKind(st *config.FaultStep) string {
	if st.Kind() == config.FaultSimulator {
		return "simulator faults"
	}
	return st.Action.Kind()
}

// NotRun says, step by step in order, how the plan did not run as
// configured; empty when it did.
func (p *faultPlan) NotRun() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, i := range slices.Sorted(maps.Keys(p.notRun)) {
		out = append(out, p.notRun[i])
	}
	return out
}

// recordEvent keeps and logs what a fault action did.
func (p *faultPlan) recordEvent(i int, e faultaction.Event) {
	args := []any{"step", i, "kind", e.Kind, "action", e.Action, "description", e.Description, "seconds", e.Seconds}
	if e.Error != "" {
		p.logger.Warn("Fault action failed", append(args, "err", e.Error)...)
	} else {
		p.logger.Info("Fault action", append(args, "result", e.Result, "dry_run", e.DryRun)...)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, FaultEvent{At: e.At, Step: i, Kind: e.Kind, Action: e.Action, Description: e.Description,
		Result: e.Result, DryRun: e.DryRun, Error: e.Error, Seconds: e.Seconds})
}

// runSimulator sets a step's simulator faults and restores the faults the
// simulator had at the step's end (or when ctx ends first).
func (p *faultPlan) runSimulator(ctx context.Context, i int, start time.Time, st *config.FaultStep) {
	began := time.Now()
	before, err := p.get(ctx)
	if err != nil {
		p.record(i, "set", "", err)
		p.setNotRun(i, st, "its faults were not set: "+err.Error())
		return
	}
	b, err := json.Marshal(stringKeys(st.Set))
	if err == nil {
		// The simulator puts the faults back by itself a little
		// after the step should end: a prober that dies during the
		// step (kill -9) must not leave it failing for good.
		err = p.put(ctx, b, time.Duration(st.For)+faultExpirySlack)
	}
	inPlace := time.Now()
	p.record(i, "set", string(b), err)
	if err != nil {
		p.setNotRun(i, st, "its faults were not set: "+err.Error())
		return
	}
	ok := prober.Sleep(ctx, time.Until(start.Add(time.Duration(st.At+st.For))))
	ended := time.Now()
	// Restore even when the soak ends: the simulator must not keep
	// failing after it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	p.record(i, "restored", compactJSON(before), p.put(rctx, before, 0))
	cancel()
	p.mu.Lock()
	p.ran[i] = stepTimes{start: inPlace, end: ended}
	p.mu.Unlock()
	if ok {
		p.checkTimes(i, start, st, began, inPlace, ended)
	}
}

// Ran returns the times of the steps that ran, by index.
func (p *faultPlan) Ran() map[int]stepTimes {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.ran)
}

func (p *faultPlan) record(i int, action, faults string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := FaultEvent{At: time.Now(), Step: i, Kind: config.FaultSimulator, Action: action, Faults: strings.TrimSpace(faults)}
	if err != nil {
		e.Error = err.Error()
		p.logger.Warn("Fault plan step failed", "step", i, "action", action, "err", err)
	} else {
		p.logger.Info("Fault plan step", "step", i, "action", action, "faults", e.Faults)
	}
	p.events = append(p.events, e)
}

// Events returns what the plan did.
func (p *faultPlan) Events() []FaultEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	// In the order they began: steps on their own timers end out of
	// order (a slow undo after the next step's do).
	return slices.SortedStableFunc(slices.Values(p.events), func(a, b FaultEvent) int { return a.At.Compare(b.At) })
}

func (p *faultPlan) get(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.admin, nil)
	if err != nil {
		return nil, err
	}
	return p.do(req)
}

// faultExpirySlack is how long after a step's end the simulator restores
// its faults by itself (PUT /sim/faults?for=): the plan restores them at
// the end, unless its prober is gone.
const faultExpirySlack = 5 * time.Second

// put sets the simulator's faults, for d (0: until set again).
func (p *faultPlan) put(ctx context.Context, body []byte, d time.Duration) error {
	u := p.admin
	if d > 0 {
		u += "?for=" + url.QueryEscape(d.String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	_, err = p.do(req)
	return err
}

// do sends an admin request; the answer is bounded to 1 MiB.
func (p *faultPlan) do(req *http.Request) ([]byte, error) {
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, p.admin, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, p.admin, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", req.Method, p.admin, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// compactJSON writes the simulator's faults (JSON) on one line, like the
// plan's own steps, or as they are if they do not parse.
func compactJSON(j []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, j); err != nil {
		return string(j)
	}
	return b.String()
}

// stringKeys turns the maps YAML decodes (map[any]any) into ones JSON
// encodes (map[string]any).
func stringKeys(v any) any {
	switch m := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, x := range m {
			out[fmt.Sprint(k)] = stringKeys(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(m))
		for k, x := range m {
			out[k] = stringKeys(x)
		}
		return out
	case []any:
		out := make([]any, len(m))
		for i, x := range m {
			out[i] = stringKeys(x)
		}
		return out
	}
	return v
}

// mustJSON is v in JSON, or its Go form if it has none.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(fmt.Sprint(v))
	}
	return b
}
