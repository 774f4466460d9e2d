package report_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/testkit/browser"
	"github.com/sloprober/sloprober/report"
)

// TestHTMLInBrowser renders the HTML reports of the fixed runs in a real
// headless Chromium, on a laptop screen and in print: no console error
// (a Content-Security-Policy violation is one), no request of any kind,
// every chart present, no horizontal scroll bar, and a screenshot that is
// not blank. SLOPROBER_REPORT_SCREENSHOTS=DIR keeps the HTML and the
// screenshots.
func TestHTMLInBrowser(t *testing.T) {
	if os.Getenv("SLOPROBER_SKIP_BROWSER") == "1" {
		t.Skip("SLOPROBER_SKIP_BROWSER=1")
	}
	_, err := browser.Path()
	require.NoError(t, err, "the Makefile installs Chromium (scripts/install-chromium.sh)")
	dir := os.Getenv("SLOPROBER_REPORT_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	for _, tc := range []struct {
		run    string
		charts []string
		text   []string
	}{
		{"step-run.json", []string{"latency-throughput", "goodput-load", "attainment-load", "e2e-bands", "verification", "burst"},
			[]string{"Capacity report: knee (step test): PASS", "Sustainable: 8.88 req/s", "4 replicas", "per SLO-good request"}},
		{"soak-run.json", []string{"soak-latency", "soak-goodput"},
			[]string{"(soak test): PASS", "Error bursts in windows", "Fault plan"}},
		{"step-both-run.json", []string{"latency-throughput", "goodput-load", "attainment-load", "e2e-bands", "verification", "evidence"},
			[]string{"Prefix cache: cold and production", "GPU memory headroom", "busy GPU while the queue grows", "tenant-1 at 10x its share"}},
		{"soak-faults-run.json", []string{"soak-latency", "soak-goodput"},
			[]string{"(soak test): FAIL", "Failure and recovery", "not recovered", "After losing one of 3 replicas"}},
	} {
		t.Run(tc.run, func(t *testing.T) {
			r := report.Build(load(t, tc.run))
			var b bytes.Buffer
			require.NoError(t, report.WriteHTML(&b, r))
			require.NotContains(t, b.String(), "<script")
			path := filepath.Join(dir, strings.TrimSuffix(tc.run, "-run.json")+".html")
			require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
			for _, print := range []bool{false, true} {
				var count []string
				for _, id := range tc.charts {
					count = append(count, "#fig-"+id+" svg")
				}
				p, err := browser.Render(t.Context(), path, browser.Options{Print: print, Count: count})
				require.NoError(t, err)
				require.Empty(t, p.ConsoleMessages, "print %v", print)
				require.Empty(t, p.Requests, "print %v: a self-contained report fetches nothing", print)
				for _, sel := range count {
					require.Equal(t, 1, p.Counts[sel], "print %v: %s", print, sel)
				}
				require.Equal(t, len(tc.charts), p.SVGs)
				for _, s := range tc.text {
					require.Contains(t, p.Text, s)
				}
				require.LessOrEqual(t, p.ScrollWidth, browser.DefaultWidth, "print %v: no horizontal scroll bar", print)
				blank, err := browser.Blank(p.Screenshot)
				require.NoError(t, err)
				require.False(t, blank)
				name := strings.TrimSuffix(path, ".html") + map[bool]string{false: "-screen.png", true: "-print.png"}[print]
				require.NoError(t, os.WriteFile(name, p.Screenshot, 0o644))
			}
		})
	}
}
