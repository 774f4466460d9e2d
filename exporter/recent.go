package exporter

import (
	"sync"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/safetext"
	"github.com/sloprober/sloprober/prober"
)

// RecentResult is a summary of one finished request, for the landing page.
type RecentResult struct {
	Time      time.Time
	RequestID string
	Outcome   prober.Outcome
	Status    int
	TTFT      time.Duration // 0 if not observed
	E2E       time.Duration
	TPOT      time.Duration
	Tokens    int
	Good      bool
	Missed    []string
	// Error is what went wrong, whole: the prober keeps a server's message
	// up to prober.MaxServerMessageBytes, and the page escapes it.
	Error string
}

// maxErrorBytes bounds the error kept with a recent result: a server's
// message (bounded by the prober) with the prober's own words around it
// fits; it guards the memory of the store against any longer text.
const maxErrorBytes = 2 * prober.MaxServerMessageBytes

// boundError cuts s to maxErrorBytes at a rune boundary.
func boundError(s string) string { return safetext.Truncate(s, maxErrorBytes) }

// recentLoad keeps the last results of a load, and apart from them its last
// failures (results that were not good), so a failure stays visible after
// many successes.
type recentLoad struct {
	all, failed      []RecentResult
	nAll, nFailed    int
	total, totalGood int64
	trend            trend
}

// Recent keeps the last results of every load, for the landing page. It
// implements prober.ObserverFactory: cmd composes it with the metrics
// (prober.Fanout).
type Recent struct {
	size  int
	mu    sync.Mutex
	loads map[config.Key]*recentLoad
}

var _ prober.ObserverFactory = (*Recent)(nil)

// NewRecent keeps size results, and size failures, per load.
func NewRecent(size int) *Recent {
	return &Recent{size: size, loads: map[config.Key]*recentLoad{}}
}

// Observe implements prober.ObserverFactory: it starts keeping the results
// of a load (those already kept stay) and returns an observer that records
// its finished requests.
func (r *Recent) Observe(info prober.LoadInfo) prober.Observer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loads[info.Key] == nil {
		r.loads[info.Key] = &recentLoad{trend: newTrend()}
	}
	return recentObserver{r: r, key: info.Key}
}

// Update implements prober.ObserverFactory: a load changed in place keeps
// its results.
func (r *Recent) Update(prober.LoadInfo) {}

// Forget implements prober.ObserverFactory: it drops a load's results.
func (r *Recent) Forget(info prober.LoadInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.loads, info.Key)
}

// recentObserver records the finished requests of one load.
type recentObserver struct {
	r   *Recent
	key config.Key
}

func (recentObserver) Scheduled()                    {}
func (recentObserver) Dropped(prober.DropReason)     {}
func (recentObserver) Sent(time.Time, time.Duration) {}

func (o recentObserver) Finished(res *prober.Result, m *prober.Measurement) {
	o.r.add(o.key, res, m)
}

// add records a finished request of a load it keeps; one it has forgotten
// (a request that ended after its load was removed) is not kept.
func (r *Recent) add(k config.Key, res *prober.Result, m *prober.Measurement) {
	rr := RecentResult{
		Time: res.Sent, RequestID: res.RequestID, Outcome: res.Outcome, Status: res.StatusCode,
		Tokens: m.OutputTokens, Good: m.Good, Missed: m.Missed, Error: boundError(res.Error()),
	}
	if c := res.Check; c != nil && !c.Passed {
		// A reply that failed its quality check is ok but not good: the
		// page says why, with the start of the reply (both bounded and
		// printable; the page escapes them).
		rr.Error = boundError(c.Name + " check failed: " + c.Reason + "; reply: " + c.Excerpt)
	}
	if m.HasTTFT {
		rr.TTFT = m.TTFT
	}
	if m.HasE2E {
		rr.E2E = m.E2E
	}
	if m.HasTPOT {
		rr.TPOT = m.TPOT
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.loads[k]
	if l == nil {
		return
	}
	l.total++
	// In the minute it finished, as a counter counts it: the minute
	// before now is then whole (a request sent in it and still in
	// flight is not missing from it).
	l.trend.add(time.Now(), res.Outcome, m.Good, m.TTFT, m.HasTTFT)
	push := func(ring []RecentResult, n *int) []RecentResult {
		if len(ring) < r.size {
			ring = append(ring, rr)
		} else {
			ring[*n%r.size] = rr
		}
		*n++
		return ring
	}
	l.all = push(l.all, &l.nAll)
	if m.Good {
		l.totalGood++
	} else {
		l.failed = push(l.failed, &l.nFailed)
	}
}

// Snapshot returns, newest first, the last results and the last failures of
// a load, and its totals since it started.
func (r *Recent) Snapshot(k config.Key) (all, failed []RecentResult, total, good int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.loads[k]
	if l == nil {
		return nil, nil, 0, 0
	}
	return newestFirst(l.all, l.nAll, r.size), newestFirst(l.failed, l.nFailed, r.size), l.total, l.totalGood
}

// TrendAt returns a load's last hour before now, a point a minute, oldest
// first (nil for a load it does not keep).
func (r *Recent) TrendAt(k config.Key, now time.Time) []TrendPoint {
	r.mu.Lock()
	l := r.loads[k]
	if l == nil {
		r.mu.Unlock()
		return nil
	}
	buckets := l.trend.snapshot()
	r.mu.Unlock()
	return points(buckets, now) // the sorting outside the lock the loads' results take
}

func newestFirst(ring []RecentResult, n, size int) []RecentResult {
	out := make([]RecentResult, 0, len(ring))
	for i := 1; i <= len(ring); i++ {
		out = append(out, ring[((n-i)%size+size)%size])
	}
	return out
}
