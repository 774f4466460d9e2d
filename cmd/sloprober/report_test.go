package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/testkit/freeport"
)

// TestReportCanaryErrors: `report canary` exits 2 with one line naming
// what failed when it cannot make a report: a Prometheus that cannot be
// reached, a URL where no Prometheus answers, flags it cannot use. The
// reports themselves are tested against a real Prometheus in
// rules/e2e_shards_test.go.
func TestReportCanaryErrors(t *testing.T) {
	notProm := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notProm.Close)
	closed := "http://" + freeport.Addr(t)
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unreachable", []string{"--prometheus.url", closed}, "sloprober: cannot reach Prometheus at " + closed + ": dial tcp"},
		{"a password stays out", []string{"--prometheus.url", "http://u:s3cr3t@" + closed[len("http://"):]}, "cannot reach Prometheus at http://u:xxxxx@"},
		{"not Prometheus", []string{"--prometheus.url", notProm.URL}, "sloprober: Prometheus at " + notProm.URL +
			": HTTP 404: Not Found (is it Prometheus's base URL, e.g. http://127.0.0.1:9090?); query max by (job, instance) (max_over_time(sloprober_shard_count{job=\"sloprober\"}[1d]))"},
		{"no URL", nil, "required flag(s) '--prometheus.url' not provided"},
		{"html", []string{"--prometheus.url", closed, "--format", "html"}, "sloprober: report canary writes md or json, not html"},
		{"a bad range", []string{"--prometheus.url", closed, "--range", "a day"}, `sloprober: --range a day: not a valid duration string: "a day"`},
		{"a bad end", []string{"--prometheus.url", closed, "--end", "yesterday"}, "sloprober: --end yesterday: want RFC 3339 (2026-05-01T12:00:00Z) or Unix seconds"},
		{"a bad selector", []string{"--prometheus.url", closed, "--selector", `job="x"`}, `sloprober: the selector job="x": want label matchers in braces, e.g. {job="sloprober"}`},
		{"a bad target", []string{"--prometheus.url", closed, "--target", "a|b"}, `sloprober: "a|b" is no target or scenario name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"report", "canary"}, tc.args...)...)
			require.Equal(t, 2, code, "%s\n%s", stdout, stderr)
			require.Contains(t, stderr, tc.msg)
			require.NotContains(t, stderr, "s3cr3t")
			require.Empty(t, stdout)
		})
	}
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Time{}, false},
		{"2026-05-01T12:00:00Z", time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), false},
		{"2026-05-01T14:00:00.5+02:00", time.Date(2026, 5, 1, 12, 0, 0, 5e8, time.UTC), false},
		{"1777636800", time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), false},
		{"1777636800.25", time.Date(2026, 5, 1, 12, 0, 0, 25e7, time.UTC), false},
		{"-1", time.Time{}, true},
		{"1e300", time.Time{}, true},
		{"NaN", time.Time{}, true},
		{"now", time.Time{}, true},
	} {
		got, err := parseTime(tc.in)
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.True(t, tc.want.Equal(got), "%s: %s", tc.in, got)
	}
}
