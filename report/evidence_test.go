package report_test

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/report"
	"github.com/sloprober/sloprober/report/chart/charttest"
)

// testdata/evidence-run.json is `sloprober test run capacity` against a
// simulator (2026-12-06), as stored: four open-loop levels at 7.8-10.1
// req/s, three of them at 100% attainment, 8.92 req/s verified, 10.1
// req/s above it undecided and the closed loop's peak, 11.7 req/s, the
// most the capacity can be.

// evidenceOf is the evidence figure of run's HTML report: its SVG read
// back and its caption; nil without one.
func evidenceOf(t *testing.T, run *capacity.Run) (*charttest.Drawing, string) {
	t.Helper()
	var h bytes.Buffer
	require.NoError(t, report.WriteHTML(&h, report.Build(run)))
	page := h.String()
	i := strings.Index(page, `<figure id="fig-evidence">`)
	if i < 0 {
		return nil, ""
	}
	f := page[i:]
	f = f[:strings.Index(f, "</figure>")]
	svg := f[strings.Index(f, "<svg") : strings.Index(f, "</svg>")+len("</svg>")]
	d, err := charttest.Read(svg)
	require.NoError(t, err)
	caption := f[strings.Index(f, "<figcaption>")+len("<figcaption>") : strings.Index(f, "</figcaption>")]
	return d, caption
}

// decisionStyle is how the evidence chart draws each decision's points
// and intervals: colour and dashes.
var decisionStyle = map[string][2]string{
	capacity.DecisionMet:      {"#0072B2", ""},
	capacity.DecisionMissed:   {"#D55E00", "6,3"},
	"prober-bound (not used)": {"#009E73", "1.5,2"},
	"undecided":               {"#CC79A7", "8,2,1.5,2"},
}

// TestEvidenceReadable: on real runs, the evidence chart draws points
// and intervals at 100% whole, under the plot's top, with no tick above
// 100; no label overlaps another, a point or an interval, and the
// verified level's sample is written; each level's interval is drawn in
// its decision's colour and dash, as its point and its legend entry;
// the verified rate and the rates above it the report's sentence names
// are marked and labelled.
func TestEvidenceReadable(t *testing.T) {
	for _, tc := range []struct {
		run       string
		verifiedN string
		markers   []string
	}{
		{"evidence-run.json", "n=214", []string{"verified", "closed loop's peak", "10.1 undecided"}},
		{"knee-run.json", "n=79", []string{"verified", "10.9 missed", "7.13 undecided"}},
		{"step-both-run.json", "n=552", []string{"verified", "11 missed"}},
	} {
		t.Run(tc.run, func(t *testing.T) {
			run := load(t, tc.run)
			d, _ := evidenceOf(t, run)
			require.NotNil(t, d)
			top := d.PlotTop()

			// 1. Headroom above 100%.
			inPlot := 0
			for _, g := range d.Glyphs {
				if g.Y > top+3 {
					continue // the legend's
				}
				inPlot++
				require.Less(t, g.Box.MaxY, top, "a point at (%.1f, %.1f) on the plot's top", g.X, g.Y)
			}
			require.NotZero(t, inPlot)
			for _, l := range d.Lines {
				if l.Horizontal() && l.Width == 1.5 && l.X2-l.X1 < 8 && l.Y1 < top+3 {
					require.Less(t, l.Y1+0.75, top, "an interval's cap on the plot's top")
				}
			}
			ticks := 0
			for _, tx := range d.Texts {
				if v, err := strconv.ParseFloat(tx.S, 64); err == nil && tx.Box.MaxX < 45 {
					require.LessOrEqual(t, v, 100.0, "a tick above 100%%")
					if v == 100 {
						ticks++
					}
				}
			}
			require.Equal(t, 1, ticks, "100% labelled")

			// 2. Labels apart from each other, the points and the
			// intervals; the verified level's sample kept.
			for _, h := range d.Hidden() {
				t.Error(h)
			}
			require.Len(t, d.Find(tc.verifiedN), 1, "the verified level's sample")

			// 3. Each interval in its decision's colour and dash, on a
			// point of that colour, and the legend alike.
			want := map[string]int{}
			for _, l := range run.Verify {
				if l.Interval == nil || l.Decision == "" {
					continue
				}
				switch {
				case l.Prober != nil && len(l.Prober.Invalid) > 0:
					want["prober-bound (not used)"]++
				case l.Decision == capacity.DecisionMet || l.Decision == capacity.DecisionMissed:
					want[l.Decision]++
				default:
					want["undecided"]++
				}
			}
			for decision, st := range decisionStyle {
				var bars []charttest.Line
				for _, l := range d.Lines {
					if l.Vertical() && l.Width == 1.5 && l.Stroke == st[0] && l.Y1 < top+3 {
						bars = append(bars, l)
					}
				}
				require.Len(t, bars, want[decision], "%s: one interval a level", decision)
				for _, b := range bars {
					require.Equal(t, st[1], b.Dashes, "%s: the interval's dash", decision)
					require.True(t, slices.ContainsFunc(d.Glyphs, func(g charttest.Glyph) bool { return g.Color == st[0] && math.Abs(g.X-b.X1) < 0.1 }),
						"%s: the interval at x=%.1f has no point of its colour", decision, b.X1)
				}
				legend := d.Find(decision)
				if want[decision] == 0 {
					require.Empty(t, legend, "no legend entry for a decision no level took")
					continue
				}
				require.Len(t, legend, 1)
				require.True(t, slices.ContainsFunc(d.Lines, func(l charttest.Line) bool {
					return l.Vertical() && l.Stroke == st[0] && l.Dashes == st[1] && l.Y1 > top && l.X1 < legend[0].Box.MinX && l.X1 > legend[0].Box.MinX-20
				}), "%s: the legend's sample is an interval of its colour and dash", decision)
			}

			// 4. The markers, each labelled once.
			for _, m := range tc.markers {
				require.Len(t, d.Find(m), 1, m)
			}
		})
	}
}

// TestEvidenceInconclusive: a run that verified no rate marks no
// verified rate, but still draws the objective and marks the level
// nearest to a decision, and the caption says that none was verified. (A
// run that did not reach the open loop, as one whose sweep was
// undecided, has no evidence chart.)
func TestEvidenceInconclusive(t *testing.T) {
	run := load(t, "evidence-run.json")
	run.Verdict, run.Reason = capacity.VerdictInconclusive, "not concluded: no open-loop rate was decided within verify.max_steady"
	run.VerifiedRate, run.Capacity.VerifiedRate = nil, nil
	for i := range run.Verify {
		if l := &run.Verify[i]; l.Decision == capacity.DecisionMet {
			l.Decision, l.Met = capacity.DecisionInconclusive, false
		}
	}
	d, caption := evidenceOf(t, run)
	require.NotNil(t, d)
	require.True(t, strings.HasPrefix(caption, "No rate was verified"), caption)
	require.Contains(t, caption, "the undecided level nearest to a decision, 10.1 req/s")
	require.Len(t, d.Find("objective 95%"), 1)
	require.True(t, slices.ContainsFunc(d.Lines, func(l charttest.Line) bool {
		return l.Horizontal() && l.Stroke == "#444444" && l.Dashes == "5,2"
	}), "the objective's line")
	require.Len(t, d.Find("nearest to a decision"), 1)
	require.Empty(t, d.Find("verified"))
	for _, p := range d.Overlapping(0.2) {
		t.Errorf("%q overlaps %q", p[0].S, p[1].S)
	}

	// The sweep undecided: no open-loop level, no evidence chart.
	run = load(t, "step-run.json")
	run.Verify = nil
	d, _ = evidenceOf(t, run)
	require.Nil(t, d)
}
