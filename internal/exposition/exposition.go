// Package exposition reads a Prometheus exposition (an engine's or a
// dcgm-exporter's /metrics) within bounds: the HTTP read (body size,
// Accept header, redirect policy, User-Agent) and the decoding (format by
// Content-Type, sample count, OpenMetrics through the text parser).
//
// It is shared by servermetrics and gpu, and is a leaf: it imports only
// the standard library and prometheus/common and client_model (gpu cannot
// import servermetrics, which imports config, which imports gpu). The
// bounds themselves (MaxBodyBytes, MaxSamples) are the callers', with
// their reasons.
package exposition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/version"
	"github.com/sloprober/sloprober/internal/safetext"
)

// AcceptHeader asks for the text format 0.0.4, which every engine serves
// (Python's client serves OpenMetrics only when asked), and takes anything
// else rather than a 406.
const AcceptHeader = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// MaxRedirects bounds the redirects a read follows where following them
// is configured.
const MaxRedirects = 3

// MaxErrorBytes bounds an error message kept or logged (BoundError): a
// parse error quotes the server's text.
const MaxErrorBytes = 256

// UserAgent is the User-Agent of reads: sloprober/<version>, or
// sloprober/dev in a build without a version.
func UserAgent() string {
	v := version.Version
	if v == "" {
		v = "dev"
	}
	return "sloprober/" + v
}

// CheckRedirect is the redirect policy of reads. prometheus/common's
// round tripper puts the section's credentials on every request, the
// redirected ones included: a /metrics that redirected to another port
// got the bearer token. So follow (follow_redirects, true by default, as
// in Prometheus) follows only redirects to the same scheme, host and
// port, at most MaxRedirects; any other, or any without follow, ends the
// read with its 3xx (an "http" failure of servermetrics).
func CheckRedirect(follow bool) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0]
		if !follow || len(via) > MaxRedirects || req.URL.Scheme != first.URL.Scheme || req.URL.Host != first.URL.Host {
			return http.ErrUseLastResponse
		}
		return nil
	}
}

// Stage is where a Read failed.
type Stage int

const (
	// StageRequest: the request could not be built (an invalid URL).
	StageRequest Stage = iota
	// StageConnect: no usable response: connection refused or reset, DNS,
	// TLS, a redirect loop. The Err of the Error is the client's, as it
	// is: it may quote the URL, which the caller redacts.
	StageConnect
	// StageHTTP: a status other than 2xx, or a body broken off.
	StageHTTP
	// StageTooLarge: a body of more than the limit.
	StageTooLarge
)

// Error is a failed Read: its Stage, and the cause.
type Error struct {
	Stage Stage
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// bounded is an error whose text is bounded by BoundError, still wrapping
// its cause.
type bounded struct{ err error }

func (b bounded) Error() string { return BoundError(b.err.Error()) }

func (b bounded) Unwrap() error { return b.err }

// Read GETs url with client, asking for the text format (AcceptHeader),
// and returns the body, of at most maxBody bytes, and its Content-Type.
// ctx bounds the whole read, the body included. An error is an *Error;
// the caller tells a timeout from ctx.
func Read(ctx context.Context, client *http.Client, url string, maxBody int) (body []byte, contentType string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", &Error{Stage: StageRequest, Err: err}
	}
	req.Header.Set("Accept", AcceptHeader)
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", &Error{Stage: StageConnect, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, "", &Error{Stage: StageHTTP, Err: fmt.Errorf("HTTP status %d", resp.StatusCode)}
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, int64(maxBody)+1))
	if err != nil {
		return nil, "", &Error{Stage: StageHTTP, Err: fmt.Errorf("reading the body: %w", bounded{err})}
	}
	if len(body) > maxBody { // whenever the deadline passes: the body was too large
		return nil, "", &Error{Stage: StageTooLarge, Err: fmt.Errorf("body of more than %d bytes", maxBody)}
	}
	return body, resp.Header.Get("Content-Type"), nil
}

// ErrParse marks a body that is not an exposition sloprober can read.
var ErrParse = errors.New("not a Prometheus text exposition")

// TooManySamplesError is Decode's error for a body of more than its limit
// of samples.
type TooManySamplesError struct{ Limit int }

func (e *TooManySamplesError) Error() string { return fmt.Sprintf("more than %d samples", e.Limit) }

// Decode parses an exposition into its families. contentType is the
// response's Content-Type: text/plain (any version) and empty are read as
// the text format, application/openmetrics-text through the same parser
// (see FromOpenMetrics), anything else is refused (FormatOf's error). The
// body must already be bounded (Read's maxBody); Decode bounds its
// samples, counted before anything is parsed: more than maxSamples is a
// *TooManySamplesError. A body that does not parse is an error wrapping
// ErrParse.
func Decode(body []byte, contentType string, maxSamples int) (map[string]*dto.MetricFamily, error) {
	om, err := FormatOf(contentType)
	if err != nil {
		return nil, err
	}
	if n := CountSamples(body, maxSamples); n > maxSamples {
		return nil, &TooManySamplesError{Limit: maxSamples}
	}
	if om {
		body = FromOpenMetrics(body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrParse, BoundError(err.Error()))
	}
	return fams, nil
}

// FormatOf tells from a Content-Type whether the body is OpenMetrics, or
// refuses it. An empty Content-Type is taken as the text format, as many
// small exporters send none; HTML (a login page, a proxy's error page) or
// JSON is refused before it is parsed.
func FormatOf(contentType string) (openMetrics bool, err error) {
	if strings.TrimSpace(contentType) == "" {
		return false, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false, fmt.Errorf("invalid Content-Type %q", BoundError(contentType))
	}
	switch mt {
	case "text/plain":
		return false, nil
	case "application/openmetrics-text":
		return true, nil
	}
	return false, fmt.Errorf("Content-Type %q is not a Prometheus exposition format", BoundError(mt))
}

// CountSamples counts the sample lines of body (neither blank nor a
// comment, after leading blanks and tabs, as the text parser reads them),
// stopping once the count passes limit.
func CountSamples(body []byte, limit int) int {
	n := 0
	for len(body) > 0 && n <= limit {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimLeft(line, " \t")
		if len(line) > 0 && line[0] != '#' {
			n++
		}
	}
	return n
}

// FromOpenMetrics turns an OpenMetrics body into one the text parser reads:
// every comment line goes (# TYPE, # HELP, # UNIT, # EOF: types such as
// info, stateset or a counter's family name without _total are
// OpenMetrics only), and an exemplar (" # {...} v") is cut off its sample.
// Every family is then untyped, which is all the callers' mappings need:
// they read sample values by name. expfmt's own OpenMetrics decoder is not
// used: in prometheus/common v0.73 it parses each line with an ABNF
// grammar, about 7 ms a line, so a 1,000-line vLLM exposition took 7 s of
// CPU and 30,000 lines (servermetrics.MaxSamples) would take minutes. A
// sample with a timestamp in seconds with a fraction (OpenMetrics allows
// it, no engine sends it) fails to parse.
func FromOpenMetrics(body []byte) []byte {
	out := make([]byte, 0, len(body))
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if t := bytes.TrimLeft(line, " \t"); len(t) > 0 && t[0] == '#' {
			continue
		}
		if i := bytes.Index(line, []byte(" # ")); i >= 0 {
			line = line[:i]
		}
		out = append(append(out, line...), '\n')
	}
	return out
}

// BoundError makes server text safe to put in an error: valid UTF-8, one
// line, no control or format character (a bidi override in a metric's
// name would reorder the error around it), at most MaxErrorBytes.
func BoundError(s string) string { return safetext.Line(s, MaxErrorBytes) }
