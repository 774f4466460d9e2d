package exporter_test

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
)

// webOptions returns the options of a handler over reg and recent whose
// loads are those loads returns; Reload succeeds at once.
func webOptions(reg prometheus.Gatherer, recent *exporter.Recent, loads func() []prober.LoadStatus) exporter.WebOptions {
	return exporter.WebOptions{
		Logger:   promslog.NewNopLogger(),
		Gatherer: reg,
		Recent:   recent,
		Reload:   func() error { return nil },
		Config:   func() string { return "" },
		Loads:    loads,
		Ready:    func() bool { return true },
		Notes:    func() []string { return nil },
	}
}

// serve answers one request with h, in process.
func serve(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	b, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, string(b)
}

// TestLandingEscapesServerText: a server's error message is shown whole on
// the landing page, HTML-escaped, so a hostile server cannot inject markup.
func TestLandingEscapesServerText(t *testing.T) {
	long := strings.Repeat("the request exceeds the available context size, try increasing it ", 4)
	hostile := `<script>alert('pwned')</script><img src=x onerror=alert(1)> & ` + long + "END"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error": {"message": %q}}`, hostile)
	}))
	t.Cleanup(srv.Close)
	cfg := mustConfig(t, fmt.Sprintf(`
targets: [{name: hostile, url: "%s/v1", model: m}]
scenarios: [{name: chat, input_tokens: 16, output_tokens: 2, slo: {ttft: 1s}}]
canary: [{target: hostile, scenario: chat, rate: 20, arrival: constant}]
`, srv.URL))
	recent := exporter.NewRecent(20)
	reg, _, mgr := run(t, cfg, recent)
	require.Eventually(t, func() bool {
		return value(t, reg, "sloprober_requests_finished_total", map[string]string{"target": "hostile", "outcome": "http_5xx"}) >= 2
	}, 10*time.Second, 10*time.Millisecond)
	h := exporter.NewHandler(webOptions(reg, recent, mgr.Loads))
	code, page := serve(t, h, http.MethodGet, "/")
	mgr.Stop(0)

	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, "<script>alert")
	require.NotContains(t, page, "<img src=x")
	require.Contains(t, page, "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; &amp; the request exceeds")
	require.Contains(t, page, "increasing it END", "the message is shown whole (%d bytes), not cut", len(hostile))

	// And were anything to slip through, the browser runs no script and
	// sniffs no type.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, "default-src 'none'; style-src 'unsafe-inline'; img-src data:", rec.Header().Get("Content-Security-Policy"))
	require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
}

// TestWebWhileStopping: while sloprober stops, /-/reload answers at once
// with 503 (it does not wait for a reload in progress), /-/ready says so,
// and the landing page and /metrics keep answering.
func TestWebWhileStopping(t *testing.T) {
	reg := prometheus.NewRegistry()
	exporter.NewMetrics(reg)
	var mu sync.Mutex
	stopping := false
	reloading := make(chan struct{})
	o := webOptions(reg, exporter.NewRecent(20), func() []prober.LoadStatus { return nil })
	o.Reload = func() error {
		<-reloading // a reload that would wait for the grace period to end
		return nil
	}
	o.Stopping = func() bool {
		mu.Lock()
		defer mu.Unlock()
		return stopping
	}
	h := exporter.NewHandler(o)
	code, page := serve(t, h, http.MethodGet, "/")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, "is stopping")

	mu.Lock()
	stopping = true
	mu.Unlock()
	code, body := serve(t, h, http.MethodPost, "/-/reload")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "Failed to reload config: sloprober is stopping\n", body)
	code, body = serve(t, h, http.MethodGet, "/-/ready")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "sloprober is stopping")
	code, page = serve(t, h, http.MethodGet, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "sloprober is stopping:")
	code, _ = serve(t, h, http.MethodGet, "/metrics")
	require.Equal(t, http.StatusOK, code)
	code, _ = serve(t, h, http.MethodGet, "/-/healthy")
	require.Equal(t, http.StatusOK, code)
	close(reloading)

	// A reload the daemon refuses because it began to stop meanwhile is a
	// 503 too, not a configuration error.
	o.Stopping = nil
	o.Reload = func() error { return fmt.Errorf("%w: the configuration is not reloaded", exporter.ErrStopping) }
	code, body = serve(t, exporter.NewHandler(o), http.MethodPost, "/-/reload")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "sloprober is stopping: the configuration is not reloaded")
	o.Reload = func() error { return errors.New("bad file") }
	code, _ = serve(t, exporter.NewHandler(o), http.MethodPost, "/-/reload")
	require.Equal(t, http.StatusInternalServerError, code)
}

// blockingGatherer blocks each Gather until released, to hold a scrape in
// progress.
type blockingGatherer struct {
	started chan struct{}
	release chan struct{}
}

func (g *blockingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.started <- struct{}{}
	<-g.release
	return nil, nil
}

// TestNextScrape: the channel of NextScrape closes once a scrape that began
// after the call has been answered; a scrape already in progress gathered
// counts from before, so it does not count.
func TestNextScrape(t *testing.T) {
	g := &blockingGatherer{started: make(chan struct{}), release: make(chan struct{})}
	o := webOptions(g, nil, nil)
	h := exporter.NewHandler(o)

	first := make(chan struct{})
	go func() {
		defer close(first)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/metrics", nil))
	}()
	<-g.started
	next := h.NextScrape()
	g.release <- struct{}{}
	<-first
	select {
	case <-next:
		t.Fatal("a scrape that began before NextScrape closed its channel")
	default:
	}

	second := make(chan struct{})
	go func() {
		defer close(second)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/metrics", nil))
	}()
	<-g.started
	select {
	case <-next:
		t.Fatal("closed before the scrape was answered")
	default:
	}
	g.release <- struct{}{}
	<-second
	<-next // closed: the test would time out otherwise
}

// TestLandingRecent: the landing page shows the results Recent received as
// one of the manager's factories (composed with the metrics, as cmd does):
// each load's totals, its last results and its last failures; without a
// Recent it shows the loads with none.
func TestLandingRecent(t *testing.T) {
	info := prober.LoadInfo{Key: testKey, Rate: 2, Arrival: "poisson", SLOs: testSLOs}
	for _, tc := range []struct {
		name    string
		recent  bool
		want    []string
		notWant []string
	}{
		{name: "recent", recent: true,
			want: []string{"<td>2</td><td>50.00%</td>", "<code>good</code>", "<code>bad</code>", "HTTP 503: overloaded bad",
				// A failed request by its outcome, not as SLOs missed;
				// every time with its date and zone.
				`<span class="bad">failed (http_5xx)</span>`, "<td>2023-11-14 22:13:20.000Z</td>",
				// The last hour's trends, drawn in the page.
				"<th>the last hour, a minute a point</th>", `<td>goodput <svg class="spark"`, `<td>TTFT P99 <svg class="spark"`},
			notWant: []string{"None yet.", "missed ttft"}},
		{name: "no recent",
			want:    []string{"<td>0</td><td>-</td>", "None yet."},
			notWant: []string{"<code>good</code>", "<code>bad</code>", `class="spark"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			factories := []prober.ObserverFactory{exporter.NewMetrics(reg)}
			var recent *exporter.Recent
			if tc.recent {
				recent = exporter.NewRecent(20)
				factories = append(factories, recent)
			}
			obs := prober.Fanout(factories...).Observe(info)
			finish(obs, "good", true)
			finish(obs, "bad", false)
			h := exporter.NewHandler(webOptions(reg, recent, func() []prober.LoadStatus {
				return []prober.LoadStatus{{LoadInfo: info, Owner: "canary", Enabled: true}}
			}))
			code, page := serve(t, h, http.MethodGet, "/")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, "<h2>t / s / canary</h2>")
			for _, s := range tc.want {
				require.Contains(t, page, s)
			}
			for _, s := range tc.notWant {
				require.NotContains(t, page, s)
			}
		})
	}
}

// TestLandingClosedLoop: a closed-loop load is shown by its clients, not
// as 0 req/s.
func TestLandingClosedLoop(t *testing.T) {
	info := prober.LoadInfo{Key: testKey, Clients: 8, Arrival: "closed", SLOs: testSLOs}
	o := webOptions(prometheus.NewRegistry(), nil, func() []prober.LoadStatus {
		return []prober.LoadStatus{{LoadInfo: info, Owner: "knee", Enabled: true}}
	})
	code, page := serve(t, exporter.NewHandler(o), http.MethodGet, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "<td>8 clients (closed loop)</td>")
	require.NotContains(t, page, "0 req/s")
}

// TestLandingTests: the landing page lists the configured tests, run or
// not, with their schedule, next run, a running run's progress and the
// last verdict, each value escaped.
func TestLandingTests(t *testing.T) {
	o := webOptions(prometheus.NewRegistry(), nil, func() []prober.LoadStatus { return nil })
	o.Tests = func() []exporter.TestLink {
		return []exporter.TestLink{
			{Name: "knee", Kind: "step", Target: "sim", Schedule: "0 3 * * *", Next: time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC),
				Last: &exporter.ReportLink{ID: "knee-20261202T030000.000Z-0a1b2c3d", Verdict: "pass", End: time.Date(2026, 12, 2, 3, 5, 0, 0, time.UTC), Capacity: "8.88 req/s"}},
			{Name: "<i>soak</i>", Kind: "soak", Target: "sim", Running: "soak-x", Progress: "level 3 of about 9, sweep at 4 clients; 1m10s elapsed, about 4m50s left"},
			{Name: "never", Kind: "step", Target: "sim"},
		}
	}
	code, page := serve(t, exporter.NewHandler(o), http.MethodGet, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "<h2>Tests</h2>")
	require.Contains(t, page, "<td>knee</td><td>step</td><td>sim</td><td>0 3 * * *</td>\n<td>2026-12-03 03:00:00Z</td>\n<td>-</td>")
	require.Contains(t, page, `<span class="good">pass</span> 2026-12-02 03:05:00Z <a href="/reports/knee-20261202T030000.000Z-0a1b2c3d">report</a>, 8.88 req/s`)
	require.Contains(t, page, "<td>running: level 3 of about 9, sweep at 4 clients; 1m10s elapsed, about 4m50s left</td>")
	require.Contains(t, page, "&lt;i&gt;soak&lt;/i&gt;")
	require.Contains(t, page, "<td>never</td><td>step</td><td>sim</td><td>on demand</td>")
	require.Contains(t, page, "<td>never run</td>")
}

// TestLandingReports: the landing page lists the stored runs, the finished
// ones with links to their reports, each value escaped.
func TestLandingReports(t *testing.T) {
	o := webOptions(prometheus.NewRegistry(), nil, func() []prober.LoadStatus { return nil })
	o.Reports = func() []exporter.ReportLink {
		return []exporter.ReportLink{
			{ID: "knee-20261130T172029.946Z-0a1b2c3d", Test: "knee", Kind: "step", Target: "sim", Verdict: "pass",
				End: time.Date(2026, 11, 30, 17, 22, 45, 0, time.UTC), Capacity: "8.88 req/s"},
			{ID: "soak-20261130T180000.000Z-00000000", Test: "<b>soak</b>", Kind: "soak", Target: "sim", Verdict: "running"},
		}
	}
	code, page := serve(t, exporter.NewHandler(o), http.MethodGet, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `<a href="/reports/knee-20261130T172029.946Z-0a1b2c3d">HTML</a>`)
	require.Contains(t, page, `<a href="/reports/knee-20261130T172029.946Z-0a1b2c3d?format=md">Markdown</a>`)
	require.Contains(t, page, "2026-11-30 17:22:45Z")
	require.Contains(t, page, "8.88 req/s")
	require.Contains(t, page, "&lt;b&gt;soak&lt;/b&gt;")
	require.NotContains(t, page, "/reports/soak-", "a running run has no report yet")
}

// TestLandingHealth: the landing page says whether the prober's own
// measurements can be trusted, why not, and per load its target's.
func TestLandingHealth(t *testing.T) {
	info := prober.LoadInfo{Key: testKey, Rate: 2, Arrival: "poisson", SLOs: testSLOs}
	loads := func() []prober.LoadStatus {
		return []prober.LoadStatus{{LoadInfo: info, Owner: "canary", Enabled: true}}
	}
	for _, tc := range []struct {
		name    string
		health  func() validity.Status
		want    []string
		notWant []string
	}{
		{name: "not shown", notWant: []string{"Prober health", "<th>measurements</th><td"}},
		{name: "valid", health: func() validity.Status {
			return validity.Status{Valid: true, CPUShare: 0.12, SchedulerP99: 256 * time.Microsecond,
				Targets: map[string]validity.TargetStatus{"t": {Valid: true, SendLagP99: 2 * time.Millisecond}}}
		}, want: []string{`<p class="good"><strong>Prober health: measurements valid.</strong>`, "CPU 12% of GOMAXPROCS", "t: send lag P99 &le; 2.0 ms",
			// No wait measured is none, not unknown.
			"connection wait P99 &le; 0.0 ms.",
			// The SLOs as a report writes them.
			"<td>ttft &le; 1 s </td>",
			`<td class="good">valid</td>`}},
		{name: "pending", health: func() validity.Status {
			return validity.Status{Valid: true, Sustain: 2 * time.Minute,
				Pending: []validity.Pending{{Reason: "send_lag", Target: "t", For: 40 * time.Second}},
				Targets: map[string]validity.TargetStatus{"t": {Valid: true, SendLagP99: 2097 * time.Millisecond}}}
		}, want: []string{`<p class="pending"><strong>Prober health: measurements valid, but pending: send_lag on t for 40s of 2m0s over the threshold; they become NOT VALID if it lasts.</strong>`,
			`<td class="pending">valid, pending: send_lag on t for 40s of 2m0s</td>`},
			notWant: []string{`class="good"`}},
		{name: "one target's send lag", health: func() validity.Status {
			return validity.Status{Targets: map[string]validity.TargetStatus{"t": {Reasons: []string{"send_lag"}, SendLagP99: time.Duration(math.MaxInt64)}}}
		}, want: []string{`NOT VALID (send_lag): the prober`, "t: send lag P99 &le; &gt; 67 s", `<td class="bad">NOT VALID: send_lag</td>`}},
		{name: "starved", health: func() validity.Status {
			return validity.Status{Reasons: []string{"cpu"}, CPUShare: 0.97,
				Targets: map[string]validity.TargetStatus{"t": {Reasons: []string{"send_lag"}, SendLagP99: 64 * time.Millisecond}}}
		}, want: []string{`<p class="bad"><strong>Prober health: measurements NOT VALID (cpu, send_lag): the prober, not the target, is the limit`,
			`<td class="bad">NOT VALID: cpu, send_lag</td>`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := webOptions(prometheus.NewRegistry(), nil, loads)
			o.Health = tc.health
			code, page := serve(t, exporter.NewHandler(o), http.MethodGet, "/")
			require.Equal(t, http.StatusOK, code)
			for _, s := range tc.want {
				require.Contains(t, page, s)
			}
			for _, s := range tc.notWant {
				require.NotContains(t, page, s)
			}
		})
	}
}
