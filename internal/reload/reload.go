// Package reload applies a configuration to the parts of a program all or
// nothing: each part subscribes once (as alertmanager's config coordinator
// and Prometheus' reloaders have them), and a reload first prepares the
// configuration in every part, building what can fail (clients, TLS
// files, schedules) without changing what is in force, then commits every
// part, or, if one failed, discards what the others prepared. A bad
// configuration thus changes nothing anywhere, and no part calls back into
// another while holding its own lock.
package reload

import (
	"fmt"
	"slices"
	"sync"

	"github.com/sloprober/sloprober/config"
)

// Change is a part's configuration, prepared and not yet in force. Commit
// puts it in force and must not fail; Discard drops it. A reload calls
// exactly one of the two.
type Change interface {
	Commit()
	Discard()
}

// Prepare is a part's first phase: it checks cfg and builds what can fail,
// changing nothing in force.
type Prepare func(cfg *config.Config) (Change, error)

// Coordinator is the parts of a program that a configuration applies to.
// It is safe for concurrent use; reloads run one at a time.
type Coordinator struct {
	mu    sync.Mutex
	parts []part
}

type part struct {
	name    string
	prepare Prepare
}

// Subscribe adds a part, once, before the first Apply. name says what it is
// where the coordinator itself has to say so (a part that broke the
// protocol); a part's errors name what failed themselves.
func (c *Coordinator) Subscribe(name string, prepare Prepare) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.parts = append(c.parts, part{name: name, prepare: prepare})
}

// Apply prepares cfg in every part, in the order they subscribed; if every
// part prepared it, it commits them in the same order, else it discards
// those prepared, in reverse order, and returns the first error. The error
// is the part's own, unwrapped: parts name what failed in their errors.
func (c *Coordinator) Apply(cfg *config.Config) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	changes := make([]Change, 0, len(c.parts))
	committed := false
	defer func() {
		// A failed prepare, or a panic in one: what the others prepared
		// is dropped, in reverse order, so that none holds anything (the
		// loads' part holds tests' changes until then).
		if !committed {
			for _, prepared := range slices.Backward(changes) {
				prepared.Discard()
			}
		}
	}()
	for _, p := range c.parts {
		ch, err := p.prepare(cfg)
		if err != nil {
			return err
		}
		if ch == nil {
			return fmt.Errorf("reload: part %q prepared no change and no error", p.name)
		}
		changes = append(changes, ch)
	}
	committed = true
	for _, ch := range changes {
		ch.Commit()
	}
	return nil
}

// Of makes a part's prepare method a Prepare: Of(engines.Prepare).
func Of[C Change](prepare func(*config.Config) (C, error)) Prepare {
	return func(cfg *config.Config) (Change, error) {
		c, err := prepare(cfg)
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return c, nil
	}
}

// Always is the Prepare of a part that cannot fail: apply runs at the
// commit, in the part's turn, or not at all.
func Always(apply func(*config.Config)) Prepare {
	return func(cfg *config.Config) (Change, error) {
		return commitFunc(func() { apply(cfg) }), nil
	}
}

// commitFunc is a Change that runs a function at its commit.
type commitFunc func()

func (f commitFunc) Commit()  { f() }
func (f commitFunc) Discard() {}
