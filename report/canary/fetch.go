package canary

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/api"
	"github.com/prometheus/common/model"
)

// maxAnswerBytes bounds one answer of Prometheus: 10,000 series of a few
// labels are about 2 MB, so this is far above any report's need and far
// below what would hurt the machine running it.
const maxAnswerBytes = 32 << 20

// Querier runs an instant query at ts and returns its vector and
// Prometheus's warnings. Prometheus is asked to give up after timeout
// and to return at most limit series (Prometheus 3.x does; older ones
// ignore it, and the answer's size bounds them).
type Querier interface {
	Query(ctx context.Context, expr string, ts time.Time, timeout time.Duration, limit int) (model.Vector, []string, error)
}

// Build validates the options, reads Prometheus and assembles the report.
func Build(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	q, err := NewClient(&o)
	if err != nil {
		return nil, err
	}
	res, err := Fetch(ctx, q, &o)
	if err != nil {
		return nil, err
	}
	return Assemble(&o, res)
}

// NewClient returns a Querier of the Prometheus at o.URL whose answers
// are read up to maxAnswerBytes.
//
// It is client_golang's api.Client with the instant query decoded here:
// its api/prometheus/v1 package imports github.com/json-iterator/go
// (before Go 1.27), a module sloprober does not otherwise need, for one
// endpoint whose answer encoding/json and prometheus/common/model decode.
func NewClient(o *Options) (Querier, error) {
	c, err := api.NewClient(api.Config{
		Address:      o.URL,
		RoundTripper: boundedTransport{rt: api.DefaultRoundTripper, limit: maxAnswerBytes},
	})
	if err != nil {
		return nil, fmt.Errorf("a client of Prometheus at %s: %w", o.redactedURL(), err)
	}
	return apiQuerier{c}, nil
}

// Fetch runs every query at the end of the window, one after the other,
// each within o.Timeout, and stops at the first error.
func Fetch(ctx context.Context, q Querier, o *Options) (*Results, error) {
	res := &Results{Vectors: map[string]model.Vector{}}
	for _, query := range Queries(o) {
		v, warnings, err := run(ctx, q, o, query.Expr)
		if err != nil {
			return nil, err
		}
		for _, w := range warnings {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s: %s", query.Name, w))
		}
		res.Vectors[query.Name] = v
	}
	return res, nil
}

// run runs one query and checks the answer's size.
func run(ctx context.Context, q Querier, o *Options, expr string) (model.Vector, []string, error) {
	// The client waits a little longer than Prometheus, so that a query
	// Prometheus gives up on comes back with Prometheus's own error.
	ctx, cancel := context.WithTimeout(ctx, o.Timeout+5*time.Second)
	defer cancel()
	v, warnings, err := q.Query(ctx, expr, o.End, o.Timeout, o.MaxSeries+1)
	if err != nil {
		return nil, nil, queryError(o, expr, err)
	}
	if len(v) > o.MaxSeries {
		return nil, nil, fmt.Errorf("query %s on Prometheus at %s: more than %d series; narrow --selector, --target or --scenario", expr, o.redactedURL(), o.MaxSeries)
	}
	return v, warnings, nil
}

// APIError is an error answer of Prometheus's HTTP API, or an HTTP error
// from whatever answers at the URL when it is not one.
type APIError struct {
	StatusCode int
	// Type and Msg are Prometheus's errorType and error; Type is empty
	// when the answer was no API answer.
	Type, Msg string
}

func (e *APIError) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("HTTP %d: %s", e.StatusCode, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Type, e.Msg)
}

// queryError says what failed in words that name the URL and the query:
// Prometheus unreachable, too slow, no Prometheus at the URL, or one
// refusing the query (its message says why: a bad selector, its own
// timeout).
func queryError(o *Options, expr string, err error) error {
	var uerr *url.Error
	var apiErr *APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("query %s on Prometheus at %s: no answer within %s: %w", expr, o.redactedURL(), o.Timeout, err)
	case errors.As(err, &apiErr) && apiErr.Type == "":
		return fmt.Errorf("Prometheus at %s: %w (is it Prometheus's base URL, e.g. http://127.0.0.1:9090?); query %s", o.redactedURL(), err, expr)
	case errors.As(err, &apiErr):
		return fmt.Errorf("Prometheus at %s refused query %s (selector %s): %w", o.redactedURL(), expr, o.Selector, err)
	case errors.As(err, &uerr):
		// url.Error repeats the whole request URL; its cause is enough.
		return fmt.Errorf("cannot reach Prometheus at %s: %w", o.redactedURL(), uerr.Err)
	}
	return fmt.Errorf("query %s on Prometheus at %s: %w", expr, o.redactedURL(), err)
}

// apiQuerier runs instant queries with GET /api/v1/query.
type apiQuerier struct{ c api.Client }

// apiAnswer is the envelope of every answer of Prometheus's HTTP API.
type apiAnswer struct {
	Status    string   `json:"status"`
	ErrorType string   `json:"errorType"`
	Error     string   `json:"error"`
	Warnings  []string `json:"warnings"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

func (q apiQuerier) Query(ctx context.Context, expr string, ts time.Time, timeout time.Duration, limit int) (model.Vector, []string, error) {
	u := q.c.URL("/api/v1/query", nil)
	u.RawQuery = url.Values{
		"query":   {expr},
		"time":    {strconv.FormatFloat(float64(ts.UnixMilli())/1000, 'f', -1, 64)},
		"timeout": {model.Duration(timeout).String()},
		"limit":   {strconv.Itoa(limit)},
	}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, body, err := q.c.Do(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var a apiAnswer
	if err := json.Unmarshal(body, &a); err != nil || a.Status == "" {
		if resp.StatusCode/100 != 2 {
			return nil, nil, &APIError{StatusCode: resp.StatusCode, Msg: http.StatusText(resp.StatusCode)}
		}
		return nil, nil, &APIError{StatusCode: resp.StatusCode, Msg: "the answer is not Prometheus's API JSON"}
	}
	if a.Status != "success" {
		return nil, a.Warnings, &APIError{StatusCode: resp.StatusCode, Type: a.ErrorType, Msg: a.Error}
	}
	if a.Data.ResultType != "vector" {
		return nil, a.Warnings, fmt.Errorf("want an instant vector, got a %s", a.Data.ResultType)
	}
	var v model.Vector
	if err := json.Unmarshal(a.Data.Result, &v); err != nil {
		return nil, a.Warnings, fmt.Errorf("decoding the vector: %w", err)
	}
	return v, a.Warnings, nil
}

// boundedTransport cuts every answer at limit bytes, with an error.
type boundedTransport struct {
	rt    http.RoundTripper
	limit int64
}

func (b boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: b.limit}
	return resp, nil
}

// errTooLarge ends an answer larger than maxAnswerBytes.
var errTooLarge = fmt.Errorf("the answer is larger than %d MiB", maxAnswerBytes>>20)

type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte more than allowed tells a larger answer
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, errTooLarge
	}
	return n, err
}
