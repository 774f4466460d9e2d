package reload_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/reload"
)

// recorder records what a reload did to its parts, in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

type change struct {
	r    *recorder
	name string
}

func (c change) Commit()  { c.r.add("commit " + c.name) }
func (c change) Discard() { c.r.add("discard " + c.name) }

// part is a part that prepares, failing with err.
func (r *recorder) part(name string, err error) reload.Prepare {
	return func(*config.Config) (reload.Change, error) {
		r.add("prepare " + name)
		if err != nil {
			return nil, err
		}
		return change{r, name}, nil
	}
}

// TestApply: every part is prepared, then every part committed, in the
// order they subscribed; a part that fails stops the preparing, the parts
// prepared before it are discarded in reverse order, nothing is committed,
// and its error is returned as it is.
func TestApply(t *testing.T) {
	bad := errors.New("tracing: tls_config: open ca.pem: no such file")
	for _, tc := range []struct {
		name   string
		failAt string
		want   []string
	}{
		{"all good", "", []string{"prepare a", "prepare b", "prepare c", "commit a", "commit b", "always", "commit c"}},
		{"the last fails", "c", []string{"prepare a", "prepare b", "prepare c", "discard b", "discard a"}},
		{"the first fails", "a", []string{"prepare a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			var c reload.Coordinator
			var applied *config.Config
			for _, name := range []string{"a", "b"} {
				var err error
				if name == tc.failAt {
					err = bad
				}
				c.Subscribe(name, r.part(name, err))
			}
			c.Subscribe("always", reload.Always(func(cfg *config.Config) { applied = cfg; r.add("always") }))
			var err error
			if tc.failAt == "c" {
				err = bad
			}
			c.Subscribe("c", r.part("c", err))

			cfg := &config.Config{}
			err = c.Apply(cfg)
			if tc.failAt == "" {
				require.NoError(t, err)
				require.Same(t, cfg, applied)
			} else {
				require.Same(t, bad, err)
				require.Nil(t, applied, "a part that cannot fail is not applied by a failed reload")
			}
			require.Equal(t, tc.want, r.events)
		})
	}
}

// TestApplyPanics: a part that panics while preparing leaves nothing
// prepared behind (the loads' part holds tests' changes until its change
// is dropped); a part that prepares nothing without an error is an error,
// not a nil change committed.
func TestApplyPanics(t *testing.T) {
	r := &recorder{}
	var c reload.Coordinator
	c.Subscribe("a", r.part("a", nil))
	c.Subscribe("b", func(*config.Config) (reload.Change, error) { panic("b broke") })
	require.PanicsWithValue(t, "b broke", func() { _ = c.Apply(&config.Config{}) })
	require.Equal(t, []string{"prepare a", "discard a"}, r.events)

	r = &recorder{}
	var d reload.Coordinator
	d.Subscribe("a", r.part("a", nil))
	d.Subscribe("nothing", func(*config.Config) (reload.Change, error) { return nil, nil })
	require.EqualError(t, d.Apply(&config.Config{}), `reload: part "nothing" prepared no change and no error`)
	require.Equal(t, []string{"prepare a", "discard a"}, r.events)
}
