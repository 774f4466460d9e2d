package canary

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// SchemaVersion is the JSON report's version: a field that changes
// meaning or goes away changes it; new fields do not.
const SchemaVersion = 1

// Report is a canary SLO report over a window, from Prometheus.
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	Kind          string `json:"kind"` // "canary"
	// Prometheus is the URL read (a password shown as xxxxx), Selector
	// the user's selector; Targets and Scenarios the filters, if any.
	Prometheus   string       `json:"prometheus"`
	Selector     string       `json:"selector"`
	Targets      []string     `json:"targets,omitempty"`
	Scenarios    []string     `json:"scenarios,omitempty"`
	Window       Window       `json:"window"`
	Completeness Completeness `json:"completeness"`
	Loads        []Load       `json:"loads"`
	// Warnings are Prometheus's, with the query that got them.
	Warnings []string `json:"warnings,omitempty"`
	Queries  []Query  `json:"queries"`
}

// Window is the report's time range.
type Window struct {
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Seconds float64   `json:"seconds"`
}

// Load is one target and scenario of the canary, summed over every
// process. Counts are increase() over the window: estimates extrapolated
// to its edges, not whole numbers.
type Load struct {
	Target    string  `json:"target"`
	Scenario  string  `json:"scenario"`
	Scheduled float64 `json:"scheduled"`
	Sent      float64 `json:"sent"`
	Good      float64 `json:"good"`
	// Counted is the attainment denominator: requests that ended, but not
	// cancelled (by the workload) or shutdown (by sloprober stopping).
	Counted  float64            `json:"counted"`
	Dropped  map[string]float64 `json:"dropped"`  // by reason
	Finished map[string]float64 `json:"finished"` // by outcome
	Missed   map[string]float64 `json:"slo_missed"`
	// SentRate and Goodput are per second over the whole window.
	SentRate float64 `json:"sent_per_second"`
	Goodput  float64 `json:"goodput"`
	// Attainment is good / counted, absent without a counted request.
	Attainment *float64 `json:"attainment,omitempty"`
	// Objective is sloprober_slo_objective_ratio at the window's end.
	Objective    *float64     `json:"objective,omitempty"`
	ObjectiveMet *bool        `json:"objective_met,omitempty"`
	ErrorBudget  *ErrorBudget `json:"error_budget,omitempty"`
	Latencies    []Latency    `json:"latencies"`
	Notes        []string     `json:"notes,omitempty"`
}

// ErrorBudget is what the window's bad requests cost: the objective
// allows (1 - objective) x counted of them.
type ErrorBudget struct {
	Allowed float64 `json:"allowed"`
	Bad     float64 `json:"bad"`
	// Consumed is bad / allowed (1 is the whole budget); absent when the
	// objective is 1, which allows none.
	Consumed *float64 `json:"consumed,omitempty"`
}

// Latency is one latency histogram's percentiles over the window.
type Latency struct {
	Name string `json:"name"` // ttft, tpot, itl, e2e
	// SLO is the slo label bounding it, ThresholdSeconds its threshold
	// (absent when the scenario has none).
	SLO              string       `json:"slo"`
	ThresholdSeconds *float64     `json:"threshold_seconds,omitempty"`
	Samples          float64      `json:"samples"`
	Percentiles      []Percentile `json:"percentiles"`
}

// Results are the queries' results by name, as Fetch returns them.
type Results struct {
	Vectors map[string]model.Vector
	// Warnings are Prometheus's.
	Warnings []string
}

// ErrNoSeries is returned by Assemble when nothing matched; its message
// says what was looked for.
var ErrNoSeries = errors.New("no sloprober series")

// Assemble builds the report from the queries' results. It does no I/O.
func Assemble(o *Options, res *Results) (*Report, error) {
	w := window{start: o.Start(), end: o.End, step: subqueryStep(o.Range)}
	r := &Report{
		SchemaVersion: SchemaVersion,
		Kind:          "canary",
		Prometheus:    o.redactedURL(),
		Selector:      o.Selector,
		Targets:       o.Targets,
		Scenarios:     o.Scenarios,
		Window:        Window{Start: w.start.UTC(), End: w.end.UTC(), Seconds: o.Range.Seconds()},
		Completeness:  assessCompleteness(w, res.Vectors),
		Warnings:      res.Warnings,
		Queries:       Queries(o),
	}
	r.Loads = loads(o, res.Vectors)
	if len(r.Loads) == 0 {
		what := fmt.Sprintf("between %s and %s on %s", stamp(w.start), stamp(w.end), r.Prometheus)
		if len(r.Completeness.Instances) == 0 {
			return nil, fmt.Errorf("%w match %s %s: no sloprober_shard_count%s nor sloprober_requests_sent_total%s (check --selector, --range and --end)",
				ErrNoSeries, o.Selector, what, o.selector(), o.loadSelector())
		}
		return nil, fmt.Errorf("%w of the canary %s: sloprober_requests_sent_total%s matches nothing, though %s (check --target and --scenario)",
			ErrNoSeries, what, o.loadSelector(), plural(len(r.Completeness.Instances), "process reports", "processes report"))
	}
	return r, nil
}

// loadKey is a load: a target and a scenario.
type loadKey struct{ target, scenario string }

// byLoad indexes a vector by (target, scenario).
func byLoad(v model.Vector) map[loadKey]float64 {
	m := make(map[loadKey]float64, len(v))
	for _, s := range v {
		m[loadKey{string(s.Metric["target"]), string(s.Metric["scenario"])}] = float64(s.Value)
	}
	return m
}

// byLoadAnd indexes a vector by (target, scenario), then by one more
// label.
func byLoadAnd(v model.Vector, label model.LabelName) map[loadKey]map[string]float64 {
	m := map[loadKey]map[string]float64{}
	for _, s := range v {
		k := loadKey{string(s.Metric["target"]), string(s.Metric["scenario"])}
		if m[k] == nil {
			m[k] = map[string]float64{}
		}
		m[k][string(s.Metric[label])] = round3(float64(s.Value))
	}
	return m
}

// loads builds every load any counter query returned, in target and
// scenario order.
func loads(o *Options, res map[string]model.Vector) []Load {
	scheduled, sent, good := byLoad(res[qScheduled]), byLoad(res[qSent]), byLoad(res[qGood])
	dropped := byLoadAnd(res[qDropped], "reason")
	finished := byLoadAnd(res[qFinished], "outcome")
	missed := byLoadAnd(res[qMissed], "slo")
	keys := map[loadKey]bool{}
	for _, m := range []map[loadKey]float64{scheduled, sent, good} {
		for k := range m {
			keys[k] = true
		}
	}
	for k := range finished {
		keys[k] = true
	}
	var out []Load
	for k := range keys {
		l := Load{
			Target: k.target, Scenario: k.scenario,
			Scheduled: round3(scheduled[k]), Sent: round3(sent[k]), Good: round3(good[k]),
			Dropped: orEmpty(dropped[k]), Finished: orEmpty(finished[k]), Missed: orEmpty(missed[k]),
		}
		secs := o.Range.Seconds()
		l.SentRate, l.Goodput = round3(sent[k]/secs), round3(good[k]/secs)
		judge(&l, k, res)
		l.Notes = append(l.Notes, thresholdNotes(k, res)...)
		l.Latencies = latenciesOf(k, res)
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Load) int {
		return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.Scenario, b.Scenario))
	})
	return out
}

// judge sets a load's attainment, objective and error budget, as the
// README's metric reference and the bundled rules define them: good over
// the requests that ended, less those cancelled and shut down; errors and
// timeouts stay in the denominator, so failing work never raises it.
func judge(l *Load, k loadKey, res map[string]model.Vector) {
	for outcome, n := range l.Finished {
		if outcome != "cancelled" && outcome != "shutdown" {
			l.Counted += n
		}
	}
	l.Counted = round3(l.Counted)
	if l.Counted > 0 {
		// increase() extrapolates good and finished apart: clamped, as
		// the rules clamp the error ratio at 0.
		a := min(1, l.Good/l.Counted)
		l.Attainment = &a
	} else {
		l.Notes = append(l.Notes, "No request ended in the window: no attainment.")
	}
	if obj, ok := byLoad(res[qObjectiveEnd])[k]; ok {
		l.Objective = &obj
		lo, hi := byLoad(res[qObjectiveMin])[k], byLoad(res[qObjectiveMax])[k]
		if lo != hi {
			l.Notes = append(l.Notes, fmt.Sprintf("The objective changed in the window (from %s to %s, or the processes disagree); the error budget uses %s, the value at its end.",
				formatPercent(lo), formatPercent(hi), formatPercent(obj)))
		}
	} else {
		l.Notes = append(l.Notes, "No sloprober_slo_objective_ratio series: no objective to judge against.")
	}
	if l.Attainment == nil || l.Objective == nil {
		return
	}
	met := *l.Attainment >= *l.Objective
	l.ObjectiveMet = &met
	b := &ErrorBudget{Allowed: round3((1 - *l.Objective) * l.Counted), Bad: round3(max(0, l.Counted-l.Good))}
	if b.Allowed > 0 {
		c := b.Bad / b.Allowed
		b.Consumed = &c
	}
	l.ErrorBudget = b
}

// thresholdNotes say which SLO thresholds changed in the window, or
// differ between processes, in SLO order.
func thresholdNotes(k loadKey, res map[string]model.Vector) []string {
	lo, hi := byLoadAnd(res[qThresholdMin], "slo")[k], byLoadAnd(res[qThresholdMax], "slo")[k]
	var notes []string
	for _, slo := range slices.Sorted(maps.Keys(hi)) {
		if lo[slo] != hi[slo] {
			notes = append(notes, fmt.Sprintf("The %s threshold changed in the window (from %s to %s, or the processes disagree); %s is shown.",
				slo, formatSeconds(lo[slo]), formatSeconds(hi[slo]), formatSeconds(hi[slo])))
		}
	}
	return notes
}

// latenciesOf builds each latency's percentiles, shown only where their
// sample count allows.
func latenciesOf(k loadKey, res map[string]model.Vector) []Latency {
	thresholds := byLoadAnd(res[qThresholdMax], "slo")[k]
	var out []Latency
	for _, lat := range latencies {
		n := round3(byLoad(res[countQuery(lat)])[k])
		l := Latency{Name: lat.Name, SLO: lat.SLO, Samples: n}
		if t, ok := thresholds[lat.SLO]; ok {
			l.ThresholdSeconds = &t
		}
		bounds := bucketBounds(res[bucketsQuery(lat)], k)
		for _, q := range quantiles {
			v, ok := byLoad(res[quantileQuery(lat, q)])[k]
			l.Percentiles = append(l.Percentiles, percentile(q, n, v, ok, bounds))
		}
		out = append(out, l)
	}
	return out
}

// bucketBounds are a load's finite bucket bounds (le), ascending.
func bucketBounds(v model.Vector, k loadKey) []float64 {
	var bounds []float64
	for _, s := range v {
		if (loadKey{string(s.Metric["target"]), string(s.Metric["scenario"])}) != k {
			continue
		}
		if le, err := strconv.ParseFloat(string(s.Metric["le"]), 64); err == nil && !math.IsInf(le, 1) {
			bounds = append(bounds, le)
		}
	}
	slices.Sort(bounds)
	return slices.Compact(bounds)
}

func orEmpty(m map[string]float64) map[string]float64 {
	if m == nil {
		return map[string]float64{}
	}
	return m
}

// round3 rounds a count to three decimals: increase() is a float, and
// its last digits are noise.
func round3(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return math.Round(v*1000) / 1000
}

// formatCount writes a count of requests or samples rounded, with
// thousands separators: 1,234.
func formatCount(v float64) string {
	s := fmt.Sprintf("%.0f", math.Round(v))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// formatPercent writes a ratio as a percentage, to two decimals.
func formatPercent(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }

// formatSeconds writes a latency to about three significant digits, in
// ms below a second: 5.62 ms, 250 ms, 1.23 s, 1500 s.
func formatSeconds(v float64) string {
	unit := "s"
	if v < 1 {
		v, unit = 1000*v, "ms"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}
