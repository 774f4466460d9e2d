package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

var (
	testStart = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	testEnd   = testStart.Add(time.Hour)
	// A 1h window: the subquery step is 4s; with 15s scrapes, the slack
	// at the edges is 4s + 2 x 15s = 34s.
	testWindow = window{start: testStart, end: testEnd, step: subqueryStep(time.Hour)}
)

// proc is one process as the instance queries see it.
type proc struct {
	job, instance string
	n, i          float64 // --shard i/N
	nMin, iMin    *float64
	// first and last are seconds from the window's start; samples the
	// shard_count samples, scrapes and up the up samples and their sum.
	first, last     float64
	samples         float64
	scrapes, up     float64
	restarts, sent  float64
	notReportingEnd bool
}

// healthy is a process scraped every 15 s throughout the hour.
func healthy(instance string, i, n float64) proc {
	return proc{job: "sloprober", instance: instance, n: n, i: i, first: 5, last: 3595, samples: 240, scrapes: 240, up: 240, sent: 1200}
}

func sampleOf(v float64, labels ...string) *model.Sample {
	m := model.Metric{}
	for i := 0; i+1 < len(labels); i += 2 {
		m[model.LabelName(labels[i])] = model.LabelValue(labels[i+1])
	}
	return &model.Sample{Metric: m, Value: model.SampleValue(v)}
}

// results builds the instance queries' vectors of the processes.
func results(ps ...proc) map[string]model.Vector {
	res := map[string]model.Vector{}
	add := func(q string, v float64, p proc) {
		res[q] = append(res[q], sampleOf(v, "job", p.job, "instance", p.instance))
	}
	at := func(offset float64) float64 {
		return float64(testStart.UnixMilli())/1000 + offset
	}
	for _, p := range ps {
		if p.n > 0 {
			nMin, iMin := p.n, p.i
			if p.nMin != nil {
				nMin = *p.nMin
			}
			if p.iMin != nil {
				iMin = *p.iMin
			}
			add(qShardCountMax, p.n, p)
			add(qShardCountMin, nMin, p)
			add(qShardIndexMax, p.i, p)
			add(qShardIndexMin, iMin, p)
			add(qFirstSample, at(p.first), p)
			add(qLastSample, at(p.last), p)
			add(qSamples, p.samples, p)
			add(qRestarts, p.restarts, p)
			add(qInstanceSent, p.sent, p)
			if !p.notReportingEnd {
				add(qReportingEnd, p.n, p)
			}
		}
		if p.scrapes > 0 {
			add(qScrapes, p.scrapes, p)
			add(qScrapesUp, p.up, p)
		}
	}
	return res
}

func ptr(v float64) *float64 { return &v }

func TestCompleteness(t *testing.T) {
	stopped := healthy("c:9477", 2, 3)
	stopped.last, stopped.samples, stopped.up, stopped.notReportingEnd = 2400, 160, 160, true // down for the last 20 minutes
	late := healthy("c:9477", 2, 3)
	late.first, late.samples, late.scrapes, late.up = 1800, 120, 120, 120 // scraped from the half hour only
	gone := healthy("c:9477", 2, 3)
	gone.last, gone.samples, gone.notReportingEnd = 1200, 80, true
	replacement := healthy("d:9477", 2, 3)
	replacement.first, replacement.samples, replacement.scrapes, replacement.up = 1500, 140, 140, 140
	oldOne, newOne := healthy("c:9477", 2, 3), healthy("d:9477", 2, 3)
	oldOne.last, oldOne.samples, oldOne.notReportingEnd = 1800, 120, true
	newOne.first, newOne.samples = 1000, 173 // started 800 s before the old one stopped
	restarted := healthy("b:9477", 1, 3)
	restarted.restarts = 2
	disagrees := healthy("c:9477", 2, 4)
	changed := healthy("c:9477", 2, 3)
	changed.iMin = ptr(1)
	upOnly := proc{job: "sloprober", instance: "e:9477", scrapes: 240, up: 0}
	tiny := healthy("a:9477", 0, 1)
	tiny.samples = 1

	for _, tc := range []struct {
		name                       string
		procs                      []proc
		complete                   bool
		n, reported, atEnd         int
		notes                      []string // each a substring of one note, in order
		throughout                 []bool
		firstSample, lastSampleOff []float64
	}{
		{
			name:     "one process",
			procs:    []proc{healthy("a:9477", 0, 1)},
			complete: true, n: 1, reported: 1, atEnd: 1, throughout: []bool{true},
		},
		{
			name:     "three shards throughout",
			procs:    []proc{healthy("c:9477", 2, 3), healthy("a:9477", 0, 3), healthy("b:9477", 1, 3)},
			complete: true, n: 3, reported: 3, atEnd: 3, throughout: []bool{true, true, true},
		},
		{
			name:  "a shard the selector does not match",
			procs: []proc{healthy("a:9477", 0, 3), healthy("b:9477", 1, 3)},
			n:     3, reported: 2, atEnd: 2,
			notes: []string{"1 of 3 shards reported nothing in the window (missing: 2)"},
		},
		{
			name:  "a shard stopped",
			procs: []proc{healthy("a:9477", 0, 3), healthy("b:9477", 1, 3), stopped},
			n:     3, reported: 3, atEnd: 2, throughout: []bool{true, true, false},
			notes: []string{
				"Shard 2 of 3 (c:9477) reported nothing after 2026-05-01T12:40:00Z (the last 20m0s of the window): stopped, or no longer scraped.",
				"c:9477 (shard 2) failed 80 of 240 scrapes in the window",
			},
		},
		{
			name:  "a shard scraped from the half hour only",
			procs: []proc{healthy("a:9477", 0, 3), healthy("b:9477", 1, 3), late},
			n:     3, reported: 3, atEnd: 3,
			notes: []string{"Shard 2 of 3 (c:9477) reported nothing before 2026-05-01T12:30:00Z (30m0s into the window): not running, or not scraped yet."},
		},
		{
			name:  "a shard gone for a while, then back under another instance",
			procs: []proc{healthy("a:9477", 0, 3), healthy("b:9477", 1, 3), gone, replacement},
			n:     3, reported: 3, atEnd: 3,
			notes: []string{"Shard 2 of 3 (c:9477, d:9477) reported nothing from 2026-05-01T12:20:00Z to 2026-05-01T12:25:00Z (5m0s)."},
		},
		{
			name:     "a shard replaced at once: complete, but sent twice while both ran",
			procs:    []proc{healthy("a:9477", 0, 3), healthy("b:9477", 1, 3), oldOne, newOne},
			complete: true, n: 3, reported: 3, atEnd: 3,
			notes: []string{"Shard 2 of 3 ran in two processes at once (c:9477 and d:9477, from 2026-05-01T12:16:40Z to 2026-05-01T12:30:00Z): its share was sent twice then."},
		},
		{
			name:     "two unsharded processes add up",
			procs:    []proc{healthy("a:9477", 0, 1), healthy("b:9477", 0, 1)},
			complete: true, n: 1, reported: 1, atEnd: 1,
			notes: []string{"2 unsharded processes (a:9477, b:9477) each ran the whole canary: the counts and rates are their sum."},
		},
		{
			name:     "a restart is a note, not a gap",
			procs:    []proc{healthy("a:9477", 0, 3), restarted, healthy("c:9477", 2, 3)},
			complete: true, n: 3, reported: 3, atEnd: 3,
			notes: []string{"b:9477 (shard 1) restarted 2 times in the window: increase() counts across the counter resets"},
		},
		{
			name:  "processes that disagree on N",
			procs: []proc{healthy("a:9477", 0, 3), healthy("b:9477", 1, 3), disagrees},
			n:     4, reported: 3, atEnd: 3,
			notes: []string{
				"The processes disagree on the shard count (N=3: a:9477, b:9477; N=4: c:9477)",
				"1 of 4 shards reported nothing in the window (missing: 3)",
			},
		},
		{
			name:     "a process that changed its shard",
			procs:    []proc{healthy("a:9477", 0, 3), healthy("b:9477", 1, 3), changed},
			complete: true, n: 3, reported: 3, atEnd: 3,
			notes: []string{"c:9477 changed its shard in the window (1 to 2); it is counted as shard 2."},
		},
		{
			name:     "an instance scraped that never reported",
			procs:    []proc{healthy("a:9477", 0, 1), upOnly},
			complete: true, n: 1, reported: 1, atEnd: 1,
			notes: []string{"e:9477 (job sloprober) matches the selector and was scraped, but reported no sloprober_shard_count in the window"},
		},
		{
			name:  "too few samples to judge",
			procs: []proc{tiny},
			n:     1, reported: 1, atEnd: 1,
			notes: []string{"Every process has fewer than 2 samples in the window"},
		},
		{
			name:  "nothing reported",
			procs: []proc{upOnly},
			notes: []string{"No process reported sloprober_shard_count in the window: which shards reported is unknown."},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := assessCompleteness(testWindow, results(tc.procs...))
			require.Equal(t, tc.complete, c.Complete, "notes: %q", c.Notes)
			require.Equal(t, tc.n, c.ShardCount)
			require.Equal(t, tc.reported, c.ShardsReported)
			require.Equal(t, tc.atEnd, c.ShardsAtEnd)
			require.Len(t, c.Notes, len(tc.notes), "notes: %q", c.Notes)
			for i, want := range tc.notes {
				require.Contains(t, c.Notes[i], want)
			}
			if tc.throughout != nil {
				var got []bool
				for _, in := range c.Instances {
					got = append(got, in.FromStart && in.ToEnd)
				}
				require.Equal(t, tc.throughout, got)
			}
			for i := 1; i < len(c.Instances); i++ {
				require.LessOrEqual(t, c.Instances[i-1].Shard, c.Instances[i].Shard, "in shard order")
			}
		})
	}
}

// TestCompletenessInstance: what the table shows of a process, its first
// sample clamped to the window and its failed scrapes counted.
func TestCompletenessInstance(t *testing.T) {
	p := healthy("a:9477", 0, 1)
	p.first, p.last, p.up, p.restarts, p.sent = -100, 3000, 236, 1, 1234.5678
	c := assessCompleteness(testWindow, results(p))
	require.Equal(t, []Instance{{
		Instance: "a:9477", Job: "sloprober", Shard: 0, Shards: 1,
		FirstSample: testStart, LastSample: testStart.Add(3000 * time.Second),
		ReportingAtEnd: true, FromStart: true, ToEnd: false,
		Scrapes: 240, ScrapesFailed: 4, Restarts: 1, CanarySent: 1234.568,
	}}, c.Instances)
	require.False(t, c.Complete)
	require.True(t, strings.HasPrefix(c.Notes[0], "Shard 0 of 1 (a:9477) reported nothing after 2026-05-01T12:50:00Z"), c.Notes[0])
}

func TestSlack(t *testing.T) {
	// 240 samples over 3590 s: 15.02 s apart; the step is 4 s.
	spacing := 3590.0 / 239
	healthySlack := 4*time.Second + 2*time.Duration(spacing*float64(time.Second))
	for _, tc := range []struct {
		name string
		ps   []proc
		want time.Duration
		ok   bool
	}{
		{"15s scrapes", []proc{healthy("a", 0, 1)}, healthySlack, true},
		{"the median process", []proc{healthy("a", 0, 3), {job: "sloprober", instance: "b", n: 3, i: 1, first: 0, last: 3600, samples: 3601}, healthy("c", 2, 3)},
			healthySlack, true},
		{"one sample", []proc{{job: "sloprober", instance: "a", n: 1, samples: 1}}, 0, false},
		{"no process", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := slack(testWindow, results(tc.ps...))
			require.Equal(t, tc.ok, ok)
			require.InDelta(t, tc.want.Seconds(), got.Seconds(), 1e-6)
		})
	}
}
