package report

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/internal/human"
	"github.com/sloprober/sloprober/internal/markdown"
)

// WriteMarkdown writes the report as Markdown, for pasting into a change
// request: the nine sections of the seed's sign-off report, then every
// measured level.
func WriteMarkdown(w io.Writer, r *Report) error {
	m := &mdWriter{}
	m.header(r)
	m.testObject(r)
	m.loadModel(r)
	m.slos(r)
	m.capacity(r)
	if r.Cache != nil {
		m.cache(r)
	}
	m.risk(r)
	m.scaling(r)
	m.cost(r)
	if r.Soak != nil {
		m.soak(r)
	}
	m.provenance(r)
	m.levels(r)
	_, err := io.WriteString(w, m.String())
	return err
}

// mdWriter writes a capacity report's Markdown.
type mdWriter struct {
	markdown.Writer
	sections int // numbered so far
}

// section starts the report's next numbered section: a step report has no
// soak, a soak report no scaling basis, and the numbers have no gaps.
func (m *mdWriter) section(title string) {
	m.sections++
	m.P("## %d. %s", m.sections, title)
}

var (
	mdCell   = markdown.Cell
	codeSpan = markdown.CodeSpan
	free     = markdown.Free
	mdText   = markdown.Text
)

func (m *mdWriter) header(r *Report) {
	m.P("# Capacity report: %s (%s test): %s", mdText(r.Test), r.Kind, strings.ToUpper(r.Verdict))
	m.P("")
	m.P("> %s", mdText(r.Reason))
	m.P("")
	id := r.ID
	if id == "" {
		id = "(not stored)"
	}
	m.P("Run `%s` on target `%s`, %s to %s (%s).", id, mdText(r.TestObject.Target), r.Start.UTC().Format(time.RFC3339), r.End.UTC().Format(time.RFC3339), r.End.Sub(r.Start).Round(time.Second))
	for _, w := range r.Warnings {
		m.P("")
		m.P("**Warning:** %s.", mdText(w))
	}
	m.P("")
}

func (m *mdWriter) testObject(r *Report) {
	o := r.TestObject
	m.section("Test object")
	m.P("")
	m.Table("", "")
	m.Row("Target", free(o.Target))
	m.Row("URL", free(o.URL))
	m.Row("API / model", free(o.API+" / "+o.Model))
	m.Row("Replicas", fmt.Sprint(o.Replicas))
	for _, k := range slices.Sorted(maps.Keys(o.Metadata)) {
		m.Row(free(k), free(o.Metadata[k]))
	}
	m.Row("GPUs", free(o.GPU.text()))
	id := o.Identity
	var listed []string
	for _, sm := range id.Models {
		s := sm.ID
		if sm.Root != "" && sm.Root != sm.ID {
			s += " (" + sm.Root + ")"
		}
		if sm.MaxModelLen > 0 {
			s += fmt.Sprintf(", context %d", sm.MaxModelLen)
		}
		listed = append(listed, s)
	}
	models := strings.Join(listed, "; ")
	if id.ModelsError != "" {
		models = "not known: " + id.ModelsError
	}
	m.Row("Models listed (/v1/models)", orNone(free(models)))
	m.Row("Server header", orNone(free(said(id.Servers))))
	m.Row("Reply model", orNone(free(said(id.ReplyModels))))
	m.Row("system_fingerprint", orNone(free(said(id.Fingerprints))))
	if o.Simulator {
		m.Row("Note", "a sloprober simulator (ground truth), not a production engine")
	}
	m.P("")
}

// said writes what replies said of the server, with their counts.
func said(s []capacity.Said) string {
	var parts []string
	for _, v := range s {
		if v.Other {
			parts = append(parts, fmt.Sprintf("others (%d replies)", v.Replies))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%d replies)", v.Value, v.Replies))
	}
	return strings.Join(parts, "; ")
}

func orNone(s string) string {
	if s == "" {
		return "not stated"
	}
	return s
}

func (m *mdWriter) loadModel(r *Report) {
	lm := r.LoadModel
	m.section("Load model")
	m.P("")
	m.Table("Scenario", "Share", "Input tokens (configured)", "Output tokens (configured)", "ignore_eos", "Prefix", "Conversation", "Cancel")
	for _, s := range lm.Scenarios {
		in, out := s.Input, s.Output
		if s.LengthsFrom != nil {
			in = fmt.Sprintf("from %s (%s)", s.LengthsFrom.File, s.LengthsFrom.Format)
			out = in
		}
		prefix, conv, cancel := "-", "-", "-"
		if p := s.Prefix; p != nil {
			prefix = fmt.Sprintf("%.0f%% share one of %d prompts of %d tokens", 100*p.Share, p.Groups, p.Tokens)
		}
		if c := s.Conversation; c != nil {
			conv = fmt.Sprintf("%d turns, think %s", c.Turns, fmtSeconds(c.ThinkTimeSeconds))
		}
		if c := s.Cancel; c != nil {
			cancel = fmt.Sprintf("%.0f%% after %s", 100*c.Share, fmtSeconds(c.AfterSeconds))
		}
		m.Row(s.Name, fmt.Sprintf("%.0f%%", 100*s.Share), oneLine(in), oneLine(out), fmt.Sprint(s.IgnoreEOS), prefix, conv, cancel)
	}
	m.P("")
	m.P("Lengths actually sent and received over every measured request (P50 / P95 / P99, n):")
	m.P("input %s tokens (as sent), output %s tokens (as received).", tokens(lm.InputTokens), tokens(lm.OutputTokens))
	for _, s := range lm.Scenarios {
		if s.InputTokensSent != nil {
			m.P("%s: input %s, output %s.", mdText(s.Name), tokens(*s.InputTokensSent), tokens(*s.OutputTokensReceived))
		}
	}
	if lm.CachedShare != nil {
		m.P("The server reported %.1f%% of the prompt tokens as cached (prefix cache).", 100**lm.CachedShare)
	} else {
		m.P("The server did not report cached prompt tokens (usage's prompt_tokens_details.cached_tokens): the prefix cache's share is not known.")
	}
	if lm.Replay != "" {
		m.P("Requests from the trace %s.", mdText(lm.Replay))
	}
	switch lm.Cache {
	case "":
	case "cold":
		m.P("Cache: cold (every prompt salted): no two requests share a prefix, so the prefix cache finds nothing and the capacity is the uncached one.")
	case "both":
		m.P("Cache: both: a cold pass (every prompt salted) ran first, then the production pass (prompts as configured), whose verdict and capacity are the report's; the next sections compare them.")
	case "production":
		m.P("Cache: production (prompts as configured: the prefix cache finds what they share).")
	default:
		m.P("Cache: %s.", mdText(lm.Cache))
	}
	m.P("")
	m.Table("Stage", "Loop", "Arrivals", "Levels")
	for _, s := range lm.Stages {
		m.Row(s.Stage, s.Loop, s.Arrival, fmt.Sprint(s.Levels))
	}
	m.P("")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func tokens(p capacity.Percentiles) string {
	if p.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f (n=%d)", p.P50, p.P95, p.P99, p.N)
}

func (m *mdWriter) slos(r *Report) {
	m.section("SLO definitions")
	m.P("")
	m.Table("Scenario", "SLOs (per request)", "Objective")
	for _, s := range r.SLOs.Scenarios {
		var parts []string
		for _, slo := range s.SLOs {
			parts = append(parts, fmt.Sprintf("%s ≤ %s", slo.Name, fmtSeconds(slo.ThresholdSeconds)))
		}
		m.Row(s.Scenario, strings.Join(parts, ", "), fmt.Sprintf("%g%% of requests good", 100*s.Objective))
	}
	m.P("")
	for _, d := range r.SLOs.Definitions {
		m.P("- **%s**: %s.", d.Term, d.Definition)
	}
	m.P("")
}

func (m *mdWriter) capacity(r *Report) {
	m.section("Capacity conclusion")
	m.P("")
	c := r.Capacity
	if c == nil {
		switch {
		case r.Kind == "soak":
			m.P("A soak test does not search for capacity: see section 8.")
		case r.Verdict == "running" || r.Verdict == "aborted":
			m.P("Not concluded: the run is %s (%s). The levels measured so far are in the last section.", r.Verdict, mdText(r.Reason))
		case r.Verdict == capacity.VerdictInconclusive:
			m.P("**Not concluded**: %s. No capacity is stated. The levels measured are in the last section.", mdText(strings.TrimPrefix(r.Reason, "not concluded: ")))
		default:
			m.P("No capacity was found: %s.", mdText(r.Reason))
		}
		m.P("")
		if r.ClosedLoop != nil || r.Knee != nil {
			// What the sweep measured holds whether or not the run
			// concluded.
			m.P("What the closed-loop sweep measured (no capacity):")
			m.closedLoop(r)
			m.P("")
		}
		return
	}
	switch iv := c.VerifiedInterval; {
	case c.VerifiedRate > 0 && iv != nil:
		m.P("**Sustainable: %.3g req/s** open loop (Poisson; the rate its window offered), attaining %.1f%% [%.1f, %.1f] (95%% interval) over %d requests, %.3g good req/s; %.3g req/s per replica (%s, assumes linear scaling).",
			c.VerifiedRate, 100*c.VerifiedAttainment, lower(iv), upper(iv), iv.N, c.VerifiedGoodput, c.RatePerReplica, plural(c.Replicas, "replica"))
		switch {
		case c.Bound > 0 && c.BoundDecision == capacity.DecisionMissed:
			m.P("The capacity lies between %.3g req/s and %.3g req/s, the lowest rate above it, which missed.", c.VerifiedRate, c.Bound)
		case c.BoundText != "":
			// An undecided or prober-bound rate above it is no evidence
			// that the capacity lies below it: what it attained, and the
			// ceiling.
			m.P("Where the capacity lies above it: %s.", c.BoundText)
		}
	case c.VerifiedRate > 0:
		m.P("**Sustainable: %.3g req/s** open loop (Poisson) at %.1f%% attainment, %.3g good req/s; %.3g req/s per replica (%s, assumes linear scaling).",
			c.VerifiedRate, 100*c.VerifiedAttainment, c.VerifiedGoodput, c.RatePerReplica, plural(c.Replicas, "replica"))
	default:
		m.P("**No open-loop rate met every objective**: the closed-loop capacity below is not a sustainable rate.")
	}
	m.P("")
	if search := c.Search; search != "" {
		m.P("Search (open loop, in the order run): %s.", search)
		m.P("")
	}
	if _, text := c.Forecast.Verdict(); text != "" {
		m.P("Forecast: %s.", mdText(text))
		m.P("")
	}
	m.closedLoop(r)
	if c.LimitedBy != "" {
		m.P("The capacity may be higher: %s.", mdText(c.LimitedBy))
	}
	m.P("")
	m.P("Every percentile in this report is exact, over the requests sent in a level's steady window, with its sample count; `*` marks a P95 over fewer than 200 or a P99 over fewer than 1,000 samples. The levels are in the last section.")
	m.P("")
}

// closedLoop states the closed-loop capacity and the knee as the run has
// them (Report.ClosedLoop and Knee, as the terminal and the comparison
// read them): "Knee: 8 clients: goodput ...", or that none was reached.
func (m *mdWriter) closedLoop(r *Report) {
	if c := r.ClosedLoop; c != nil {
		// The closed loop's clients are its own: never beside the
		// (open-loop) verified rate.
		perReplica := ""
		if s := r.Capacity; s != nil && s.Replicas > 1 {
			perReplica = fmt.Sprintf(" (%.3g clients per replica)", s.ConcurrencyPerReplica)
		}
		m.P("Closed loop: %d clients%s completed %.3g req/s with every objective met.", c.Concurrency, perReplica, c.Rate)
	}
	switch k := r.Knee; {
	case k == nil:
	case k.Reached:
		m.P("Knee: %s.", mdText(k.Text()))
		if c := r.ClosedLoop; c != nil && c.Concurrency > k.Concurrency {
			// Two different questions, which a reader of "knee 1,
			// capacity 2" asks to have tied: where more clients stop
			// adding goodput, and up to where the objectives still hold.
			m.P("The two differ: goodput stopped growing at %s (the knee), while up to %s the objectives still held (the closed-loop capacity): the clients above the knee wait in the engine's queue, adding latency and no goodput.",
				clients(k.Concurrency), clients(c.Concurrency))
		}
	default:
		m.P("Knee: %s.", mdText(k.Text()))
	}
}

// cache writes a cache: both run's two passes side by side.
func (m *mdWriter) cache(r *Report) {
	c := r.Cache
	m.section("Prefix cache: cold and production")
	m.P("")
	m.P("- **Production** (prompts as configured, the prefix cache at work): %s.", passText(c.Production))
	m.P("- **Cold** (every prompt salted: the cache finds nothing): %s.", passText(c.Cold))
	m.P("")
	switch p, q := c.Production.VerifiedRate, c.Cold.VerifiedRate; {
	case c.Difference != nil && *c.Difference >= 0:
		m.P("Production caching adds %+.3g req/s (%s) over cold.", *c.Difference, human.SignedPercent(*c.DifferenceShare))
	case c.Difference != nil:
		m.P("Production caching changes the capacity by %+.3g req/s (%s) against cold: the cache did not help here.", *c.Difference, human.SignedPercent(*c.DifferenceShare))
	case p == nil && q == nil:
		m.P("No difference is stated: neither pass verified a rate.")
	case q == nil:
		m.P("No difference is stated: the cold pass verified no rate.")
	default:
		m.P("No difference is stated: the production pass verified no rate.")
	}
	m.P("Why it matters: prompts that all hit the prefix cache overstate the capacity (their prefill is skipped), prompts that never do understate it; production traffic lies between, by the prefixes it shares, and a change in it (a new system prompt, other users, a shorter cache life) moves the capacity within this range.")
	m.P("")
	m.P("The cold pass's levels, in the order they ran:")
	m.P("")
	m.levelTable(c.ColdLevels, r.TestObject.GPU.Measured)
	m.P("")
}

// passText says a cache pass's verified capacity, or that it verified
// none (never "0"), and its cached share.
func passText(p CachePass) string {
	cached := "the server did not report cached tokens"
	if p.CachedShare != nil {
		cached = fmt.Sprintf("%.1f%% of the prompt tokens cached", 100**p.CachedShare)
	}
	if r := p.EngineHitRatio; r != nil {
		cached += fmt.Sprintf(" (the engine's own counters: %.1f%% hits)", 100**r)
	}
	if p.VerifiedRate == nil {
		return fmt.Sprintf("no rate verified (%s: %s); %s", p.Verdict, mdText(p.Reason), cached)
	}
	s := fmt.Sprintf("**%.3g req/s** verified open loop", *p.VerifiedRate)
	if iv := p.VerifiedInterval; iv != nil {
		s += fmt.Sprintf(", attaining %.1f%% [%.1f, %.1f] (95%% interval) over %d requests", 100*p.VerifiedAttainment, lower(iv), upper(iv), iv.N)
	} else {
		s += fmt.Sprintf(" at %.1f%% attainment", 100*p.VerifiedAttainment)
	}
	return s + fmt.Sprintf(", %.3g good req/s; %s", p.VerifiedGoodput, cached)
}

func (m *mdWriter) risk(r *Report) {
	rk := r.Risk
	m.section("Risk boundaries")
	m.P("")
	if b := rk.Burst; b != nil {
		drained := fmt.Sprintf("the backlog drained in %s (allowed: %s)", fmtSeconds(b.DrainSeconds), fmtSeconds(b.DrainWithin))
		if !b.Drained {
			drained = fmt.Sprintf("the backlog did **not** drain (after %s)", fmtSeconds(b.DrainSeconds))
		}
		m.P("- **Burst**: %.3g req/s for %s; %.1f%% attainment, TTFT %s; at most %d requests in flight; %s.",
			b.rate(), fmtSeconds(b.ForSeconds), 100*b.Attainment, pct(b.TTFT), b.PeakInFlight, drained)
	}
	m.longest(rk.Longest)
	for _, f := range rk.GPU {
		m.P("- %s.", gpuLine(f))
	}
	for _, f := range rk.Faults {
		m.P("%s.", faultLine(f))
	}
	for _, n := range rk.PlanNotRun {
		m.P("- **Fault plan did not run as configured**: %s.", mdText(n))
	}
	if len(rk.ErrorBursts) > 0 {
		rec := "and recovered"
		if rk.Recovered != nil && !*rk.Recovered {
			rec = "and did **not** recover"
		}
		m.P("- **Error bursts** in windows %s %s.", ints(rk.ErrorBursts), rec)
	}
	if len(rk.Canary) == 0 {
		m.P("- **Canary**: none ran on the target during the test.")
	}
	for _, c := range rk.Canary {
		m.P("- **Canary** %s during the test: %.2f%% of %d requests good (objective %.2f%%); %.2f%% of its 30-day error budget.",
			mdText(c.Scenario), 100*c.Attainment, c.Counted, 100*c.Objective, 100*c.BudgetConsumed)
	}
	m.P("- **Single-tenant hot spots**: %s.", mdText(rk.HotSpots))
	m.P("")
	if r.Soak != nil && len(r.Soak.Impacts) > 0 {
		m.impacts(r.Soak.Impacts)
	}
}

// gpuLine writes a GPU finding as a list item's text.
func gpuLine(f GPUFinding) string {
	switch f.Kind {
	case GPUMemoryHeadroom:
		return "**GPU memory headroom**: " + mdText(f.Text)
	case GPUNearFull:
		return fmt.Sprintf("**GPU** at %s: **memory within 5%% of full**: %s", mdText(f.Level), mdText(f.Text))
	case GPUBusyQueueGrowing:
		return fmt.Sprintf("**GPU** at %s: **busy GPU while the queue grows**: %s", mdText(f.Level), mdText(f.Text))
	case GPUBusyQueueNotRead:
		return fmt.Sprintf("**GPU** at %s: busy GPU (queue not read): %s", mdText(f.Level), mdText(f.Text))
	case GPUBusySLOsHeld:
		return fmt.Sprintf("**GPU** at %s: busy GPU, SLOs held: fine (%s)", mdText(f.Level), mdText(f.Text))
	case GPUBusySLOsMissed:
		return fmt.Sprintf("**GPU** at %s: busy GPU, objectives missed: %s", mdText(f.Level), mdText(f.Text))
	}
	return "**GPU readings**: " + mdText(f.Text)
}

// faultLine writes what a fault plan did: a simulator's faults set or
// restored, or a fault action done or undone, with its result.
func faultLine(f capacity.FaultEvent) string {
	at := f.At.UTC().Format(time.TimeOnly)
	if f.Action != "do" && f.Action != "undo" {
		line := fmt.Sprintf("- **Fault plan**: %s `%s` at %s", f.Action, codeSpan(f.Faults), at)
		if f.Error != "" {
			line += " (failed: " + mdText(f.Error) + ")"
		}
		return line
	}
	line := fmt.Sprintf("- **Fault plan** step %d (%s): %s %s at %s", f.Step+1, mdText(f.Kind), f.Action, orNone(mdText(f.Description)), at)
	if f.DryRun {
		line += " (**dry run**: nothing was done)"
	}
	if f.Result != "" {
		line += ": " + mdText(f.Result)
	}
	if f.Seconds > 0 {
		line += fmt.Sprintf(" (took %s)", fmtSeconds(f.Seconds))
	}
	if f.Error != "" {
		line += " (**failed**: " + mdText(f.Error) + ")"
	}
	return line
}

// impacts writes what each fault step did to the target: its requests
// before, during and at the worst 30 s span, and the time to recover.
func (m *mdWriter) impacts(fis []capacity.FaultImpact) {
	m.P("**Failure and recovery**: each fault step's requests, by the time they were sent (before: as long as the step, at most 5 minutes; worst: the span of the lowest attainment from its start until recovery; recovered: two spans in a row back within the allowance, the attainment before less drift.goodput_drop of it).")
	m.P("")
	m.Table("Step", "Kind", "Description", "Before", "During", "Worst span", "Allowance", "Recovery")
	for _, fi := range fis {
		desc := free(fi.Description)
		switch {
		case fi.DryRun:
			desc = strings.TrimSpace(desc + " (dry run: nothing taken away)")
		case fi.ReplicaLost:
			desc = strings.TrimSpace(desc + " (a replica lost)")
		}
		worst := "-"
		if fi.Worst != nil {
			worst = fmt.Sprintf("%s (%s from %s)", spanText(fi.Worst), fmtSeconds(fi.Worst.Seconds), fmtSeconds(fi.Worst.Start.Sub(fi.Start).Seconds()))
		}
		m.Row(fmt.Sprint(fi.Step+1), fi.Kind, desc, spanText(fi.Before), spanText(fi.During), worst, fmt.Sprintf("%.1f%%", 100*fi.Allowance), recoveryText(&fi))
	}
	m.P("")
}

// spanText is an impact span: "99.2% [97.1, 99.8] of 360, 5.9 good/s".
func spanText(sp *capacity.ImpactSpan) string {
	switch {
	case sp == nil:
		return "-"
	case sp.Counted == 0:
		return fmt.Sprintf("no request counted (%s)", fmtSeconds(sp.Seconds))
	}
	s := fmt.Sprintf("%.1f%%", 100*sp.Attainment)
	if iv := sp.Interval; iv != nil {
		s += fmt.Sprintf(" [%.1f, %.1f]", lower(iv), upper(iv))
	}
	s += fmt.Sprintf(" of %d, %.3g good/s", sp.Counted, sp.Goodput)
	if sp.Failed > 0 {
		s += fmt.Sprintf(", %d failed outright", sp.Failed)
	}
	return s
}

// recoveryText says whether and when a fault step's requests recovered.
func recoveryText(fi *capacity.FaultImpact) string {
	switch {
	case !fi.Disrupted && fi.RecoverySeconds == nil:
		return "not measured: the soak ended before the step could be judged"
	case !fi.Disrupted:
		return "not disrupted"
	case fi.RecoverySeconds == nil:
		return "**not recovered** by the soak's end"
	}
	return "recovered in " + fmtSeconds(*fi.RecoverySeconds)
}

// longest writes the longest inputs' TTFT per level, as a table; when
// every request had the same input length there is nothing to single out.
func (m *mdWriter) longest(ls []Longest) {
	if len(ls) == 0 {
		return
	}
	same := true
	for _, lg := range ls {
		same = same && lg.MinInputTokens == ls[0].MinInputTokens && lg.SameLength
	}
	if same {
		m.P("- **Longest inputs**: every request had %d input tokens: no longer inputs to single out.", ls[0].MinInputTokens)
		return
	}
	m.P("- **Longest inputs**: the top decile of each level by input length, with its own TTFT:")
	m.P("")
	m.Table("Level", "Input tokens", "Requests", "Good", "TTFT P50 / P95 / P99")
	for _, lg := range ls {
		m.Row(where(lg.Stage, lg.Concurrency, cmp.Or(lg.OfferedRate, lg.IntendedRate)), fmt.Sprintf("≥ %d", lg.MinInputTokens), fmt.Sprint(lg.Requests),
			fmt.Sprintf("%.1f%%", 100*lg.Attainment), pct(lg.TTFT))
	}
	m.P("")
}

func where(stage string, c int, rate float64) string {
	switch {
	case c == 1:
		return stage + " 1 client"
	case c > 0:
		return fmt.Sprintf("%s %d clients", stage, c)
	}
	return fmt.Sprintf("%s %.3g req/s", stage, rate)
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// pct writes P50 / P95 / P99 (n) in ms, starring the low-confidence ones.
func pct(p capacity.Percentiles) string {
	if p.N == 0 {
		return "-"
	}
	star := func(q string) string {
		if slices.Contains(p.LowConfidence, q) {
			return "*"
		}
		return ""
	}
	return fmt.Sprintf("%s / %s%s / %s%s ms (n=%d)", ms(p.P50), ms(p.P95), star("p95"), ms(p.P99), star("p99"), p.N)
}

// ms writes seconds as milliseconds (sig4).
func ms(s float64) string { return sig4(1e3 * s) }

// sig4 writes a number to four significant figures, whole from 10,000
// on: 43,500 is "43500", never "4.35e+04".
func sig4(v float64) string {
	if math.Abs(v) >= 1e4 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

func (m *mdWriter) scaling(r *Report) {
	m.section("Scaling basis")
	m.P("")
	s := r.Scaling
	switch {
	case s != nil:
		carry, each := "carry", " each"
		if s.ReplicasForPeak == 1 {
			carry, each = "carries", ""
		}
		after := "carry"
		if s.ReplicasNeeded-1 == 1 {
			after = "carries"
		}
		m.P("For a forecast peak of %.4g req/s with N+%d redundancy: %s %s the peak at %.3g req/s%s, so **%s** are needed; after losing one, %d %s %.3g req/s, %s against the peak. This %s.",
			s.PeakRate, s.SpareReplicas, plural(s.ReplicasForPeak, "replica"), carry, s.RatePerReplica, each, plural(s.ReplicasNeeded, "replica"), s.ReplicasNeeded-1, after, s.CapacityAfterLoss, human.SignedPercent(s.HeadroomAfterLoss), s.Assumption)
	case r.Kind == "soak" && r.Soak != nil && r.Soak.OneLost != nil:
		m.P("%s", oneLostText(r.Soak.OneLost))
	case r.Kind == "soak":
		m.P("Not computed: a soak test does not measure capacity (a step test's report has it).")
	case r.Verdict == "running" || r.Verdict == "aborted":
		m.P("Not computed: the run did not conclude.")
	case r.Capacity == nil || r.Capacity.VerifiedRate == 0:
		m.P("Not computed: the run verified no sustainable rate.")
	default:
		m.P("Not computed: the target has no `forecast` (peak_rate, spare_replicas) in the configuration.")
	}
	m.P("")
}

// oneLostText is a soak's remaining capacity after losing a replica:
// computed from the last verified capacity beside measured.
func oneLostText(ol *capacity.ReplicaLoss) string {
	computed := "computed: not available (no step test verified a capacity on this target)"
	switch {
	case ol.Computed != nil && ol.VerifiedRate != nil:
		computed = fmt.Sprintf("computed %.3g req/s (%.3g req/s verified in run `%s` x %d/%d)", *ol.Computed, *ol.VerifiedRate, codeSpan(ol.ComputedFrom), ol.Replicas-1, ol.Replicas)
	case ol.Replicas <= 1:
		computed = "computed: not available (one replica: none remains)"
	}
	return fmt.Sprintf("After losing one of %s (fault step %d, at %.3g req/s): %s; measured: %s.", plural(ol.Replicas, "replica"), ol.Step+1, ol.Offered, computed, mdText(ol.Measured))
}

func (m *mdWriter) cost(r *Report) {
	m.section("Cost")
	m.P("")
	c := r.Cost
	switch {
	case r.Verdict == "running" || r.Verdict == "aborted":
		m.P("Not computed: the run did not conclude.")
	case c == nil:
		m.P("Not computed: the target has no `cost_per_hour` in the configuration.")
	case c.PerGoodRequest == 0:
		m.P("Not computed: %s.", c.Basis)
	default:
		m.P("%s per hour over %.3g good req/s (%s): **%s per SLO-good request, %s per 1,000**. Covers %s.",
			money(c.CostPerHour), c.Goodput, c.Basis, money(c.PerGoodRequest), money(c.Per1000Good), c.Excludes)
	}
	m.P("")
}

func (m *mdWriter) soak(r *Report) {
	s := r.Soak
	m.section("Soak")
	m.P("")
	m.P("%.3g req/s open loop, %d windows.", s.Rate, len(s.Windows))
	if d := s.Drift; d != nil {
		m.P("Drift (the end against the first window): %s; %s; prober memory %s.", d.Growth(), d.Attainment(), human.SignedPercent(d.MemoryGrowth))
		if len(d.ServerGrowth) > 0 {
			m.P("The server's own timings (P50): %s.", d.ServerTimings())
		}
	}
	m.P("")
	gpus := r.TestObject.GPU.Measured
	header := []string{"Window", "Start", "Sent", "Dropped", "Good/s", "Attained", "TTFT", "E2E", "Prober RSS"}
	if gpus {
		header = append(header, gpuHeader...)
	}
	m.Table(append(header, "Note")...)
	for i, w := range s.Windows {
		note := w.Note
		if w.ErrorBurst {
			note = strings.TrimSpace("error burst " + note)
		}
		if w.Cache != "" {
			note = strings.TrimSpace("cache " + w.Cache + " " + note)
		}
		if q := w.EngineQueue; q != nil && q.Samples > 0 {
			note = strings.TrimSpace(note + fmt.Sprintf(" engine queue: mean %.1f, max %d", q.Mean, q.Max))
		}
		row := []string{fmt.Sprint(i + 1), fmt.Sprintf("%.0fs", w.StartSeconds), fmt.Sprint(w.Sent), fmt.Sprint(w.Dropped), fmt.Sprintf("%.3g", w.Goodput),
			fmt.Sprintf("%.1f%%", 100*w.Attainment), pct(w.TTFT), pct(w.E2E), fmt.Sprintf("%d MiB", w.ProberRSSBytes>>20)}
		if gpus {
			row = append(row, gpuUtil(w.GPU), gpuMem(w.GPU))
		}
		m.Row(append(row, note)...)
	}
	m.P("")
}

func (m *mdWriter) provenance(r *Report) {
	p := r.Provenance
	m.section("Provenance")
	m.P("")
	m.Table("", "")
	version := strings.TrimSpace(p.Version + " " + p.Revision)
	if version == "" {
		version = "a development build (no version)"
	}
	m.Row("sloprober", version)
	m.Row("Configuration (SHA-256)", orNone(p.ConfigHash))
	m.Row("Schema version", fmt.Sprint(r.SchemaVersion))
	m.Row("Prober send lag", fmt.Sprintf("P99 at most %s, max %s", fmtSeconds(p.Prober.LagP99Seconds), fmtSeconds(p.Prober.LagMaxSeconds)))
	m.Row("Prober CPU", fmt.Sprintf("at most %.0f%% of its CPUs", 100*p.Prober.CPUShare))
	m.Row("Arrivals dropped", fmt.Sprint(p.Prober.Dropped))
	verdict := "trustworthy: lag and CPU within their limits (10 ms, 90%)"
	if len(p.Prober.Distorted) > 0 {
		verdict = "possibly distorted: " + joinAnd(p.Prober.Distorted)
	}
	m.Row("Measurement", verdict)
	m.P("")
	if r.LoadModel.Test != "" {
		m.P("The test as it ran (defaults applied):")
		m.P("")
		m.P("```yaml")
		m.P("%s", strings.ReplaceAll(r.LoadModel.Test, "```", "'''"))
		m.P("```")
		m.P("")
	}
}

// gpuHeader are the GPU columns of a table of levels.
var gpuHeader = []string{"GPU util mean / max", "GPU mem max (of total)"}

func (m *mdWriter) levels(r *Report) {
	m.P("## Levels")
	m.P("")
	judged := m.levelTable(r.Levels, r.TestObject.GPU.Measured)
	m.P("")
	if judged {
		m.P("%s", "`*`: over too few samples (P95 below 200, P99 below 1,000). [95% CI]: the attainment's interval (Wilson's, over the effective sample size the batch means and the requests' autocorrelation give); a level is met when its lower end is at or above the objective, missed when its upper end is below, otherwise inconclusive.")
		return
	}
	m.P("`*`: over too few samples (P95 below 200, P99 below 1,000).")
}

// levelTable writes a table of levels, with GPU columns when gpus; it
// reports whether the levels were judged on intervals (schema 2).
func (m *mdWriter) levelTable(levels []Level, gpus bool) bool {
	// A schema-2 run's levels have decisions on intervals and offered
	// rates; a schema-1 run's table is as it was.
	judged := slices.ContainsFunc(levels, func(l Level) bool { return l.Decision != "" })
	var header []string
	if judged {
		// One rate a level: the one its window offered (the rate it was
		// asked to run at is in the JSON, intended_rate).
		header = []string{"Stage", "Clients", "Offered/s", "Window", "Sent", "Ok/s", "Good/s", "In tok/s", "Out tok/s", "Attained [95% CI]", "TTFT", "TPOT P99", "E2E P99", "Drain"}
	} else {
		header = []string{"Stage", "Clients", "Rate/s", "Window", "Sent", "Ok/s", "Good/s", "In tok/s", "Out tok/s", "Attained", "TTFT", "TPOT P99", "E2E P99", "Drain"}
	}
	if gpus {
		header = append(header, gpuHeader...)
	}
	m.Table(append(header, "Note")...)
	var footnotes []string
	for _, l := range levels {
		clients, rate := "-", "-"
		if l.Concurrency > 0 {
			clients = fmt.Sprint(l.Concurrency)
		}
		if l.IntendedRate > 0 {
			rate = fmt.Sprintf("%.3g", l.IntendedRate)
		}
		// The decision first (none for a level not used: its notes say
		// so first), then its facts a clause each, as the terminal's
		// table writes them.
		lead := ""
		switch {
		case l.ProberBound:
		case judged && l.Decision != "" && l.Stage != "burst":
			lead = l.Decision
		case !judged && l.Met:
			lead = "met"
		}
		// Why the level ran at its rate comes after why it is not used,
		// before the rest.
		clauses := slices.Clone(l.Notes)
		if l.Why != "" {
			at := 0
			if l.ProberBound && len(clauses) > 0 {
				at = 1
			}
			clauses = slices.Insert(clauses, at, capacity.WhyText(l.Why))
		}
		// A long note is a numbered footnote under the table, as in the
		// terminal's table: in the row it would make the row tall.
		note := strings.Join(clauses, "; ")
		switch {
		case len(note) > noteInline:
			footnotes = append(footnotes, fmt.Sprintf("[%d] %s at %s: %s", len(footnotes)+1, l.Stage, levelLoad(l), note))
			note = strings.TrimSpace(fmt.Sprintf("%s [%d]", lead, len(footnotes)))
		case lead != "" && note != "":
			note = lead + ": " + note
		case lead != "":
			note = lead
		}
		var row []string
		if !judged {
			row = []string{l.Stage, clients, rate, fmtSeconds(l.WindowSeconds), fmt.Sprint(l.Sent), fmt.Sprintf("%.3g", l.CompletedRate), fmt.Sprintf("%.3g", l.Goodput),
				sig4(l.InputRate), sig4(l.OutputRate), fmt.Sprintf("%.1f%%", 100*l.Attainment),
				pct(l.TTFT), p99(l.TPOT), p99(l.E2E), fmtSeconds(l.DrainSeconds)}
		} else {
			attained := fmt.Sprintf("%.1f%%", 100*l.Attainment)
			if iv := l.Interval; iv != nil {
				attained += fmt.Sprintf(" [%.1f, %.1f]", lower(iv), upper(iv))
			}
			row = []string{l.Stage, clients, fmt.Sprintf("%.3g", l.OfferedRate), fmtSeconds(l.WindowSeconds), fmt.Sprint(l.Sent), fmt.Sprintf("%.3g", l.CompletedRate),
				fmt.Sprintf("%.3g", l.Goodput), sig4(l.InputRate), sig4(l.OutputRate), attained,
				pct(l.TTFT), p99(l.TPOT), p99(l.E2E), fmtSeconds(l.DrainSeconds)}
		}
		if gpus {
			row = append(row, gpuUtil(l.GPU), gpuMem(l.GPU))
		}
		m.Row(append(row, note)...)
	}
	if len(footnotes) > 0 {
		m.P("")
		for _, f := range footnotes {
			m.P("- %s", f)
		}
	}
	return judged
}

// noteInline is the longest note a levels table holds in its row ("met:
// decided after 36 s"); a longer one is a footnote under it: among
// nineteen columns a longer note wraps into a tall row.
const noteInline = 24

// rate is the burst's rate as every sentence states it: what it offered
// (what it was run at in a run that did not keep it).
func (b *Burst) rate() float64 { return cmp.Or(b.OfferedRate, b.IntendedRate) }

// levelLoad names a level in a footnote: its clients, or the rate it
// offered.
func levelLoad(l Level) string {
	switch {
	case l.Concurrency > 0:
		return plural(l.Concurrency, "client")
	case l.OfferedRate > 0:
		return fmt.Sprintf("%.3g req/s", l.OfferedRate)
	}
	return fmt.Sprintf("%.3g req/s", l.IntendedRate)
}

func p99(p capacity.Percentiles) string {
	if p.N == 0 {
		return "-"
	}
	s := ms(p.P99) + " ms"
	if slices.Contains(p.LowConfidence, "p99") {
		s += "*"
	}
	return s
}

// plural writes a count of things: "1 replica", "2 replicas".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// money writes an amount to three significant digits, never in
// exponent notation: 0.0000808, 0.0808, 2.5, 1250.
func money(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	digits := max(0, 2-int(math.Floor(math.Log10(math.Abs(v)))))
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// lower and upper are an interval's ends in percent, rounded outward.
func lower(iv *capacity.Interval) float64 { l, _ := iv.Percent(); return l }
func upper(iv *capacity.Interval) float64 { _, u := iv.Percent(); return u }
