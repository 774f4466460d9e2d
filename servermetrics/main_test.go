package servermetrics

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// f returns a pointer to v, for expected values.
func f(v float64) *float64 { return &v }

// fixture reads testdata/name, with the Content-Type its engine sends:
// OpenMetrics for *.om, else the text format 0.0.4.
func fixture(t testing.TB, name string) (body []byte, contentType string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	if strings.HasSuffix(name, ".om") {
		return b, "application/openmetrics-text; version=1.0.0; charset=utf-8"
	}
	return b, "text/plain; version=0.0.4; charset=utf-8"
}

// serve serves h on a loopback port until the test ends.
func serve(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// serveBody serves body with contentType on every request.
func serveBody(t *testing.T, body []byte, contentType string) *httptest.Server {
	t.Helper()
	return serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(body)
	})
}

// smConfig is a server_metrics section for url with timeout (interval
// an hour: tests drive the scrapes).
func smConfig(url string, timeout time.Duration) *config.ServerMetricsConfig {
	c := config.DefaultServerMetricsConfig
	c.URL = url
	c.Interval = model.Duration(time.Hour)
	c.Timeout = model.Duration(timeout)
	return &c
}

// newScraper builds a scraper for url, closed when the test ends.
func newScraper(t *testing.T, url string, timeout time.Duration) *Scraper {
	t.Helper()
	s, err := NewScraper("t", smConfig(url, timeout))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}
