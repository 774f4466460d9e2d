package exposition

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestFormatOf(t *testing.T) {
	for ct, want := range map[string]bool{
		"":           false,
		" ":          false,
		"text/plain": false,
		"text/plain; version=0.0.4; charset=utf-8":                   false,
		"application/openmetrics-text; version=1.0.0; charset=utf-8": true,
	} {
		om, err := FormatOf(ct)
		require.NoError(t, err, "%q", ct)
		require.Equal(t, want, om, "%q", ct)
	}
	_, err := FormatOf("text/html; charset=utf-8")
	require.EqualError(t, err, `Content-Type "text/html" is not a Prometheus exposition format`)
	_, err = FormatOf(`text/plain; version="`)
	require.EqualError(t, err, `invalid Content-Type "text/plain; version=\""`)
}

func TestFromOpenMetrics(t *testing.T) {
	in := "# TYPE a counter\n# HELP a A.\na_total 1 # {trace_id=\"x\"} 1\n  # UNIT a\nb 2\n# EOF"
	require.Equal(t, "a_total 1\nb 2\n", string(FromOpenMetrics([]byte(in))))
}

func TestDecode(t *testing.T) {
	fams, err := Decode([]byte("# TYPE a gauge\na 1\nb{x=\"y\"} 2\n"), "", 10)
	require.NoError(t, err)
	require.Len(t, fams, 2)
	require.Equal(t, 1.0, fams["a"].GetMetric()[0].GetGauge().GetValue())

	fams, err = Decode([]byte("# TYPE a gauge\na 1 # {t=\"1\"} 1\n# EOF\n"), "application/openmetrics-text", 10)
	require.NoError(t, err)
	require.Equal(t, 1.0, fams["a"].GetMetric()[0].GetUntyped().GetValue(), "untyped once its comments go")

	_, err = Decode([]byte("a 1\na 1\na 1\n"), "text/plain", 2)
	var many *TooManySamplesError
	require.ErrorAs(t, err, &many)
	require.EqualError(t, err, "more than 2 samples")

	_, err = Decode([]byte("<html>\n"), "text/plain", 10)
	require.ErrorIs(t, err, ErrParse)
	require.True(t, strings.HasPrefix(err.Error(), "not a Prometheus text exposition: "), err.Error())

	_, err = Decode([]byte("{}"), "application/json", 10)
	require.ErrorContains(t, err, "not a Prometheus exposition format")
	require.NotErrorIs(t, err, ErrParse)
}

func TestCountSamples(t *testing.T) {
	for body, want := range map[string]int{
		"":                         0,
		"a 1":                      1,
		"a 1\n":                    1,
		"a 1\nb 2\n":               2,
		"# c\n\n \t\n  # d\nx 1\n": 1,
		"\t x 1\n#\n":              1,
	} {
		require.Equal(t, want, CountSamples([]byte(body), 10), "%q", body)
	}
	require.Equal(t, 3, CountSamples([]byte("a 1\na 1\na 1\na 1\na 1\n"), 2), "stops past the limit")
}

func TestBoundError(t *testing.T) {
	require.Equal(t, "a b", BoundError("a\nb"))
	require.Equal(t, "x\uFFFDy", BoundError("x\xffy"))
	long := BoundError(strings.Repeat("é", 1000))
	require.LessOrEqual(t, len(long), MaxErrorBytes)
	require.True(t, strings.HasSuffix(long, "..."))
	require.NotContains(t, long, "\uFFFD", "cut at a rune boundary")
}

func TestUserAgent(t *testing.T) {
	require.True(t, strings.HasPrefix(UserAgent(), "sloprober/"), UserAgent())
}

func TestRead(t *testing.T) {
	const body = "a 1\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			require.Equal(t, AcceptHeader, r.Header.Get("Accept"))
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte(body))
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("a 1\n", 10)))
		case "/exact":
			_, _ = w.Write([]byte(strings.Repeat("a", 40)))
		case "/moved":
			http.Redirect(w, r, "/metrics", http.StatusFound)
		case "/away":
			http.Redirect(w, r, "http://localhost:1/metrics", http.StatusFound)
		case "/broken":
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte(body))
		default:
			http.Error(w, "no", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	client := &http.Client{CheckRedirect: CheckRedirect(true)}
	defer client.CloseIdleConnections()
	ctx := t.Context()

	got, ct, err := Read(ctx, client, srv.URL+"/metrics", 40)
	require.NoError(t, err)
	require.Equal(t, body, string(got))
	require.Equal(t, "text/plain; version=0.0.4", ct)

	got, _, err = Read(ctx, client, srv.URL+"/exact", 40)
	require.NoError(t, err, "a body of exactly the limit")
	require.Len(t, got, 40)

	got, _, err = Read(ctx, client, srv.URL+"/moved", 40)
	require.NoError(t, err, "a redirect to the same host is followed")
	require.Equal(t, body, string(got))

	stage := func(err error) Stage {
		t.Helper()
		var e *Error
		require.ErrorAs(t, err, &e)
		return e.Stage
	}
	_, _, err = Read(ctx, client, srv.URL+"/big", 39)
	require.Equal(t, StageTooLarge, stage(err))
	require.EqualError(t, err, "body of more than 39 bytes")

	_, _, err = Read(ctx, client, srv.URL+"/nothing", 40)
	require.Equal(t, StageHTTP, stage(err))
	require.EqualError(t, err, "HTTP status 503")

	_, _, err = Read(ctx, client, srv.URL+"/away", 40)
	require.Equal(t, StageHTTP, stage(err))
	require.EqualError(t, err, "HTTP status 302", "a redirect elsewhere is not followed")

	_, _, err = Read(ctx, &http.Client{CheckRedirect: CheckRedirect(false)}, srv.URL+"/moved", 40)
	require.EqualError(t, err, "HTTP status 302", "nor any without follow")

	_, _, err = Read(ctx, client, srv.URL+"/broken", 40)
	require.Equal(t, StageHTTP, stage(err))
	require.True(t, strings.HasPrefix(err.Error(), "reading the body: "), err.Error())

	_, _, err = Read(ctx, client, "http://[::1", 40)
	require.Equal(t, StageRequest, stage(err))

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, _, err = Read(ctx, client, closed.URL, 40)
	require.Equal(t, StageConnect, stage(err))

	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-short.Done()
	_, _, err = Read(short, client, srv.URL+"/metrics", 40)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller tells a timeout")
}

func TestCheckRedirect(t *testing.T) {
	req := func(u string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		return r
	}
	first := req("http://h:1/metrics")
	via := []*http.Request{first}
	require.NoError(t, CheckRedirect(true)(req("http://h:1/other"), via))
	for _, u := range []string{"https://h:1/metrics", "http://h:2/metrics", "http://g:1/metrics"} {
		require.ErrorIs(t, CheckRedirect(true)(req(u), via), http.ErrUseLastResponse, u)
	}
	require.ErrorIs(t, CheckRedirect(false)(req("http://h:1/other"), via), http.ErrUseLastResponse)
	for len(via) <= MaxRedirects {
		via = append(via, first)
	}
	require.ErrorIs(t, CheckRedirect(true)(req("http://h:1/other"), via), http.ErrUseLastResponse, fmt.Sprint(len(via), " redirects"))
}
