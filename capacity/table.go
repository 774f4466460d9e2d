package capacity

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sloprober/sloprober/internal/human"
	"github.com/sloprober/sloprober/prober"
)

// TableWidth is the widest line WriteTable writes: a terminal's, or a CI
// log's, 120 columns.
const TableWidth = 120

// WriteTable writes a run for a terminal or a CI log, no line wider than
// TableWidth: its verdict, the capacity with its interval and the search
// that found it, then one row per level with its offered rate, its sample,
// its attainment's interval, its decision and its latency percentiles. A
// percentile over too few samples is marked *. What else is to know of a
// level (extensions, retries, drops, the drain, a busy prober) is a
// numbered footnote under the table. WriteMarkdown writes every column.
func WriteTable(w io.Writer, r *Run) {
	for _, line := range summary(r) {
		fmt.Fprintln(w, wrap(line, TableWidth, "    "))
	}
	levels := tableLevels(r)
	// The engine's queue (mean/max over the level) is a column where the
	// target's metrics were read.
	queue := slices.ContainsFunc(levels, func(l tableLevel) bool { return l.EngineQueue != nil && l.EngineQueue.Samples > 0 })
	lines, footnotes := levelTable(levels, r.Soak != nil, queue, true)
	if slices.ContainsFunc(lines, func(l string) bool { return len(l) > TableWidth }) {
		// Numbers too wide for a decision column: the decisions go with
		// the notes.
		lines, footnotes = levelTable(levels, r.Soak != nil, queue, false)
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	for _, n := range footnotes {
		fmt.Fprintln(w, wrap(n, TableWidth, "    "))
	}
	legend := "Latencies in ms; * over too few samples (P95 below 200, P99 below 1,000)"
	if queue {
		legend += "; queue: the engine's queue depth, mean/max"
	}
	fmt.Fprintln(w, wrap(legend+".", TableWidth, ""))
	fmt.Fprintln(w, wrap("[95% CI]: the attainment's interval (batch means, and the requests' autocorrelation), which decides the level. "+
		"Every column: --output md or json.", TableWidth, ""))
}

// levelTable is the terminal table's lines, header first, and its
// footnotes. The cells are aligned first; then each row's notes follow its
// cells: the first where the line has room, the rest a footnote.
func levelTable(levels []tableLevel, soak, queue, decisionColumn bool) (lines, footnotes []string) {
	var cells bytes.Buffer
	tw := tabwriter.NewWriter(&cells, 0, 0, 1, ' ', tabwriter.AlignRight)
	head := "stage\tload\toffered/s\tsent\tgood/s\tattained [95% CI]\tTTFT p50/p99\tTPOT p99\tE2E p99\t"
	if soak {
		head = "stage\toffered/s\tsent\tgood/s\tattained [95% CI]\tTTFT p50/p99\tTPOT p99\tE2E p99\tRSS MiB\tgoroutines\t"
	}
	if queue {
		head += "queue\t"
	}
	if decisionColumn {
		head += "decision\t"
	}
	fmt.Fprintln(tw, head)
	notes := make([][]string, len(levels))
	for i, l := range levels {
		row := []string{l.Stage}
		if !soak {
			row = append(row, l.RateName())
		}
		_, _, offered := levelLoad(l.Level)
		row = append(row, offered, fmt.Sprint(l.Sent), fmt.Sprintf("%.3g", l.Goodput), attainedShort(l.Level),
			ms2(l.TTFT), ms1(l.TPOT, l.TPOT.P99), ms1(l.E2E, l.E2E.P99))
		if w := l.window; w != nil {
			row = append(row, fmt.Sprint(w.ProberRSSBytes>>20), fmt.Sprint(w.ProberGoroutines))
		}
		if queue {
			q := "-"
			if eq := l.EngineQueue; eq != nil && eq.Samples > 0 {
				q = fmt.Sprintf("%.1f/%d", eq.Mean, eq.Max)
			}
			row = append(row, q)
		}
		notes[i] = l.notes(!queue)
		if d := levelDecision(l.Level); decisionColumn {
			row = append(row, cmp.Or(d, "-"))
		} else if d != "" {
			notes[i] = append([]string{d}, notes[i]...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	rows := strings.Split(strings.TrimSuffix(cells.String(), "\n"), "\n")
	head = strings.TrimRight(rows[0], " ")
	if len(head)+len(" note") <= TableWidth {
		head += " note"
	}
	lines = append(lines, head)
	for i, l := range levels {
		line, parts := rows[i+1], notes[i]
		ref := fmt.Sprintf(" [%d]", len(footnotes)+1)
		switch {
		case len(parts) == 1 && len(line)+1+len(parts[0]) <= TableWidth:
			line, parts = line+" "+parts[0], nil
		case len(parts) > 0 && len(line)+1+len(parts[0])+len(ref) <= TableWidth:
			// A footnote follows: room for its reference too.
			line, parts = line+" "+parts[0], parts[1:]
		}
		if len(parts) > 0 {
			// The footnote names its row; the row refers to it where it
			// has room.
			footnotes = append(footnotes, fmt.Sprintf("[%d] %s: %s", len(footnotes)+1, l.name(), strings.Join(parts, "; ")))
			if len(strings.TrimRight(line, " "))+len(ref) <= TableWidth {
				line = strings.TrimRight(line, " ") + ref
			}
		}
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return lines, footnotes
}

// WriteMarkdown writes a run as Markdown (a CI job's summary, a pull
// request): the summary lines, then every column of every level, its
// notes in its row.
func WriteMarkdown(w io.Writer, r *Run) {
	for _, line := range summary(r) {
		fmt.Fprintf(w, "- %s\n", line)
	}
	fmt.Fprintln(w)
	soak := r.Soak != nil
	head := []string{"stage", "clients", "intended/s", "offered/s", "window", "sent", "ok/s", "good/s", "in tok/s", "out tok/s",
		"attained [95% CI]", "TTFT p50/p95/p99 ms (n)", "TPOT p99 ms", "E2E p99 ms", "drain s", "note"}
	if soak {
		head = slices.DeleteFunc(head, func(h string) bool { return h == "clients" || h == "drain s" })
	}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, l := range tableLevels(r) {
		clients, rate, offered := levelLoad(l.Level)
		cells := []string{l.Stage}
		if !soak {
			cells = append(cells, clients)
		}
		cells = append(cells, rate, offered, fmt.Sprintf("%.0fs", l.WindowSeconds), fmt.Sprint(l.Sent),
			fmt.Sprintf("%.3g", l.CompletedRate), fmt.Sprintf("%.3g", l.Goodput),
			fmt.Sprintf("%.4g", l.InputTokensRate), fmt.Sprintf("%.4g", l.OutputTokensRate),
			attained(l.Level), ms3(l.TTFT), ms1(l.TPOT, l.TPOT.P99), ms1(l.E2E, l.E2E.P99))
		if !soak {
			cells = append(cells, fmt.Sprintf("%.2f", l.DrainSeconds))
		}
		notes := l.notes(true)
		if d := levelDecision(l.Level); d != "" {
			notes = append([]string{d}, notes...)
		}
		if w := l.window; w != nil {
			notes = append(notes, fmt.Sprintf("prober %d MiB, %d goroutines", w.ProberRSSBytes>>20, w.ProberGoroutines))
		}
		cells = append(cells, strings.ReplaceAll(strings.Join(notes, "; "), "|", "\\|"))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w, "\n\\* over too few samples: P95 below 200, P99 below 1,000; [95% CI]: the attainment's interval (batch means, and the requests' autocorrelation), the level's decision against its objective.")
}

// summary is a run's verdict, capacity, search, drift, knee and canary,
// a line each.
func summary(r *Run) []string {
	// "ABORTED: interrupt signal received", not "ABORTED: aborted: ...".
	reason := strings.TrimPrefix(r.Reason, r.Verdict+": ")
	lines := []string{fmt.Sprintf("test %s (%s) on %s: %s: %s", r.Test, r.Kind, r.Target, strings.ToUpper(r.Verdict), reason)}
	if c := r.Capacity; c != nil {
		lines = append(lines, fmt.Sprintf("capacity: %s; closed loop %s at %.3g req/s (%.3g good req/s)", verifiedText(r), clients(c.Concurrency), c.Rate, c.Goodput))
		if fc := c.Forecast; fc != nil {
			if _, text := fc.Verdict(); text != "" {
				lines = append(lines, "forecast: "+text)
			}
		}
	}
	if search := searchText(r.Verify); search != "" {
		lines = append(lines, "search: "+search)
	}
	if sk := r.Soak; sk != nil && len(sk.Windows) > 0 {
		lines = append(lines, fmt.Sprintf("soak: %.3g req/s open loop, %d windows of %.0f s", sk.Rate, len(sk.Windows), sk.Windows[0].WindowSeconds))
	}
	if d := r.Soak.drift(); d != nil {
		lines = append(lines, fmt.Sprintf("drift: %s; %s; prober memory %s", d.Growth(), d.Attainment(), human.SignedPercent(d.MemoryGrowth)))
	}
	if k := r.Knee; k != nil {
		lines = append(lines, "knee: "+k.Text())
	}
	for _, c := range r.Canary {
		lines = append(lines, fmt.Sprintf("canary %s during the test: %.2f%% of %d requests good (objective %.2f%%); %.2f%% of its 30-day error budget",
			c.Scenario, 100*c.Attainment, c.Counted, 100*c.Objective, 100*c.BudgetConsumed))
	}
	return lines
}

// tableLevel is a row of a run's table: a level, or a soak's window with
// the prober's memory and goroutines at its end.
type tableLevel struct {
	*Level
	window *SoakWindow
	index  int // a soak window's, from 1
}

// notes is the row's notes: a soak window's error burst first; the
// engine's queue if queue.
func (t tableLevel) notes(queue bool) []string {
	notes := t.Level.Notes(queue)
	if t.window != nil && t.window.ErrorBurst {
		notes = append([]string{"error burst"}, notes...)
	}
	return notes
}

// name is how a footnote names its row: "burst at 17.8 req/s", "soak
// window 3".
func (t tableLevel) name() string {
	if t.window != nil {
		return fmt.Sprintf("%s window %d", t.Stage, t.index)
	}
	return t.Stage + " at " + t.RateName()
}

// tableLevels are a run's levels in the order they ran, then a soak's
// windows.
func tableLevels(r *Run) []tableLevel {
	var levels []tableLevel
	add := func(l *Level) {
		if l != nil {
			levels = append(levels, tableLevel{Level: l})
		}
	}
	add(r.Baseline)
	for i := range r.Sweep {
		add(&r.Sweep[i])
	}
	for i := range r.Verify {
		add(&r.Verify[i])
	}
	add(r.Burst)
	if r.Soak != nil {
		for i := range r.Soak.Windows {
			levels = append(levels, tableLevel{Level: &r.Soak.Windows[i].Level, window: &r.Soak.Windows[i], index: i + 1})
		}
	}
	return levels
}

// levelLoad is a level's clients, intended rate and offered rate, "-"
// where it has none.
func levelLoad(l *Level) (clients, rate, offered string) {
	clients, rate, offered = "-", "-", "-"
	if l.Concurrency > 0 {
		clients = fmt.Sprint(l.Concurrency)
	}
	if l.IntendedRate > 0 {
		rate = fmt.Sprintf("%.3g", l.IntendedRate)
	}
	if l.Prober != nil {
		offered = fmt.Sprintf("%.3g", l.OfferedRate)
	}
	return clients, rate, offered
}

// wrap breaks text at spaces into lines of at most width, the lines after
// the first indented; a word longer than a line stays whole.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(text) {
		switch {
		case i == 0:
		case line+1+len(word) > width:
			b.WriteString("\n" + indent)
			line = len(indent)
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// verifiedText states a run's capacity conclusion with its interval and
// sample, or that there is none: "7.9 req/s verified open loop (attained
// 97.2% [95.3, 98.4] of 412; 7.7 good req/s), below 8.4 req/s
// (inconclusive)".
func verifiedText(r *Run) string {
	c := r.Capacity
	rate, ok := c.Verified()
	concluded := r.Verdict == VerdictPass || r.Verdict == VerdictFail
	switch {
	case !ok || !concluded:
		return "not concluded"
	case rate == 0:
		return "no open-loop rate verified"
	}
	text := fmt.Sprintf("%.3g req/s verified open loop", rate)
	if l := r.VerifiedLevel(rate); l != nil {
		if l.Decision != "" {
			text += fmt.Sprintf(" (%s; %.3g good req/s)", attainmentText(l), c.VerifiedGoodput)
		} else {
			text += fmt.Sprintf(" (%.3g good req/s)", c.VerifiedGoodput)
		}
	}
	return withBound(text, c)
}

// withBound adds to a verified capacity's text where the capacity lies
// above it (Capacity.BoundText): ", below 4.33 req/s (missed)", or "; at
// least 3.88 req/s: ...".
func withBound(text string, c *Capacity) string {
	switch b := c.BoundText(); {
	case b == "":
		return text
	case strings.HasPrefix(b, "below"):
		return text + ", " + b
	default:
		return text + "; " + b
	}
}

// searchText is the open-loop search's path, in the order it ran:
// "5.55 met, 8.88 inconclusive, 7.2 met (bisection)".
// SearchText is the open-loop search of the run, in the order run: each
// level's offered rate and decision, "4.09 req/s met, 5.4 req/s missed
// (bisection)". The CLI's summary, the report and the comparison all
// state it from here.
func (r *Run) SearchText() string { return searchText(r.Verify) }

func searchText(verify []Level) string {
	var parts []string
	for i := range verify {
		l := &verify[i]
		if l.Decision == "" {
			continue // not run, or a schema-1 run (its rows say it)
		}
		var how []string
		if strings.HasPrefix(l.Why, "bisection") {
			how = append(how, "bisection")
		} else if strings.HasPrefix(l.Why, "forecast") {
			how = append(how, strings.SplitN(l.Why, ":", 2)[0])
		} else if strings.HasPrefix(l.Why, "measured again:") {
			how = append(how, "a second window") // the bracket's top measured again (againAtTop)
		}
		// Measured again: to decide it (First, AgainProberBound), or
		// because the prober limited a measurement (Remeasured).
		again := len(l.Remeasured)
		if l.First != "" || l.AgainProberBound != "" {
			again++
		}
		switch {
		case again == 1:
			how = append(how, "measured again")
		case again > 1:
			how = append(how, fmt.Sprintf("measured %d times", again+1))
		}
		if l.Pooled != nil {
			how = append(how, "pooled with "+l.Pooled.rates())
		}
		part := fmt.Sprintf("%.3g req/s %s", l.OfferedRate, searchDecision(l))
		if len(how) > 0 {
			part += " (" + strings.Join(how, ", ") + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// attained is a level's attainment with its interval: "97.3% [95.1,
// 98.6]"; a schema-1 level's without one.
func attained(l *Level) string {
	if iv := l.Interval; iv != nil {
		return fmt.Sprintf("%.1f%% [%.1f, %.1f]", 100*l.Attainment, lower(iv), upper(iv))
	}
	return fmt.Sprintf("%.1f%%", 100*l.Attainment)
}

// levelDecision is a level's decision against its objective ("met",
// "missed", "inconclusive"), "" for none: a burst is judged by its drain.
func levelDecision(l *Level) string {
	switch {
	case l.Decision != "" && l.Prober != nil && l.Stage != "burst":
		return l.Decision
	case l.Decision == "" && l.Met:
		return "met"
	}
	return ""
}

// Notes is what is to know of a level but its decision, a clause a fact:
// why it is not used (the prober limited it) first, then its extensions
// and how many times it was measured, then the rest; the engine's queue
// if queue. The terminal's table and the report both write them, "not
// used: prober-bound (send_lag, reads up to 49 ms late): ...; measured 3
// times (busy host)".
func (l *Level) Notes(queue bool) []string {
	var notes, rest []string
	if l.Note != "" {
		for _, clause := range strings.Split(l.Note, "; ") {
			if strings.HasPrefix(clause, notUsed) {
				notes = append(notes, clause)
			} else {
				rest = append(rest, clause)
			}
		}
	}
	implied := l.ImpliedBy > 0
	if implied {
		notes = append(notes, impliedNote(clients(l.ImpliedBy)))
	}
	// A run stored before the implied note was one clause wrote it as
	// two ("too few requests to decide; implied by 8 req/s, which met").
	if i := slices.Index(rest, tooFew); i >= 0 && i+1 < len(rest) && strings.HasPrefix(rest[i+1], "implied by ") {
		rest = slices.Delete(rest, i, i+1)
	}
	for i, clause := range rest {
		if strings.HasPrefix(clause, "implied by ") {
			if !strings.Contains(clause, tooFew) {
				clause += ": " + tooFew + " alone"
			}
			notes = append(notes, clause)
			rest = slices.Delete(rest, i, i+1)
			implied = true
			break
		}
	}
	switch {
	case l.Batches > 0 && l.ToDecide != nil && l.ToDecide.Early:
		key := "window.max_steady"
		if l.Stage == "verify" {
			key = "verify.max_steady" // the search's levels' (window.max_steady unless set)
		}
		notes = append(notes, fmt.Sprintf("stopped undecided after %s: %s, more than %s holds", seconds(l.WindowSeconds), l.ToDecide.Text(), key))
	case l.Batches > 0 && l.ToDecide != nil:
		notes = append(notes, fmt.Sprintf("undecided after %s: %s", seconds(l.WindowSeconds), l.ToDecide.Text()))
	case l.Batches > 0 && l.Looks > 0 && l.Decision != DecisionInconclusive:
		notes = append(notes, fmt.Sprintf("decided after %s", seconds(l.WindowSeconds)))
	case l.Batches == 0 && l.Extensions > 0:
		notes = append(notes, fmt.Sprintf("window extended %dx", l.Extensions)) // a run before sequential looks
	}
	if n := len(l.Remeasured); n > 0 {
		notes = append(notes, fmt.Sprintf("measured %d times (%s)", n+1, strings.SplitN(l.Remeasured[n-1], ":", 2)[0]))
	}
	if f := failedText(l); f != "" {
		notes = append(notes, f)
	}
	if l.Insufficient && !implied {
		// Where a higher level implies it, its note says it was short.
		notes = append(notes, "few requests: under window.min_requests")
	}
	notes = append(notes, rest...)
	if d := droppedText(l); d != "" {
		notes = append(notes, d)
	}
	if n := l.LengthMismatches["input"]; n > 0 {
		notes = append(notes, fmt.Sprintf("usage.prompt_tokens off the prompt in %d", n))
	}
	if n := l.LengthMismatches["output"]; n > 0 {
		notes = append(notes, fmt.Sprintf("output off max_tokens in %d", n))
	}
	if tl := l.Timeline; tl != nil {
		switch took := tl.Drained - tl.BurstEnd; {
		case tl.Drained > 0 && took <= tl.DrainWithin:
			notes = append(notes, fmt.Sprintf("drained in %.1fs (within %gs)", took, tl.DrainWithin))
		case tl.Drained > 0:
			notes = append(notes, fmt.Sprintf("drained in %.1fs (over %gs)", took, tl.DrainWithin))
		default:
			notes = append(notes, fmt.Sprintf("did not drain within %gs", tl.DrainWithin))
		}
	}
	if q := l.EngineQueue; queue && q != nil && q.Samples > 0 {
		notes = append(notes, fmt.Sprintf("engine queue mean %.1f, max %d", q.Mean, q.Max))
	} else if q != nil && q.Samples == 0 && q.NotExposed {
		notes = append(notes, "engine queue not exposed by the engine's metrics")
	}
	if p := l.Prober; p != nil && !l.ProberBound() && len(p.Over) == 0 && (p.LagP99 > ProberLagLimit.Seconds() || p.CPUShare > ProberCPULimit) {
		notes = append(notes, fmt.Sprintf("prober busy: send lag P99 %.0f ms, CPU %.0f%%", 1e3*p.LagP99, 100*p.CPUShare))
	}
	return notes
}

// seconds writes a window's length: "36 s", "2m30s".
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	return d.String()
}

// attainedShort is attained without its spaces, for the terminal's
// table: "97.3%[95.1,98.6]".
func attainedShort(l *Level) string {
	if iv := l.Interval; iv != nil {
		return fmt.Sprintf("%.1f%%[%.1f,%.1f]", 100*l.Attainment, lower(iv), upper(iv))
	}
	return fmt.Sprintf("%.1f%%", 100*l.Attainment)
}

// ms2 is p50/p99 in milliseconds, a starred percentile over too few
// samples; the sample is the row's.
func ms2(p Percentiles) string {
	if p.N == 0 {
		return "-"
	}
	star := ""
	if slices.Contains(p.LowConfidence, "p99") {
		star = "*"
	}
	return fmt.Sprintf("%.0f/%.0f%s", 1e3*p.P50, 1e3*p.P99, star)
}

// ms3 is p50/p95/p99 in milliseconds with the sample count, a starred
// percentile over too few samples.
func ms3(p Percentiles) string {
	if p.N == 0 {
		return "-"
	}
	star := func(name string) string {
		for _, lc := range p.LowConfidence {
			if lc == name {
				return "*"
			}
		}
		return ""
	}
	return fmt.Sprintf("%.0f/%.0f%s/%.0f%s (%d)", 1e3*p.P50, 1e3*p.P95, star("p95"), 1e3*p.P99, star("p99"), p.N)
}

func ms1(p Percentiles, v float64) string {
	if p.N == 0 {
		return "-"
	}
	star := ""
	if len(p.LowConfidence) > 0 && p.LowConfidence[len(p.LowConfidence)-1] == "p99" {
		star = "*"
	}
	return fmt.Sprintf("%.0f%s", 1e3*v, star)
}

func (s *SoakRun) drift() *Drift {
	if s == nil {
		return nil
	}
	return s.Drift
}

// dropped returns the arrivals a level dropped, for every reason.
func dropped(l *Level) int {
	n := 0
	for _, d := range l.Dropped {
		n += d
	}
	return n
}

// droppedText names what a level's arrivals never sent were dropped for:
// "dropped 10 (max_in_flight)", or with more than one reason
// "dropped 12 (max_in_flight 10, late 2)". A drop at max_in_flight is
// the load's own cap (the server held that many); a late one, the
// prober's.
func droppedText(l *Level) string {
	n := dropped(l)
	if n == 0 {
		return ""
	}
	var why []string
	for _, r := range prober.DropReasons {
		if d := l.Dropped[string(r)]; d > 0 {
			why = append(why, fmt.Sprintf("%s %d", r, d))
		}
	}
	if len(why) == 1 {
		why[0] = strings.Fields(why[0])[0]
	}
	if len(why) == 0 {
		return fmt.Sprintf("dropped %d", n)
	}
	return fmt.Sprintf("dropped %d (%s)", n, strings.Join(why, ", "))
}

// tooFew is why a level below a met one is implied by it, not decided.
const tooFew = "too few requests to decide"

// impliedNote is the note of a level too short of requests to decide,
// which a higher met level decides: the decision first, "implied by 8
// req/s, which met: too few requests to decide alone".
func impliedNote(by string) string {
	return "implied by " + by + ", which met: " + tooFew + " alone"
}

// addNote appends s to a level's note.
func addNote(note, s string) string {
	if note == "" {
		return s
	}
	return note + "; " + s
}
