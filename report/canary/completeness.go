package canary

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Completeness says whether the report's numbers are the whole canary's:
// which processes reported, as which shards, and for how long.
type Completeness struct {
	// Complete: every shard 0..N-1 reported throughout the window and
	// every scrape of them succeeded, with one N. Notes say what is not
	// so, and what the reader should know besides (restarts, processes
	// running the same share).
	Complete bool `json:"complete"`
	// ShardCount is N as the processes say it (the largest, if they
	// disagree); ShardsReported the shards 0..N-1 seen in the window;
	// ShardsAtEnd those still reporting at its end.
	ShardCount     int        `json:"shard_count"`
	ShardsReported int        `json:"shards_reported"`
	ShardsAtEnd    int        `json:"shards_at_end"`
	Instances      []Instance `json:"instances"`
	Notes          []string   `json:"notes,omitempty"`
}

// Instance is one sloprober process as Prometheus saw it in the window.
type Instance struct {
	Instance string `json:"instance"`
	Job      string `json:"job"`
	// Shard and Shards are i and N of its --shard i/N (the largest seen,
	// if it changed in the window).
	Shard  int `json:"shard"`
	Shards int `json:"shards"`
	// FirstSample and LastSample are when it reported
	// sloprober_shard_count first and last in the window (to the
	// subquery step); ReportingAtEnd whether it still did at the end.
	FirstSample    time.Time `json:"first_sample"`
	LastSample     time.Time `json:"last_sample"`
	ReportingAtEnd bool      `json:"reporting_at_end"`
	// FromStart and ToEnd: its first (last) sample is within the slack of
	// the window's start (end): a subquery step and two scrape intervals.
	// With both, it reported throughout the window.
	FromStart bool `json:"from_start"`
	ToEnd     bool `json:"to_end"`
	// Scrapes and ScrapesFailed are its `up` samples in the window, and
	// those that were 0.
	Scrapes       int `json:"scrapes"`
	ScrapesFailed int `json:"scrapes_failed"`
	// Restarts are changes of its process_start_time_seconds.
	Restarts int `json:"restarts"`
	// CanarySent is the canary requests it sent in the window, of the
	// report's targets and scenarios.
	CanarySent float64 `json:"canary_sent"`
}

// instanceKey is a process: Prometheus tells them apart by job and
// instance.
type instanceKey struct{ job, instance string }

// byInstance indexes a vector by (job, instance).
func byInstance(v model.Vector) map[instanceKey]float64 {
	m := make(map[instanceKey]float64, len(v))
	for _, s := range v {
		m[instanceKey{string(s.Metric["job"]), string(s.Metric["instance"])}] = float64(s.Value)
	}
	return m
}

// window is what completeness judges against: the window, and the
// slack a healthy process's first and last samples may have.
type window struct {
	start, end time.Time
	// step is the subquery's resolution of first and last samples.
	step time.Duration
}

// assessCompleteness reads the instance queries' results.
func assessCompleteness(w window, res map[string]model.Vector) Completeness {
	insts, upOnly := instances(w, res)
	c := Completeness{Instances: insts}
	if len(insts) == 0 {
		c.Notes = append(c.Notes, "No process reported sloprober_shard_count in the window: which shards reported is unknown.")
		return c
	}
	tol, ok := slack(w, res)
	for i := range insts {
		in := &insts[i]
		in.FromStart = ok && in.FirstSample.Sub(w.start) <= tol
		in.ToEnd = ok && w.end.Sub(in.LastSample) <= tol
	}
	v := &verdict{complete: true}
	c.ShardCount = shardCount(v, insts, res)
	shardChanges(v, insts, res)
	byShard := byShardIndex(v, insts, c.ShardCount)
	c.ShardsReported = len(byShard)
	for _, ins := range byShard {
		if slices.ContainsFunc(ins, func(in Instance) bool { return in.ReportingAtEnd }) {
			c.ShardsAtEnd++
		}
	}
	missingShards(v, byShard, c.ShardCount)
	if !ok {
		v.incomplete("Every process has fewer than 2 samples in the window: whether they reported throughout it is not judged (a window shorter than two scrape intervals?).")
	} else {
		for _, i := range slices.Sorted(maps.Keys(byShard)) {
			shardGaps(v, w, tol, i, c.ShardCount, byShard[i])
			overlaps(v, tol, i, c.ShardCount, byShard[i])
		}
	}
	processHealth(v, insts)
	if len(res[qScrapes]) == 0 {
		v.note("No `up` series match the selector: failed scrapes are not known (a selector on labels that only sloprober's own series have?).")
	}
	for _, k := range upOnly {
		v.note("%s (job %s) matches the selector and was scraped, but reported no sloprober_shard_count in the window: a sloprober that was down throughout, or another process.", k.instance, k.job)
	}
	c.Complete, c.Notes = v.complete, v.notes
	return c
}

// verdict gathers the notes on completeness, and whether any of them
// makes the numbers incomplete.
type verdict struct {
	complete bool
	notes    []string
}

// incomplete notes something that makes the numbers less than the whole
// canary's.
func (v *verdict) incomplete(format string, args ...any) {
	v.complete = false
	v.note(format, args...)
}

// note notes something the reader should know, that leaves the numbers
// whole.
func (v *verdict) note(format string, args ...any) {
	v.notes = append(v.notes, fmt.Sprintf(format, args...))
}

// shardCount is N as the processes say it, the largest if they disagree
// (which is noted: shards with different N split the arrivals
// differently).
func shardCount(v *verdict, insts []Instance, res map[string]model.Vector) int {
	byN := map[int][]string{}
	countMin, countMax := byInstance(res[qShardCountMin]), byInstance(res[qShardCountMax])
	n := 0
	for _, in := range insts {
		k := instanceKey{in.Job, in.Instance}
		for _, c := range []int{int(countMin[k]), int(countMax[k])} {
			if !slices.Contains(byN[c], in.Instance) {
				byN[c] = append(byN[c], in.Instance)
			}
		}
		n = max(n, in.Shards)
	}
	if len(byN) > 1 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(byN)) {
			parts = append(parts, fmt.Sprintf("N=%d: %s", c, strings.Join(byN[c], ", ")))
		}
		v.incomplete("The processes disagree on the shard count (%s): every shard must run with the same N, else arrivals are sent twice or never.", strings.Join(parts, "; "))
	}
	return n
}

// shardChanges notes the processes whose shard changed in the window.
func shardChanges(v *verdict, insts []Instance, res map[string]model.Vector) {
	indexMin, indexMax := byInstance(res[qShardIndexMin]), byInstance(res[qShardIndexMax])
	for _, in := range insts {
		k := instanceKey{in.Job, in.Instance}
		if indexMin[k] != indexMax[k] {
			v.note("%s changed its shard in the window (%g to %g); it is counted as shard %d.", in.Instance, indexMin[k], indexMax[k], in.Shard)
		}
	}
}

// byShardIndex groups the processes by shard; one whose shard is not
// below N is left out, and noted.
func byShardIndex(v *verdict, insts []Instance, n int) map[int][]Instance {
	byShard := map[int][]Instance{}
	for _, in := range insts {
		if in.Shard < 0 || in.Shard >= n {
			v.incomplete("%s reports shard %d of %d, which does not exist.", in.Instance, in.Shard, n)
			continue
		}
		byShard[in.Shard] = append(byShard[in.Shard], in)
	}
	return byShard
}

// missingShards notes the shards 0..N-1 no process reported as.
func missingShards(v *verdict, byShard map[int][]Instance, n int) {
	var missing []string
	for i := range n {
		if len(byShard[i]) == 0 {
			missing = append(missing, fmt.Sprint(i))
		}
	}
	if len(missing) > 0 {
		v.incomplete("%d of %d shards reported nothing in the window (missing: %s): their share of every canary load is not in the numbers, and the rates are below the configured ones.",
			len(missing), n, strings.Join(missing, ", "))
	}
}

// processHealth notes failed scrapes (the process down, or too slow) and
// restarts (counted across, but not without loss).
func processHealth(v *verdict, insts []Instance) {
	for _, in := range insts {
		if in.ScrapesFailed > 0 {
			v.incomplete("%s (shard %d) failed %d of %d scrapes in the window (down, or too slow to answer): if it was down, it sent nothing then, and what it sent after its last good scrape before it went down is lost.",
				in.Instance, in.Shard, in.ScrapesFailed, in.Scrapes)
		}
		if in.Restarts > 0 {
			v.note("%s (shard %d) restarted %s in the window: increase() counts across the counter resets, but what it sent after its last scrape before a restart is lost, and its requests in flight then ended uncounted.",
				in.Instance, in.Shard, plural(in.Restarts, "time", "times"))
		}
	}
}

// instances builds the processes that reported sloprober_shard_count, in
// shard order, and lists those that only have `up` series.
func instances(w window, res map[string]model.Vector) ([]Instance, []instanceKey) {
	countMax := byInstance(res[qShardCountMax])
	indexMax := byInstance(res[qShardIndexMax])
	first, last := byInstance(res[qFirstSample]), byInstance(res[qLastSample])
	atEnd := byInstance(res[qReportingEnd])
	scrapes, up := byInstance(res[qScrapes]), byInstance(res[qScrapesUp])
	restarts, sent := byInstance(res[qRestarts]), byInstance(res[qInstanceSent])
	var out []Instance
	for k, n := range countMax {
		in := Instance{Instance: k.instance, Job: k.job, Shards: int(n), Shard: -1,
			FirstSample: w.start, LastSample: w.end,
			Scrapes: int(math.Round(scrapes[k])), ScrapesFailed: int(math.Round(scrapes[k] - up[k])),
			Restarts: int(math.Round(restarts[k])), CanarySent: round3(sent[k])}
		if i, ok := indexMax[k]; ok {
			in.Shard = int(i)
		}
		if t, ok := first[k]; ok {
			in.FirstSample = clampTime(unixTime(t), w.start, w.end)
		}
		if t, ok := last[k]; ok {
			in.LastSample = clampTime(unixTime(t), w.start, w.end)
		}
		_, in.ReportingAtEnd = atEnd[k]
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.Job, b.Job), cmp.Compare(a.Instance, b.Instance))
	})
	var upOnly []instanceKey
	for k := range scrapes {
		if _, ok := countMax[k]; !ok {
			upOnly = append(upOnly, k)
		}
	}
	slices.SortFunc(upOnly, func(a, b instanceKey) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.instance, b.instance))
	})
	return out, upOnly
}

// slack is how far from the window's edges a healthy process's first and
// last samples may be: the subquery's step (it sees a sample only at its
// steps) and two scrape intervals. The interval is the median over the
// processes of their samples' spacing; ok is false if no process has two
// samples to measure it.
func slack(w window, res map[string]model.Vector) (time.Duration, bool) {
	first, last := byInstance(res[qFirstSample]), byInstance(res[qLastSample])
	var spacings []float64
	for k, n := range byInstance(res[qSamples]) {
		f, okf := first[k]
		l, okl := last[k]
		if !okf || !okl || n < 2 {
			continue
		}
		span := clampTime(unixTime(l), w.start, w.end).Sub(clampTime(unixTime(f), w.start, w.end)).Seconds()
		spacings = append(spacings, span/(n-1))
	}
	if len(spacings) == 0 {
		return 0, false
	}
	slices.Sort(spacings)
	interval := time.Duration(spacings[len(spacings)/2] * float64(time.Second))
	return w.step + 2*interval, true
}

// shardGaps notes the stretches of the window longer than tol in which no
// process reported shard i.
func shardGaps(v *verdict, w window, tol time.Duration, i, n int, ins []Instance) {
	ins = slices.Clone(ins)
	slices.SortFunc(ins, func(a, b Instance) int { return a.FirstSample.Compare(b.FirstSample) })
	names := make([]string, len(ins))
	for j, in := range ins {
		names[j] = in.Instance
	}
	who := fmt.Sprintf("Shard %d of %d (%s)", i, n, strings.Join(names, ", "))
	covered := w.start
	for _, in := range ins {
		if gap := in.FirstSample.Sub(covered); gap > tol {
			if covered.Equal(w.start) {
				v.incomplete("%s reported nothing before %s (%s into the window): not running, or not scraped yet.", who, stamp(in.FirstSample), gap.Round(time.Second))
			} else {
				v.incomplete("%s reported nothing from %s to %s (%s).", who, stamp(covered), stamp(in.FirstSample), gap.Round(time.Second))
			}
		}
		if in.LastSample.After(covered) {
			covered = in.LastSample
		}
	}
	if gap := w.end.Sub(covered); gap > tol {
		v.incomplete("%s reported nothing after %s (the last %s of the window): stopped, or no longer scraped.", who, stamp(covered), gap.Round(time.Second))
	}
}

// overlaps notes processes that ran the same share at once: for N > 1 a
// misconfiguration that sends the share twice; for N = 1, processes that
// each ran the whole canary, whose counts the report adds up.
func overlaps(v *verdict, tol time.Duration, i, n int, ins []Instance) {
	if n == 1 && len(ins) > 1 {
		names := make([]string, len(ins))
		for j, in := range ins {
			names[j] = in.Instance
		}
		v.note("%d unsharded processes (%s) each ran the whole canary: the counts and rates are their sum.", len(ins), strings.Join(names, ", "))
		return
	}
	for a := range ins {
		for b := a + 1; b < len(ins); b++ {
			from := maxTime(ins[a].FirstSample, ins[b].FirstSample)
			to := minTime(ins[a].LastSample, ins[b].LastSample)
			if to.Sub(from) > tol {
				v.note("Shard %d of %d ran in two processes at once (%s and %s, from %s to %s): its share was sent twice then.",
					i, n, ins[a].Instance, ins[b].Instance, stamp(from), stamp(to))
			}
		}
	}
}

func unixTime(s float64) time.Time {
	return time.Unix(0, int64(s*float64(time.Second))).UTC()
}

func clampTime(t, lo, hi time.Time) time.Time { return minTime(maxTime(t, lo), hi) }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// stamp writes a time as the report does: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
