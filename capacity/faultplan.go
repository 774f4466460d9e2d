package capacity

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// faultPlan applies a soak's fault plan to its simulator target through
// PUT /sim/faults, restoring the faults it had after each step.
type faultPlan struct {
	admin  string // the simulator's /sim/faults
	client *http.Client

	mu     sync.Mutex
	events []FaultEvent
}

// newFaultPlan returns the plan's applier for a target's base URL
// (http://host:port/v1): the simulator serves /sim/faults at its root.
func newFaultPlan(target string) (*faultPlan, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") + "/sim/faults"
	u.RawQuery, u.Fragment = "", ""
	return &faultPlan{admin: u.String(), client: &http.Client{Timeout: 5 * time.Second}}, nil
}

// run applies the steps at their times from start until ctx is done; it
// restores the faults of a step in force when ctx ends.
func (p *faultPlan) run(ctx context.Context, start time.Time, steps []config.FaultStep) {
	for _, st := range steps {
		if !prober.Sleep(ctx, time.Until(start.Add(time.Duration(st.At)))) {
			return
		}
		before, err := p.get(ctx)
		if err != nil {
			p.record("set", "", err)
			continue
		}
		b, err := json.Marshal(stringKeys(st.Set))
		if err == nil {
			// The simulator puts the faults back by itself a little
			// after the step should end: a prober that dies during the
			// step (kill -9) must not leave it failing for good.
			err = p.put(ctx, b, time.Duration(st.For)+faultExpirySlack)
		}
		p.record("set", string(b), err)
		if err != nil {
			continue
		}
		ok := prober.Sleep(ctx, time.Until(start.Add(time.Duration(st.At+st.For))))
		// Restore even when the soak ends: the simulator must not keep
		// failing after it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		p.record("restored", compactJSON(before), p.put(rctx, before, 0))
		cancel()
		if !ok {
			return
		}
	}
}

func (p *faultPlan) record(action, faults string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := FaultEvent{At: time.Now(), Action: action, Faults: strings.TrimSpace(faults)}
	if err != nil {
		e.Error = err.Error()
	}
	p.events = append(p.events, e)
}

// Events returns what the plan did.
func (p *faultPlan) Events() []FaultEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]FaultEvent(nil), p.events...)
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
