package capacity

import (
	"cmp"
	"slices"

	"github.com/sloprober/sloprober/prober"
)

// maxIdentityValues bounds the distinct values kept of each statement a
// server makes about itself; the rest are counted as Other. A fleet behind
// one URL may answer with a few fingerprints; a server that sends a new
// one with every reply must not grow a run without bound.
const maxIdentityValues = 8

// identityCounts tallies what replies said; the collector's mutex guards
// it.
type identityCounts struct {
	servers, models, fingerprints tally
}

func (c *identityCounts) add(r *prober.Result) {
	c.servers.add(r.ServerHeader)
	c.models.add(r.Model)
	c.fingerprints.add(r.SystemFingerprint)
}

func (c *identityCounts) result() *Identity {
	return &Identity{Servers: c.servers.result(), ReplyModels: c.models.result(), Fingerprints: c.fingerprints.result()}
}

type tally struct {
	counts map[string]int
	other  int
}

func (t *tally) add(v string) {
	if v == "" {
		return
	}
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	if _, ok := t.counts[v]; !ok && len(t.counts) >= maxIdentityValues {
		t.other++
		return
	}
	t.counts[v]++
}

// result returns the values by replies, most first.
func (t *tally) result() []Said {
	var out []Said
	for v, n := range t.counts {
		out = append(out, Said{Value: v, Replies: n})
	}
	slices.SortFunc(out, func(a, b Said) int {
		return cmp.Or(cmp.Compare(b.Replies, a.Replies), cmp.Compare(a.Value, b.Value))
	})
	if t.other > 0 {
		out = append(out, Said{Replies: t.other, Other: true})
	}
	return out
}
