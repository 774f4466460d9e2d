package exporter

import (
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"

	"github.com/sloprober/sloprober/internal/human"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
)

// WebOptions are what the web endpoints of `sloprober run` serve.
type WebOptions struct {
	Logger   *slog.Logger
	Gatherer prometheus.Gatherer
	// Recent holds the recent results the landing page shows (nil: none).
	Recent *Recent
	// Reload reloads the configuration and returns when it is done.
	Reload func() error
	// Config returns the configuration in force, secrets redacted.
	Config func() string
	// Loads returns the status of every load.
	Loads func() []prober.LoadStatus
	// Ready reports whether the first configuration has been applied.
	Ready func() bool
	// Notes are lines shown at the top of the landing page.
	Notes func() []string
	// Pprof serves net/http/pprof on /debug/pprof/.
	Pprof bool
	// API serves /api/ (the test API) and /reports/ (run reports), if
	// not nil; the same --web.config.file authentication covers it.
	API http.Handler
	// Reports lists the stored runs for the landing page, newest first
	// (nil: none).
	Reports func() []ReportLink
	// Tests lists the configured tests for the landing page, by name
	// (nil: none).
	Tests func() []TestLink
	// Health is whether sloprober's own measurements can be trusted
	// (nil: not shown).
	Health func() validity.Status
	// Stopping reports whether sloprober is stopping (nil: never). While
	// it is, /-/reload refuses at once and /-/ready answers 503, and every
	// other endpoint keeps answering: the landing page and /metrics are
	// what an operator looks at while requests in flight drain.
	Stopping func() bool
}

// ReportLink is a stored run on the landing page, with its report.
type ReportLink struct {
	ID, Test, Kind, Target, Verdict string
	End                             time.Time
	// Capacity is a step run's conclusion, e.g. "5.5 req/s", or "".
	Capacity string
}

// TestLink is a configured test on the landing page.
type TestLink struct {
	Name, Kind, Target string
	// Schedule is its cron schedule ("" for none) and Next its next run.
	Schedule string
	Next     time.Time
	// Running is the running run's id, and Progress its level and
	// estimate ("" when not running).
	Running, Progress string
	// Last is its last run, if any.
	Last *ReportLink
}

// ErrStopping is returned by a reload refused because sloprober is
// stopping; /-/reload answers it with 503 at once instead of waiting for
// the grace period to end.
var ErrStopping = errors.New("sloprober is stopping")

// Handler serves every web endpoint of `sloprober run`.
type Handler struct {
	mux *http.ServeMux

	mu      sync.Mutex
	waiting []chan struct{} // closed by the next scrape of /metrics
}

// NewHandler returns the handler of every web endpoint.
func NewHandler(o WebOptions) *Handler {
	stopping := func() bool { return o.Stopping != nil && o.Stopping() }
	h := &Handler{mux: http.NewServeMux()}
	mux := h.mux
	mux.Handle("/metrics", h.notifyScrapes(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelError),
		EnableOpenMetrics: true,
	})))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "Healthy.")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, r *http.Request) {
		if stopping() {
			http.Error(w, "Not ready: sloprober is stopping.", http.StatusServiceUnavailable)
			return
		}
		if !o.Ready() {
			http.Error(w, "Not ready: no configuration applied yet.", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "Ready.")
	})
	mux.HandleFunc("/-/reload", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			w.Header().Set("Allow", "POST, PUT")
			http.Error(w, "Use POST or PUT to reload the configuration.", http.StatusMethodNotAllowed)
			return
		}
		// Checked before Reload, which may wait for a reload in progress:
		// a client must not hang until the grace period ends.
		if stopping() {
			http.Error(w, "Failed to reload config: "+ErrStopping.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := o.Reload(); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrStopping) {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, fmt.Sprintf("Failed to reload config: %s", err), code)
			return
		}
		fmt.Fprintln(w, "Configuration reloaded.")
	})
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if o.API != nil {
		mux.Handle("/api/", o.API)
		mux.Handle("/reports/", o.API)
	}
	mux.HandleFunc("/config", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fmt.Fprint(w, o.Config())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		serveLanding(w, o, stopping())
	})
	return h
}

// landingCSP is the landing page's Content-Security-Policy, as the
// reports': no script and no fetch (its charts are inline SVG), inline
// styles only. Target, scenario and model names are a configuration's,
// error messages a server's: nothing in them can run.
const landingCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// NextScrape returns a channel that is closed once a scrape of /metrics
// that began after the call has been answered. On shutdown, sloprober waits
// for one after the drain (at most --shutdown.linger), so that Prometheus
// sees the final counts, the requests ended as shutdown included, before
// the process exits.
func (h *Handler) NextScrape() <-chan struct{} {
	ch := make(chan struct{})
	h.mu.Lock()
	h.waiting = append(h.waiting, ch)
	h.mu.Unlock()
	return ch
}

// notifyScrapes wraps the /metrics handler: each scrape, once answered,
// closes the channels NextScrape handed out before it began. A scrape
// already in progress when NextScrape is called may have gathered earlier
// counts, so it does not count.
func (h *Handler) notifyScrapes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		waiting := h.waiting
		h.waiting = nil
		h.mu.Unlock()
		next.ServeHTTP(w, r)
		for _, ch := range waiting {
			close(ch)
		}
	})
}

// landingLoad is one load on the landing page.
type landingLoad struct {
	prober.LoadStatus
	Total, Good    int64
	Recent, Failed []RecentResult
	// Trend is the last hour's goodput, attainment and TTFT P99, a
	// minute a point; nil without a Recent.
	Trend *Sparklines
	// Measured is whether the target's measurements are valid: "valid",
	// "NOT VALID: <reasons>", or "" (not known).
	Measured string
}

// measured describes a target's validity for the loads table.
func measured(h *validity.Status, target string) string {
	if h == nil {
		return ""
	}
	ts, ok := h.Targets[target]
	switch {
	case !ok:
		return ""
	case ts.Valid:
		if p := pendingText(h, target); p != "" {
			return "valid, pending: " + p
		}
		return "valid"
	}
	return "NOT VALID: " + strings.Join(append(slices.Clone(h.Reasons), ts.Reasons...), ", ")
}

// pendingText lists the signals over their threshold, not yet for the
// sustain time, of the process and of target ("" for all targets):
// "send_lag on sim for 40s of 2m0s". Measurements are still valid, maybe
// not for long: the page shows them amber, not green.
func pendingText(h *validity.Status, target string) string {
	var parts []string
	for _, p := range h.Pending {
		if p.Target != "" && target != "" && p.Target != target {
			continue
		}
		part := p.Reason
		if p.Target != "" {
			part += " on " + p.Target
		}
		parts = append(parts, fmt.Sprintf("%s for %s of %s", part, p.For.Round(time.Second), h.Sustain))
	}
	return strings.Join(parts, ", ")
}

func serveLanding(w http.ResponseWriter, o WebOptions, stopping bool) {
	var health *validity.Status
	if o.Health != nil {
		h := o.Health()
		health = &h
	}
	var loads []landingLoad
	for _, st := range o.Loads() {
		l := landingLoad{LoadStatus: st, Measured: measured(health, st.Target)}
		if o.Recent != nil {
			l.Recent, l.Failed, l.Total, l.Good = o.Recent.Snapshot(st.Key)
			sp := sparklines(o.Recent.TrendAt(st.Key, time.Now()))
			l.Trend = &sp
		}
		loads = append(loads, l)
	}
	var reports []ReportLink
	if o.Reports != nil {
		reports = o.Reports()
	}
	var tests []TestLink
	if o.Tests != nil {
		tests = o.Tests()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", landingCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	err := landingTemplate.Execute(w, map[string]any{
		"Version":  version.Info(),
		"Notes":    o.Notes(),
		"Loads":    loads,
		"Stopping": stopping,
		"Reports":  reports,
		"Tests":    tests,
		"Health":   health,
	})
	if err != nil {
		o.Logger.Error("Error rendering the landing page", "err", err)
	}
}

func ms(d time.Duration) string {
	switch d {
	case 0:
		return "-"
	case math.MaxInt64: // a P99 above the last bucket of its histogram
		return "> 67 s"
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

var landingTemplate = template.Must(template.New("landing").Funcs(template.FuncMap{
	"ms":    ms,
	"human": human.Duration,
	// A diagnostic's P99: 0 is none, not unknown ("&le; 0.0 ms", not
	// "&le; -").
	"p99": func(d time.Duration) string {
		if d == 0 {
			return "0.0 ms"
		}
		return ms(d)
	},
	"pct": func(good, total int64) string {
		if total == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f%%", 100*float64(good)/float64(total))
	},
	// A result's time with its date and zone, UTC as every other time
	// sloprober shows.
	"clock":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
	"pending":   pendingText,
	"join":      strings.Join,
	"hasPrefix": strings.HasPrefix,
	"mul100":    func(f float64) float64 { return 100 * f },
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>sloprober</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.2em .6em;font-size:90%;text-align:left;max-width:30em;overflow-wrap:anywhere}
th{background:#f3f3f3}
.bad{color:#b00}.good{color:#070}.pending{color:#a60}
td.error{max-width:40em;white-space:pre-wrap;overflow-wrap:anywhere}
h2{margin-top:1.5em}
table.trend td{vertical-align:middle}svg.spark{vertical-align:middle;margin-left:.5em}
</style></head>
<body>
<h1>sloprober</h1>
<p>{{.Version}}</p>
{{if .Stopping}}<p class="bad"><strong>sloprober is stopping:</strong> no new requests are sent; requests in flight are draining.</p>{{end}}
{{range .Notes}}<p>{{.}}</p>{{end}}
<p><a href="/metrics">Metrics</a> · <a href="/config">Configuration</a> · <a href="/-/healthy">Health</a> · <a href="/-/ready">Readiness</a></p>
{{with .Health}}{{$pending := pending . ""}}<p class="{{if not .Valid}}bad{{else if $pending}}pending{{else}}good{{end}}"><strong>Prober health: measurements {{if .Valid}}valid{{if $pending}}, but pending: {{$pending}} over the threshold; they become NOT VALID if it lasts{{end}}{{else}}NOT VALID ({{join .AllReasons ", "}}): the prober, not the target, is the limit; latencies include its own delays, and the SLO alerts of the targets marked below are held{{end}}.</strong>
Over the last window: CPU {{printf "%.0f" (mul100 .CPUShare)}}% of GOMAXPROCS, scheduler latency P99 &le; {{p99 .SchedulerP99}}, GC pause P99 &le; {{p99 .GCPauseP99}}{{range $t, $s := .Targets}}; {{$t}}: send lag P99 &le; {{p99 $s.SendLagP99}}, connection wait P99 &le; {{p99 $s.PoolWaitP99}}{{end}}.</p>{{end}}
<h2>Loads</h2>
<table>
<tr><th>target</th><th>scenario</th><th>test</th><th>arrival</th><th>load</th><th>in flight</th><th>finished</th><th>good</th><th>SLOs</th><th>measurements</th></tr>
{{range .Loads}}<tr><td>{{.Target}}</td><td>{{.Scenario}}</td><td>{{.Test}}</td><td>{{.Arrival}}</td>
<td>{{if not .Enabled}}paused{{else if eq .Arrival "closed"}}{{.Clients}} clients (closed loop){{else}}{{.Rate}} req/s{{end}}</td><td>{{.InFlight}}</td><td>{{.Total}}</td><td>{{pct .Good .Total}}</td>
<td>{{range .SLOs}}{{if .IsQuality}}{{.Name}} check {{else}}{{.Name}} &le; {{human .Threshold}} {{end}}{{end}}</td>
<td class="{{if eq .Measured "valid"}}good{{else if hasPrefix .Measured "valid"}}pending{{else if .Measured}}bad{{end}}">{{.Measured}}</td></tr>
{{else}}<tr><td colspan="10">No loads configured.</td></tr>{{end}}
</table>
{{if .Tests}}<h2>Tests</h2>
<table>
<tr><th>test</th><th>kind</th><th>target</th><th>schedule</th><th>next run</th><th>now</th><th>last run</th></tr>
{{range .Tests}}<tr><td>{{.Name}}</td><td>{{.Kind}}</td><td>{{.Target}}</td><td>{{or .Schedule "on demand"}}</td>
<td>{{if .Next.IsZero}}-{{else}}{{.Next.UTC.Format "2006-01-02 15:04:05Z"}}{{end}}</td>
<td>{{if .Running}}running: {{.Progress}}{{else}}-{{end}}</td>
<td>{{with .Last}}<span class="{{if eq .Verdict "pass"}}good{{else if eq .Verdict "running"}}{{else}}bad{{end}}">{{.Verdict}}</span>{{if not .End.IsZero}} {{.End.UTC.Format "2006-01-02 15:04:05Z"}} <a href="/reports/{{.ID}}">report</a>{{end}}{{if .Capacity}}, {{.Capacity}}{{end}}{{else}}never run{{end}}</td></tr>
{{end}}</table>{{end}}
{{if .Reports}}<h2>Test runs</h2>
<table>
<tr><th>ended</th><th>test</th><th>kind</th><th>target</th><th>verdict</th><th>capacity</th><th>report</th></tr>
{{range .Reports}}<tr><td>{{if .End.IsZero}}running{{else}}{{.End.UTC.Format "2006-01-02 15:04:05Z"}}{{end}}</td><td>{{.Test}}</td><td>{{.Kind}}</td><td>{{.Target}}</td>
<td class="{{if eq .Verdict "pass"}}good{{else if eq .Verdict "running"}}{{else}}bad{{end}}">{{.Verdict}}</td><td>{{.Capacity}}</td>
<td>{{if not .End.IsZero}}<a href="/reports/{{.ID}}">HTML</a> · <a href="/reports/{{.ID}}?format=md">Markdown</a> · <a href="/reports/{{.ID}}?format=json">JSON</a>{{end}}</td></tr>
{{end}}</table>{{end}}
{{range .Loads}}
<h2>{{.Target}} / {{.Scenario}} / {{.Test}}</h2>
{{with .Trend}}<table class="trend">
<tr><th>the last hour, a minute a point</th><th>last minute</th></tr>
<tr><td>goodput {{.Goodput}}</td><td>{{.LastGoodput}}</td></tr>
<tr><td>attainment {{.Attainment}}</td><td>{{.LastAttainment}}</td></tr>
<tr><td>TTFT P99 {{.TTFTP99}}</td><td>{{.LastTTFTP99}}</td></tr>
</table>{{end}}
<h3>Recent failures (not good)</h3>
{{template "results" .Failed}}
<h3>Recent results</h3>
{{template "results" .Recent}}
{{end}}
</body></html>
{{define "results"}}<table>
<tr><th>sent</th><th>request id</th><th>outcome</th><th>status</th><th>TTFT</th><th>TPOT</th><th>E2E</th><th>tokens</th><th>verdict</th><th>error</th></tr>
{{range .}}<tr><td>{{clock .Time}}</td><td><code>{{.RequestID}}</code></td><td>{{.Outcome}}</td><td>{{.Status}}</td>
<td>{{ms .TTFT}}</td><td>{{ms .TPOT}}</td><td>{{ms .E2E}}</td><td>{{.Tokens}}</td>
<td>{{if .Good}}<span class="good">good</span>{{else if ne (print .Outcome) "ok"}}<span class="bad">failed ({{.Outcome}})</span>{{else}}<span class="bad">missed {{range .Missed}}{{.}} {{end}}</span>{{end}}</td><td class="error">{{.Error}}</td></tr>
{{else}}<tr><td colspan="10">None yet.</td></tr>{{end}}
</table>{{end}}
`))
