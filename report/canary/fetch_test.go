package canary

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// stubQuerier answers queries from a function; it stands for the API, not
// for Prometheus (the end-to-end test in rules/ runs a real one).
type stubQuerier func(expr string) (model.Vector, []string, error)

func (s stubQuerier) Query(_ context.Context, expr string, _ time.Time, _ time.Duration, _ int) (model.Vector, []string, error) {
	return s(expr)
}

func TestFetch(t *testing.T) {
	o := &Options{URL: "http://127.0.0.1:9090", End: testEnd, Range: time.Hour, Selector: DefaultSelector, Timeout: time.Second, MaxSeries: 2}
	require.NoError(t, o.Validate())
	var asked []string
	res, err := Fetch(context.Background(), stubQuerier(func(expr string) (model.Vector, []string, error) {
		asked = append(asked, expr)
		if strings.Contains(expr, "histogram_quantile(0.99, sum by (target, scenario, le) (increase(sloprober_time_to_first_token") {
			return model.Vector{sampleOf(1)}, []string{"bucket label \"le\" is missing"}, nil
		}
		return model.Vector{}, nil, nil
	}), o)
	require.NoError(t, err)
	require.Len(t, asked, len(Queries(o)))
	require.Equal(t, []string{`ttft_p99: bucket label "le" is missing`}, res.Warnings, "the query named")
	require.Len(t, res.Vectors, len(Queries(o)))

	// Too many series, and an error: the first one stops the report.
	calls := 0
	_, err = Fetch(context.Background(), stubQuerier(func(string) (model.Vector, []string, error) {
		calls++
		return model.Vector{sampleOf(1), sampleOf(2), sampleOf(3)}, nil, nil
	}), o)
	require.EqualError(t, err, `query max by (job, instance) (max_over_time(sloprober_shard_count{job="sloprober"}[1h])) on Prometheus at http://127.0.0.1:9090: more than 2 series; narrow --selector, --target or --scenario`)
	require.Equal(t, 1, calls)
	_, err = Fetch(context.Background(), stubQuerier(func(string) (model.Vector, []string, error) {
		return nil, nil, &APIError{StatusCode: 503, Type: "unavailable", Msg: "TSDB not ready"}
	}), o)
	require.EqualError(t, err, `Prometheus at http://127.0.0.1:9090 refused query max by (job, instance) (max_over_time(sloprober_shard_count{job="sloprober"}[1h])) (selector {job="sloprober"}): unavailable: TSDB not ready`)
}

func TestQueryError(t *testing.T) {
	o := &Options{URL: "http://u:s3cr3t@127.0.0.1:9090", Selector: `{job="a"}`, Timeout: 30 * time.Second}
	refused := &url.Error{Op: "Get", URL: "http://u:s3cr3t@127.0.0.1:9090/api/v1/query?query=up", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refused, "cannot reach Prometheus at http://u:xxxxx@127.0.0.1:9090: connection refused"},
		{&url.Error{Op: "Get", URL: "http://x", Err: context.DeadlineExceeded}, "query up on Prometheus at http://u:xxxxx@127.0.0.1:9090: no answer within 30s: Get \"http://x\": context deadline exceeded"},
		{&APIError{StatusCode: 422, Type: "execution", Msg: "query timed out in expression evaluation"},
			`Prometheus at http://u:xxxxx@127.0.0.1:9090 refused query up (selector {job="a"}): execution: query timed out in expression evaluation`},
		{&APIError{StatusCode: 404, Msg: "Not Found"},
			"Prometheus at http://u:xxxxx@127.0.0.1:9090: HTTP 404: Not Found (is it Prometheus's base URL, e.g. http://127.0.0.1:9090?); query up"},
		{fmt.Errorf("reading: %w", errTooLarge), "query up on Prometheus at http://u:xxxxx@127.0.0.1:9090: reading: the answer is larger than 32 MiB"},
	} {
		err := queryError(o, "up", tc.err)
		require.EqualError(t, err, tc.want)
		require.True(t, errors.Is(err, tc.err) || errors.Is(err, refused.Err), "wrapped: %v", err)
		require.NotContains(t, err.Error(), "s3cr3t")
	}
}

func TestBoundedBody(t *testing.T) {
	read := func(n int, limit int64) ([]byte, error) {
		return io.ReadAll(&boundedBody{ReadCloser: io.NopCloser(strings.NewReader(strings.Repeat("x", n))), left: limit})
	}
	b, err := read(100, 100)
	require.NoError(t, err)
	require.Len(t, b, 100)
	_, err = read(101, 100)
	require.ErrorIs(t, err, errTooLarge)
	_, err = read(1<<20, 100)
	require.ErrorIs(t, err, errTooLarge)
}
