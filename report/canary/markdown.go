package canary

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sloprober/sloprober/internal/markdown"
)

// Formats are the report's formats, for Write. There is no HTML: the
// capacity reports' page (report.WriteHTML) renders their own Markdown,
// and a second renderer for a report of two tables is not worth its
// upkeep; the Markdown pastes into a ticket as it is.
var Formats = []string{"md", "json"}

// Write writes the report in format: md or json.
func Write(w io.Writer, r *Report, format string) error {
	switch format {
	case "md", "markdown":
		return WriteMarkdown(w, r)
	case "json":
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding the report: %w", err)
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	return fmt.Errorf("a canary report is written as %s, not %s", strings.Join(Formats, " or "), format)
}

// WriteMarkdown writes the report as Markdown: where the numbers come
// from and whether they are complete first, then each load.
func WriteMarkdown(w io.Writer, r *Report) error {
	m := &mdWriter{}
	m.header(r)
	m.completeness(r)
	for i := range r.Loads {
		m.load(r, &r.Loads[i])
	}
	m.method(r)
	_, err := io.WriteString(w, m.String())
	return err
}

// mdWriter writes a canary report's Markdown.
type mdWriter struct{ markdown.Writer }

// code makes a text safe inside a code span.
func code(s string) string { return "`" + markdown.CodeSpan(s) + "`" }

func (m *mdWriter) header(r *Report) {
	m.P("# Canary SLO report")
	m.P("")
	filters := ""
	if len(r.Targets) > 0 {
		filters += fmt.Sprintf(", targets %s", code(strings.Join(r.Targets, ", ")))
	}
	if len(r.Scenarios) > 0 {
		filters += fmt.Sprintf(", scenarios %s", code(strings.Join(r.Scenarios, ", ")))
	}
	m.P("From Prometheus %s, selector %s%s: the canary's series (%s), summed over every instance and shard.",
		code(r.Prometheus), code(r.Selector), filters, code(`test="canary"`))
	m.P("")
	m.P("Window: %s to %s (%s).", stamp(r.Window.Start), stamp(r.Window.End), secondsString(r.Window.Seconds))
	m.P("")
}

func (m *mdWriter) completeness(r *Report) {
	c := &r.Completeness
	m.P("## Completeness")
	m.P("")
	verdict := "**Incomplete**"
	if c.Complete {
		verdict = "**Complete**"
	}
	m.P("%s: %d of %d shards reported in the window, %d at its end, from %s.", verdict, c.ShardsReported, c.ShardCount, c.ShardsAtEnd,
		plural(len(c.Instances), "process", "processes"))
	m.P("")
	if len(c.Instances) > 0 {
		m.Table("instance", "job", "shard", "reported", "scrapes failed", "restarts", "canary sent")
		for _, in := range c.Instances {
			reported := "whole window"
			if !in.FromStart || !in.ToEnd {
				reported = fmt.Sprintf("%s to %s", edge(in.FirstSample, in.FromStart, "start"), edge(in.LastSample, in.ToEnd, "end"))
			}
			m.Row(in.Instance, in.Job, fmt.Sprintf("%d/%d", in.Shard, in.Shards), reported,
				fmt.Sprintf("%d of %d", in.ScrapesFailed, in.Scrapes), fmt.Sprint(in.Restarts), formatCount(in.CanarySent))
		}
		m.P("")
	}
	for _, n := range c.Notes {
		m.P("- %s", n)
	}
	if len(c.Notes) > 0 {
		m.P("")
	}
	for _, w := range r.Warnings {
		m.P("- Prometheus warned: %s", w)
	}
	if len(r.Warnings) > 0 {
		m.P("")
	}
}

func (m *mdWriter) load(r *Report, l *Load) {
	m.P("## %s / %s", markdown.Cell(l.Target), markdown.Cell(l.Scenario))
	m.P("")
	m.P("%s", attainmentLine(l))
	m.P("")
	m.P("**Goodput %s good req/s**; sent %s req/s (over the whole window).", rate(l.Goodput), rate(l.SentRate))
	m.P("")
	secs := r.Window.Seconds
	m.Table("requests", "count", "per second")
	m.Row("scheduled", formatCount(l.Scheduled), rate(l.Scheduled/secs))
	m.Row("sent", formatCount(l.Sent), rate(l.Sent/secs))
	m.Row("dropped", formatCount(sum(l.Dropped)), rate(sum(l.Dropped)/secs))
	m.Row("ended, counted (not cancelled or shutdown)", formatCount(l.Counted), rate(l.Counted/secs))
	m.Row("good", formatCount(l.Good), rate(l.Good/secs))
	m.P("")
	m.P("Outcomes: %s. Drops: %s. Missed SLOs: %s.", breakdown(l.Finished, "none ended"), breakdown(l.Dropped, "none"), breakdown(l.Missed, "no SLO configured"))
	m.P("")
	m.Table("latency", "SLO", "samples", "P50", "P95", "P99")
	for _, lat := range l.Latencies {
		slo := "-"
		if lat.ThresholdSeconds != nil {
			slo = fmt.Sprintf("%s ≤ %s", lat.SLO, formatSeconds(*lat.ThresholdSeconds))
		}
		cells := []string{strings.ToUpper(lat.Name), slo, formatCount(lat.Samples)}
		for _, p := range lat.Percentiles {
			if p.Seconds != nil {
				cells = append(cells, withBucket(*p.Seconds, p.Bucket))
			} else {
				cells = append(cells, p.Note)
			}
		}
		m.Row(cells...)
	}
	m.P("")
	for _, n := range l.Notes {
		m.P("- %s", n)
	}
	if len(l.Notes) > 0 {
		m.P("")
	}
}

// attainmentLine is a load's verdict: attainment against the objective,
// and what the bad requests cost of the window's error budget.
func attainmentLine(l *Load) string {
	if l.Attainment == nil {
		return "**Attainment: none** (no request ended in the window)."
	}
	s := fmt.Sprintf("**Attainment %s** (%s good of %s counted)", formatPercent(*l.Attainment), formatCount(l.Good), formatCount(l.Counted))
	if l.Objective == nil {
		return s + ", no objective found."
	}
	verdict := "met"
	if !*l.ObjectiveMet {
		verdict = "missed"
	}
	s += fmt.Sprintf(" against an objective of %s: **%s**.", formatPercent(*l.Objective), verdict)
	b := l.ErrorBudget
	if b.Consumed == nil {
		return s + fmt.Sprintf(" Error budget: none (objective 100%%); %s bad requests.", formatCount(b.Bad))
	}
	return s + fmt.Sprintf(" Error budget: %s bad requests of %s allowed, **%s consumed**.", formatCount(b.Bad), count1(b.Allowed), formatPercent(*b.Consumed))
}

func (m *mdWriter) method(r *Report) {
	m.P("## How these numbers are computed")
	m.P("")
	m.P("- Counts are `increase()` over the window at its end, summed over every instance and shard after it, so a restarted shard's counter reset costs nothing; increase() extrapolates to the window's edges, so counts are estimates, within about a scrape interval's requests of the truth, not whole numbers.")
	m.P("- Attainment is good / counted: counted are the requests that ended, less those cancelled by the workload or shut down by sloprober (the README's metric reference and the bundled rules); errors and timeouts stay in it. Requests in flight at the window's end are not counted yet. The error budget is (1 - objective) x counted.")
	m.P("- Goodput and rates are per second over the whole window: shards missing for part of it lower them (see Completeness); attainment, a ratio, is not lowered.")
	m.P("- Percentiles are `histogram_quantile` over the classic buckets summed by `le` over every instance: interpolated linearly within the bucket shown beside each, so the value is only known to lie in that bucket (every SLO threshold is a bucket bound, so the attainment is exact where a percentile is not). P95 needs 200 samples and P99 1,000, as in capacity reports (fewer leave under 10 samples above them); the median needs one.")
	m.P("- The %d PromQL queries are in the JSON report (`--format json`, `queries`).", len(r.Queries))
}

// edge writes a process's first or last sample: the window's edge by name
// when it is there, else its time.
func edge(t time.Time, atEdge bool, name string) string {
	if atEdge {
		return name
	}
	return stamp(t)
}

// withBucket writes a percentile with the bucket it was interpolated in:
// "5.30 ms (0-10 ms)".
func withBucket(v float64, bucket []float64) string {
	if len(bucket) != 2 {
		return formatSeconds(v)
	}
	return fmt.Sprintf("%s (%s)", formatSeconds(v), formatBucket(bucket[0], bucket[1]))
}

// formatBucket writes a bucket's bounds in its upper bound's unit, as
// short as they are: "0-10 ms", "2.5-5 ms", "0.75-1 s".
func formatBucket(lower, upper float64) string {
	unit, scale := "s", 1.0
	if upper < 1 {
		unit, scale = "ms", 1000
	}
	num := func(x float64) string {
		return strconv.FormatFloat(x*scale, 'g', 4, 64)
	}
	return fmt.Sprintf("%s-%s %s", num(lower), num(upper), unit)
}

// breakdown writes counts by label as "ok 360, http_5xx 40", largest
// first, zeros left out.
func breakdown(m map[string]float64, none string) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		if formatCount(m[k]) != "0" {
			parts = append(parts, fmt.Sprintf("%s %s", markdown.Cell(k), formatCount(m[k])))
		}
	}
	if len(parts) == 0 {
		if len(m) > 0 {
			return "none"
		}
		return none
	}
	return strings.Join(parts, ", ")
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// rate writes requests per second to about three significant digits.
func rate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// count1 writes an allowance with one decimal: 3.8 bad requests allowed.
func count1(v float64) string { return fmt.Sprintf("%.1f", v) }

// secondsString writes the window's length: 38s, 24h0m0s.
func secondsString(s float64) string {
	return (time.Duration(s) * time.Second).String()
}
