package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/alecthomas/kingpin/v2"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/servermetrics"
	"github.com/sloprober/sloprober/validity"
)

// probeCalibrationTimeout bounds the calibration of `probe` as a whole:
// /v1/models, /props and /tokenize in each engine's form are each allowed
// 10 s (prober's infoTimeout), so a target whose endpoints never answer
// would otherwise hold probe for about 50 s before its one request.
const probeCalibrationTimeout = 15 * time.Second

// probeCommand is `sloprober probe`: one request, printed as a timeline.
type probeCommand struct {
	cmd       *kingpin.CmdClause
	config    configSource
	url       *string
	starter   *starter
	target    *string
	scenario  *string
	simlisten *string
}

func newProbeCommand(app *kingpin.Application) *probeCommand {
	c := &probeCommand{cmd: app.Command("probe", "Send one request of a scenario to a target and print its timeline, outcome and SLO verdict; exit 0 only if the request is good.")}
	c.url = c.cmd.Arg("url", "An endpoint's OpenAI base URL (e.g. http://127.0.0.1:8000/v1), probed with the configuration `sloprober init` writes for it; instead of --config.file, --target and --scenario.").String()
	c.config = addConfigFlags(c.cmd)
	c.target = c.cmd.Flag("target", "Target name (required without a URL).").String()
	c.scenario = c.cmd.Flag("scenario", "Scenario name (required without a URL).").String()
	c.starter = addStarterFlags(c.cmd)
	c.simlisten = c.cmd.Flag("sim.listen-address", "Where the built-in simulator listens when no --config.file is given.").Default("127.0.0.1:0").String()
	return c
}

func (c *probeCommand) run(ctx context.Context, logger *slog.Logger, stdout, stderr io.Writer) int {
	if *c.url != "" {
		return c.runURL(ctx, stdout, stderr)
	}
	if err := c.starter.unused(); err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return 1
	}
	if *c.target == "" || *c.scenario == "" {
		fmt.Fprintln(stderr, "sloprober: probe needs an endpoint's URL (sloprober probe http://127.0.0.1:8000/v1) or --target and --scenario of a configuration")
		return 1
	}
	simURL := ""
	if *c.config.file == "" {
		sim, err := startEmbeddedSim(logger, *c.simlisten)
		if err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return 1
		}
		defer sim.stop(simStopTimeout)
		simURL = sim.url()
	}
	cfg, err := c.config.load(simURL + "/v1")
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return 1
	}
	return probeOnce(cfg, *c.target, *c.scenario, stdout, stderr)
}

// runURL probes the endpoint given by URL with its starter configuration.
func (c *probeCommand) runURL(ctx context.Context, stdout, stderr io.Writer) int {
	if *c.config.file != "" || *c.target != "" || *c.scenario != "" {
		fmt.Fprintln(stderr, "sloprober: probe URL takes no --config.file, --target or --scenario: the URL is the target, probed with the scenario `sloprober init` writes")
		return 1
	}
	if err := c.starter.resolve(ctx, *c.url); err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return 1
	}
	cfg, err := c.starter.config(c.starter.model)
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return 1
	}
	return probeOnce(cfg, cfg.Targets[0].Name, starterScenario, stdout, stderr)
}

// probeOnce sends one request of scenario to target and prints it.
func probeOnce(cfg *config.Config, target, scenario string, stdout, stderr io.Writer) int {
	t, s := cfg.Target(target), cfg.Scenario(scenario)
	if t == nil {
		fmt.Fprintf(stderr, "sloprober: --target %q: no such target in the configuration (have: %s)\n", target, names(cfg.Targets, func(t *config.TargetConfig) string { return t.Name }))
		return 1
	}
	if s == nil {
		fmt.Fprintf(stderr, "sloprober: --scenario %q: no such scenario in the configuration (have: %s)\n", scenario, names(cfg.Scenarios, func(s *config.ScenarioConfig) string { return s.Name }))
		return 1
	}
	client, err := prober.NewClient(t, userAgent(), 1)
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return 1
	}
	defer client.Close()

	// Calibrate the prompt length from the target's /tokenize, if it has
	// one, within probeCalibrationTimeout in all.
	cal := prober.NewCalibrator()
	ctx, cancel := context.WithTimeout(context.Background(), probeCalibrationTimeout)
	calib := client.Tokenize(ctx, cal)
	timedOut := ctx.Err() != nil
	cancel()
	req := prober.NewRequest(s, config.Key{Target: t.Name, Scenario: s.Name, Test: "probe"}, cal)
	r := &prober.Result{Target: t.Name, Scenario: s.Name, Test: "probe", Scheduled: time.Now()}
	client.Do(context.Background(), req, r)
	closesEvery := serverClosesConnections(client)
	m := prober.Measure(r, s.SLOs())
	m.Split = prober.SplitPhases(r, t.TimingOf().Sources)
	cutTo := 0
	if req.CutToContext {
		cutTo = cal.Context()
	}
	printTimeline(stdout, t, s, r, &m, cutTo)
	if closesEvery {
		fmt.Fprintln(stdout, "connection: the server closed the connection after its response although it answered keep-alive (as llama.cpp's server does):"+
			" every request pays a new connection, and a request sent on a kept-alive one races the close."+
			" sloprober sends each request on a connection of its own from the first such close, and retries one given a connection already closed (sloprober_request_retries_total).")
	}
	switch overhead, perWord := cal.Model(); {
	case calib.Tokenize != "":
		fmt.Fprintf(stdout, "prompt:     %d words for %d tokens (from /tokenize, %s form: %.1f tokens of overhead, %.3f tokens a word)\n",
			req.Words, req.InputTokens, calib.Tokenize, overhead, perWord)
	case timedOut:
		fmt.Fprintf(stdout, "prompt:     %d words for %d tokens (no calibration within %s: one token a word assumed)\n", req.Words, req.InputTokens, probeCalibrationTimeout)
	default:
		fmt.Fprintf(stdout, "prompt:     %d words for %d tokens (no /tokenize: one token a word assumed)\n", req.Words, req.InputTokens)
	}
	if calib.Context > 0 {
		fmt.Fprintf(stdout, "context:    %d tokens (from %s)\n", calib.Context, calib.ContextSource)
	}
	if t.ServerMetrics != nil {
		printEngine(stdout, t)
	}
	printProberHealth(stdout, r)
	if m.Good {
		return 0
	}
	return 1
}

// printEngine reads the target's engine metrics (server_metrics) once and
// says what they serve and what they do not: llama.cpp's /metrics has no
// KV-cache usage, and a reader of the canary's dashboards should know the
// panel is empty because the engine does not expose it, not because it
// is at zero.
func printEngine(w io.Writer, t *config.TargetConfig) {
	sc, err := servermetrics.NewScraper(t.Name, t.ServerMetrics)
	if err != nil {
		fmt.Fprintf(w, "engine:     server_metrics: %v\n", err)
		return
	}
	defer sc.Close()
	snap, err := sc.Scrape(context.Background())
	if err != nil {
		fmt.Fprintf(w, "engine:     server_metrics %s: not read: %s\n", config.RedactURL(t.ServerMetrics.URL), printable(err.Error()))
		return
	}
	fmt.Fprintf(w, "engine:     %s\n", engineText(snap))
}

// engineText says what one scrape of an engine's metrics served: "vllm:
// 0 running, 0 waiting, KV cache 2.1% used, prefix cache not exposed".
func engineText(s servermetrics.Snapshot) string {
	engine := cmp.Or(s.Engine, "unknown engine (none of vLLM's, SGLang's, TGI's or llama.cpp's names)")
	count := func(v *float64, what string) string {
		if v == nil {
			return what + " not exposed"
		}
		return fmt.Sprintf("%.0f %s", *v, what)
	}
	parts := []string{count(s.Running, "running"), count(s.Waiting, "waiting")}
	if s.KVCacheUsage != nil {
		parts = append(parts, fmt.Sprintf("KV cache %.1f%% used", 100**s.KVCacheUsage))
	} else {
		parts = append(parts, "KV-cache usage not exposed by the engine")
	}
	if s.PrefixCache == nil && s.PrefixCacheHitRatio == nil {
		parts = append(parts, "prefix cache not exposed")
	}
	return engine + ": " + strings.Join(parts, ", ")
}

// printLengths compares the lengths the server counted with those asked
// for, with the verdicts of the metrics (length_mismatches_total): a
// server that truncates prompts or ignores the maximum output length
// makes every other number of the probe mean something else. cutTo is the
// target's context length when sloprober cut the prompt to fit it, else 0.
func printLengths(p func(string, ...any), t *config.TargetConfig, r *prober.Result, m *prober.Measurement, cutTo int) {
	switch {
	case r.Usage == nil || r.Usage.PromptTokens <= 0:
		p("input:      %d tokens asked, not counted by the server (no usage)", r.InputTokens)
	case !m.InputMismatch:
		p("input:      %d tokens asked, %d counted by the server (within tolerance)", r.InputTokens, r.Usage.PromptTokens)
	case cutTo > 0 && r.Usage.PromptTokens < r.InputTokens:
		p("input:      %d tokens asked, %d counted by the server: MISMATCH beyond tolerance (sloprober cut the prompt to the target's context, %d tokens)", r.InputTokens, r.Usage.PromptTokens, cutTo)
	case r.Usage.PromptTokens < r.InputTokens:
		p("input:      %d tokens asked, %d counted by the server: MISMATCH beyond tolerance (the server may truncate)", r.InputTokens, r.Usage.PromptTokens)
	default:
		p("input:      %d tokens asked, %d counted by the server: MISMATCH beyond tolerance (the prompt calibration does not fit this server)", r.InputTokens, r.Usage.PromptTokens)
	}
	// The server's count only where it sent one: without usage (an ok
	// reply's fallback, or a failed one) N is sloprober's chunk count.
	counted := "counted by the server"
	if r.Usage == nil || r.Usage.CompletionTokens <= 0 {
		counted = "counted as chunks (no usage)"
	}
	switch {
	case !m.HasOutput:
		p("output:     %d tokens asked, none received", r.OutputTokens)
	case !m.OutputMismatch:
		p("output:     %d tokens asked, %d %s", r.OutputTokens, m.OutputTokens, counted)
	case m.UsageAboveAsked:
		// N was bounded: the server's count is what is off, and said.
		p("output:     %d tokens asked, %d counted by the server: MISMATCH, above what was asked and the %d text chunks received (its usage is wrong, or it ignores %s); TPOT counts %d",
			r.OutputTokens, r.Usage.CompletionTokens, len(r.Chunks), t.MaxTokensField, m.OutputTokens)
	case m.UsageBelowChunks:
		p("output:     %d tokens asked, %d counted by the server: MISMATCH, fewer than the %d text chunks received (its usage is wrong); TPOT counts %d",
			r.OutputTokens, r.Usage.CompletionTokens, len(r.Chunks), m.OutputTokens)
	case m.OutputTokens > r.OutputTokens:
		p("output:     %d tokens asked, %d %s: MISMATCH, longer than asked (the server ignores %s)", r.OutputTokens, m.OutputTokens, counted, t.MaxTokensField)
	default:
		p("output:     %d tokens asked, %d %s: MISMATCH, shorter than asked although ignore_eos was sent (the server ignores ignore_eos)", r.OutputTokens, m.OutputTokens, counted)
	}
}

// printable makes text from a server safe to print on a terminal: control
// and format characters (escape sequences, bidirectional overrides) are
// shown escaped, as \x1b or \u202e, instead of acting on the terminal.
func printable(s string) string {
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		switch {
		case c < 0x80 && unprintable(c):
			fmt.Fprintf(&b, "\\x%02x", c)
		case unprintable(c):
			fmt.Fprintf(&b, "\\u%04x", c)
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

func unprintable(c rune) bool { return unicode.IsControl(c) || unicode.Is(unicode.Cf, c) }

func names[T any](xs []T, name func(T) string) string {
	var out []string
	for _, x := range xs {
		out = append(out, name(x))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

// printPhases prints the split of the request's time (the spans of its
// trace) with the source of each phase.
func printPhases(p func(string, ...any), s *prober.Split) {
	var parts []string
	for _, ph := range s.Phases {
		parts = append(parts, fmt.Sprintf("%s %s (%s)", ph.Phase, fmtMS(ph.Duration()), ph.Source))
	}
	note := ""
	if s.ClientOnly() {
		note = "; no server timing source: the client's view only"
	}
	if len(s.Rejected) > 0 {
		note += "; not used (more than the client saw): " + strings.Join(s.Rejected, ", ")
	}
	p("phases:     %s%s", strings.Join(parts, ", "), note)
}

// printTimeline prints a request like blackbox_exporter's debug output: what
// happened when, then the numbers and the verdict. cutTo is the target's
// context length when the prompt was cut to fit it, else 0.
func printTimeline(w io.Writer, t *config.TargetConfig, s *config.ScenarioConfig, r *prober.Result, m *prober.Measurement, cutTo int) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	at := func(label string, d time.Duration, note string) {
		if d == 0 {
			p("  %-22s -", label)
			return
		}
		p("  %-22s +%s%s", label, fmtMS(d), note)
	}
	p("target:     %s (%s API, model %s, %s)", t.Name, t.API, t.Model, config.RedactURL(t.URL))
	p("scenario:   %s (input %d tokens, output %d tokens, ignore_eos %v)", s.Name, r.InputTokens, r.OutputTokens, s.IgnoreEOS)
	p("request id: %s", r.RequestID)
	p("timeline (from t0, when the request was sent):")
	p("  %-22s %s (%s before t0)", "scheduled", r.Scheduled.Format(time.RFC3339Nano), fmtMS(r.Lag()))
	p("  %-22s %s", "sent (t0)", r.Sent.Format(time.RFC3339Nano))
	conn := " (new connection)"
	if r.Trace.Reused {
		conn = " (reused connection)"
	}
	at("DNS done", r.Trace.DNSDone, "")
	if r.ConnectErr != "" {
		at("connect failed", r.Trace.ConnectDone, "") // the dial's end, not a connection
	} else {
		at("connected", r.Trace.ConnectDone, "")
	}
	at("TLS handshake done", r.Trace.TLSDone, "")
	at("got connection", r.Trace.GotConn, conn)
	at("request written", r.Trace.WroteRequest, "")
	at("first response byte", r.Trace.FirstByte, "")
	if n := len(r.Chunks); n > 0 {
		at("first token (t1)", r.Chunks[0], "")
		if n > 1 {
			gaps := slices.Sorted(prober.Gaps(r.Chunks))
			p("  %-22s %d chunks, %d gaps: min %s, median %s, p90 %s, max %s", "chunks", n, len(gaps),
				fmtMS(gaps[0]), fmtMS(gaps[len(gaps)/2]), fmtMS(gaps[len(gaps)*9/10]), fmtMS(gaps[len(gaps)-1]))
		}
		at("last token (tN)", r.Chunks[n-1], "")
	} else {
		p("  %-22s none", "first token (t1)")
	}
	done := " ([DONE] received)"
	if !r.Done {
		done = " (no [DONE])"
	}
	at("response end", r.Ended, done)
	p("status:     %d", r.StatusCode)
	if r.FinishReason != "" {
		p("finish:     %s", printable(r.FinishReason))
	}
	if u := r.Usage; u != nil {
		p("usage:      prompt %d tokens, completion %d tokens", u.PromptTokens, u.CompletionTokens)
		if u.CachedTokens != nil {
			// As the canary and a test count it (CachedPromptTokens),
			// or said not to be.
			if _, _, ok := r.CachedPromptTokens(); ok {
				p("cache:      %d of %d prompt tokens cached", *u.CachedTokens, u.PromptTokens)
			} else {
				p("cache:      %d of %d prompt tokens cached: not counted (impossible: more cached than prompt, or negative)", *u.CachedTokens, u.PromptTokens)
			}
		} else {
			p("cache:      not reported")
		}
	} else {
		p("usage:      none reported")
	}
	printLengths(p, t, r, m, cutTo)
	if tm := r.Timings; tm != nil {
		queue := "-"
		if tm.QueueMS != nil {
			queue = fmt.Sprintf("%.3f ms", *tm.QueueMS)
		}
		cached := ""
		if tm.CacheN != nil {
			cached = fmt.Sprintf(", %d cached", *tm.CacheN)
		}
		p("server timings: queue %s, prefill %.3f ms (%d tokens%s), decode %.3f ms (%d tokens)",
			queue, tm.PromptMS, tm.PromptN, cached, tm.PredictedMS, tm.PredictedN)
	}
	printPhases(p, &m.Split)
	if e := r.Error(); e != "" {
		p("error:      %s", printable(e))
	}
	p("outcome: %s", r.Outcome)
	show := func(name string, d time.Duration, ok bool) string {
		if !ok {
			return name + " -"
		}
		return name + " " + fmtMS(d)
	}
	p("measured:   %s, %s, %s, %s, output %d tokens%s",
		show("TTFT", m.TTFT, m.HasTTFT), show("TPOT", m.TPOT, m.HasTPOT), show("E2E", m.E2E, m.HasE2E),
		show("max ITL", m.MaxITL, m.HasMaxITL), m.OutputTokens, map[bool]string{true: " (chunk count: no usage)", false: ""}[m.OutputFallback])
	// Reasoning first: when the answer started, after how much thinking.
	if m.HasTTFT && (!m.HasTTFA || m.TTFA != m.TTFT || m.ReasoningTokens > 0) {
		before := r.FirstAnswer
		if before < 0 || before > len(r.Chunks) {
			before = len(r.Chunks)
		}
		p("answer:     %s, %d reasoning tokens, %d of %d chunks before the answer",
			show("TTFA", m.TTFA, m.HasTTFA), m.ReasoningTokens, before, len(r.Chunks))
	}
	if req := r.Check; req != nil && !req.Passed {
		p("check:      %s FAILED: %s", req.Name, printable(req.Reason))
		p("reply:      %s", printable(req.Excerpt))
	}
	measured := map[string]bool{"ttft": m.HasTTFT, "ttfa": m.HasTTFA, "tpot": m.HasTPOT, "e2e": m.HasE2E, "max_itl": m.HasMaxITL}
	for _, slo := range s.SLOs() {
		verdict := "met"
		switch has, timed := measured[slo.Name]; {
		case slices.Contains(m.Missed, slo.Name) && timed && !has && r.Outcome != prober.OutcomeOK:
			// A failed request has no TTFT to compare: it counts as a
			// miss, which is not the same as a slow first token.
			verdict = fmt.Sprintf("not measured (%s): counted as missed", r.Outcome)
		case slices.Contains(m.Missed, slo.Name):
			verdict = "MISSED"
		}
		if slo.IsQuality() {
			p("slo %-8s %-13s %s", slo.Name, "check", verdict)
			continue
		}
		p("slo %-8s <= %-10s %s", slo.Name, slo.Threshold, verdict)
	}
	switch {
	case m.Good:
		p("verdict: good")
	case !m.Counted:
		p("verdict: not counted (%s)", r.Outcome)
	default:
		p("verdict: bad")
	}
}

// printProberHealth says whether this process could be trusted to measure
// the request: its send lag and connection wait, and the Go scheduler's
// latency and GC pauses since it started, against the default validity
// thresholds (README, "Is the prober the problem?").
func printProberHealth(w io.Writer, r *prober.Result) {
	sched, gc := validity.SinceStart()
	var wait time.Duration
	if r.Trace.Reused {
		wait = r.Trace.GotConn
	}
	verdict := "valid"
	if reasons := validity.DefaultConfig.Judge(0, sched, gc, r.Lag(), wait); len(reasons) > 0 {
		verdict = "NOT VALID (" + strings.Join(reasons, ", ") + "): the numbers above include the prober's own delays"
	}
	fmt.Fprintf(w, "prober:     %s: send lag %s, connection wait %s, scheduler latency P99 <= %s, GC pause P99 <= %s\n",
		verdict, fmtMS(r.Lag()), fmtMS(wait), fmtMS(sched), fmtMS(gc))
}

// serverClosesConnections waits up to closeWait for the server's end of the
// probe's connection and reports whether it closed every connection after
// one response: a server that does so closes at once, so a close not seen
// within closeWait is a kept connection.
func serverClosesConnections(c *prober.Client) bool {
	const closeWait = 250 * time.Millisecond
	deadline := time.Now().Add(closeWait)
	for {
		closed, every := c.ServerConnections()
		if closed > 0 || time.Now().After(deadline) {
			return every
		}
		time.Sleep(5 * time.Millisecond)
	}
}
