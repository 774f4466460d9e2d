package gpu

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// f returns a pointer to v, for expected values.
func f(v float64) *float64 { return &v }

// fixture reads testdata/name.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// body is one answer of a fake exporter.
type body struct {
	contentType string
	text        []byte
}

// serveBodies serves bodies in turn, the last one again once they are
// used up, and records the User-Agent of each request.
func serveBodies(t testing.TB, bodies ...body) (srv *httptest.Server, agents chan string) {
	t.Helper()
	var n atomic.Int64
	agents = make(chan string, 100)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case agents <- r.UserAgent():
		default:
		}
		i := min(int(n.Add(1))-1, len(bodies)-1)
		b := bodies[i]
		if b.contentType != "" {
			w.Header().Set("Content-Type", b.contentType)
		}
		_, _ = w.Write(b.text)
	}))
	t.Cleanup(srv.Close)
	return srv, agents
}

const textFormat = "text/plain; version=0.0.4; charset=utf-8"

// exporterConfig is a validated exporter section for url.
func exporterConfig(t testing.TB, url string) *Config {
	t.Helper()
	c := &Config{Exporter: &ExporterSource{URL: url}}
	c.Exporter.HTTPClientConfig.FollowRedirects = true
	c.SetDefaults()
	require.NoError(t, c.Validate())
	return c
}

func newExporter(t testing.TB, url string) *exporterReader {
	t.Helper()
	r, err := NewReader("t", exporterConfig(t, url))
	require.NoError(t, err)
	er := r.(*exporterReader)
	t.Cleanup(er.Close)
	return er
}
