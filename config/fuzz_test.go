package config

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/sloprober/sloprober/workload"
)

// FuzzLoadConfig: go test -run='^$' -fuzz=FuzzLoadConfig ./config/
//
// Whatever the bytes, Parse must not panic, and a configuration it accepts
// must keep every documented bound: lengths drawn in [1, MaxTokens], rates
// in [MinLoadRate, MaxLoadRate], caps within their limits. Its String()
// must load again into the same String(): what /config shows is a valid
// configuration. Relative paths resolve against testdata, so the seeds'
// traces are read; it is given absolute, so that resolved paths (which
// String() shows) resolve to themselves when loaded again.
func FuzzLoadConfig(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yml")
	if err != nil {
		f.Fatal(err)
	}
	dir, err := filepath.Abs("testdata")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range append(files, "../examples/production-like.yml") {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b, false, dir)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		checkBounds(t, c)
		s := c.String()
		c2, err := Parse([]byte(s), false, dir)
		if err != nil {
			t.Fatalf("String() does not load again: %v\n%s", err, s)
		}
		if s2 := c2.String(); s2 != s {
			t.Fatalf("String() changes when loaded again:\n%s\n---\n%s", s, s2)
		}
	})
}

func checkBounds(t *testing.T, c *Config) {
	t.Helper()
	if !(c.Global.MaxRate > 0 && c.Global.MaxRate <= MaxLoadRate) || c.Global.MaxInFlight < 1 || c.Global.MaxInFlight > MaxInFlightLimit {
		t.Fatalf("global %+v", c.Global)
	}
	for _, tg := range c.Targets {
		if len(tg.Model) > MaxModelNameBytes || len(tg.Name) > MaxNameBytes || strings.ContainsFunc(tg.Model, unicode.IsControl) ||
			tg.MaxContext < 0 || tg.MaxContext > workload.MaxTokens || tg.MaxInFlight < 1 || tg.MaxInFlight > MaxInFlightLimit {
			t.Fatalf("target %q out of bounds", tg.Name)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range c.Scenarios {
		for range 50 {
			for _, d := range []workload.Distribution{s.InputTokens, s.OutputTokens} {
				if n := d.Sample(r); n < 1 || n > workload.MaxTokens {
					t.Fatalf("scenario %q: drew %d from %+v", s.Name, n, d)
				}
			}
		}
		if s.Prefix != nil && s.Prefix.Tokens > workload.MaxTokens || s.Conversation != nil && s.Conversation.Turns > MaxTurns {
			t.Fatalf("scenario %q out of bounds", s.Name)
		}
	}
	for i, l := range c.Canary {
		rate := c.LoadRate(l)
		if math.IsNaN(rate) || rate <= 0 || rate > MaxLoadRate || l.Replay == nil && rate < MinLoadRate {
			t.Fatalf("canary[%d]: rate %g", i, rate)
		}
		if sh := l.Shape(); !(sh >= MinBurstiness && sh <= MaxBurstiness) {
			t.Fatalf("canary[%d]: shape %g", i, sh)
		}
		for _, sr := range c.ScenarioRates(l) {
			if math.IsNaN(sr) || math.IsInf(sr, 0) || sr < 0 {
				t.Fatalf("canary[%d]: scenario rate %g", i, sr)
			}
		}
	}
}
