package rules

import (
	"bytes"
	"image"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/dashrender"
	"github.com/sloprober/sloprober/internal/testkit/browser"
	"github.com/sloprober/sloprober/internal/testkit/freeport"
)

// drawDashboards draws every dashboard from the Prometheus of p over the
// last rng (one HTML page each, named as its JSON, in a temporary
// directory), checks that every panel drew something and that Chromium
// shows each page without an error, and writes its screenshot into
// pictures (none if "").
func drawDashboards(t *testing.T, p *promAPI, rng, step time.Duration, pictures string) {
	t.Helper()
	dir, screenshots := t.TempDir(), pictures != ""
	client, err := api.NewClient(api.Config{Address: p.base})
	require.NoError(t, err)
	opts := dashrender.Options{API: v1.NewAPI(client), End: time.Now(), Range: rng, Step: step, RateInterval: 30 * time.Second}
	files, err := filepath.Glob("../dashboards/*.json")
	require.NoError(t, err)
	for _, f := range files {
		d, err := dashrender.Load(f)
		require.NoError(t, err)
		page, drawn, err := dashrender.Render(t.Context(), d, opts)
		require.NoError(t, err, f)
		panels := 0
		for _, pd := range drawn {
			require.Positive(t, pd.Series, "%s: panel %q (%s) drew nothing", f, pd.Title, pd.Type)
			if pd.Type == "timeseries" {
				panels++
			}
		}
		out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(f), ".json")+".html")
		require.NoError(t, os.WriteFile(out, []byte(page), 0o644))
		if _, err := browser.Path(); err != nil && !screenshots {
			continue // the page is checked where Chromium is (make test installs it)
		}
		shown, err := browser.Render(t.Context(), out, browser.Options{Width: 1600, Height: 900, Timeout: time.Minute})
		require.NoError(t, err, out)
		require.Empty(t, shown.ConsoleMessages, out)
		require.Empty(t, shown.Requests, "%s is self-contained", out)
		require.GreaterOrEqual(t, shown.SVGs, panels, "%s: a chart a timeseries panel", out)
		require.LessOrEqual(t, shown.ScrollWidth, 1600, "%s fits the width", out)
		if screenshots {
			name := filepath.Join(pictures, strings.TrimSuffix(filepath.Base(out), ".html"))
			require.NoError(t, os.WriteFile(name+".png", shown.Screenshot, 0o644))
			t.Logf("wrote %s.png (%d bytes)", name, len(shown.Screenshot))
			// A long page's first rows too, for the README.
			img, err := png.Decode(bytes.NewReader(shown.Screenshot))
			require.NoError(t, err)
			if b := img.Bounds(); b.Dy() > 2*topHeight {
				top := img.(interface {
					SubImage(image.Rectangle) image.Image
				}).SubImage(image.Rect(b.Min.X, b.Min.Y, b.Max.X, b.Min.Y+topHeight))
				var buf bytes.Buffer
				require.NoError(t, png.Encode(&buf, top))
				require.NoError(t, os.WriteFile(name+"-top.png", buf.Bytes(), 0o644))
				t.Logf("wrote %s-top.png", name)
			}
		}
	}
}

// topHeight is the height, in pixels, of a long page's first rows: the
// SLO dashboard's goodput, attainment, burn rate and outcomes, and its
// latency percentiles.
const topHeight = 1290

// TestDashboardPictures draws the pictures of the dashboards that the
// documentation shows (docs/images/dashboard-*.png): sloprober on its
// embedded default for SLOPROBER_DASHBOARD_MINUTES (default 8) minutes,
// scraped by a real Prometheus every 2 s with the bundled rules, its
// step test run once and the simulator failing a tenth of the requests
// for a minute and a half, then both dashboards drawn by
// internal/dashrender from that Prometheus and shown in Chromium. It
// runs only when SLOPROBER_DASHBOARD_PICTURES names the directory to
// write to (`make dashboard-pictures`).
func TestDashboardPictures(t *testing.T) {
	out := os.Getenv("SLOPROBER_DASHBOARD_PICTURES")
	if out == "" {
		t.Skip("SLOPROBER_DASHBOARD_PICTURES is not set: `make dashboard-pictures` draws the dashboards' pictures")
	}
	out, err := filepath.Abs(out)
	require.NoError(t, err)
	minutes := 8
	if m := os.Getenv("SLOPROBER_DASHBOARD_MINUTES"); m != "" {
		minutes, err = strconv.Atoi(m)
		require.NoError(t, err, "SLOPROBER_DASHBOARD_MINUTES")
		require.GreaterOrEqual(t, minutes, 4, "SLOPROBER_DASHBOARD_MINUTES: the step test takes about 3 minutes")
	}
	prom, bin, dir := e2eSetup(t)
	proberAddr, simAddr, promAddr := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	start(t, "sloprober", bin, "run", "--web.listen-address="+proberAddr, "--sim.listen-address="+simAddr,
		"--storage.path="+t.TempDir(), "--web.enable-test-api")
	p := startPrometheus(t, prom, dir, proberAddr, promAddr, "2s")
	require.Eventually(t, func() bool { return p.nonEmpty(`up{job="sloprober"} == 1`) }, 30*time.Second, 200*time.Millisecond,
		"Prometheus does not scrape sloprober")
	begin := time.Now()
	wait := func(until time.Duration) {
		select {
		case <-time.After(time.Until(begin.Add(until))):
		case <-t.Context().Done():
		}
	}
	total := time.Duration(minutes) * time.Minute
	wait(total / 4)
	resp, err := http.Post("http://"+proberAddr+"/api/v1/tests/knee/run", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	wait(total * 5 / 8)
	faults(t, simAddr, `{"error_rate": {"500": 0.1}}`)
	wait(total*5/8 + 90*time.Second)
	faults(t, simAddr, `{}`)
	wait(total)
	require.NoError(t, os.MkdirAll(out, 0o755))
	drawDashboards(t, p, total, 10*time.Second, out)
}

// faults sets the simulator's faults.
func faults(t *testing.T, simAddr, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+simAddr+"/sim/faults", strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "PUT /sim/faults %s", body)
}
