// Package canary builds a canary SLO report from Prometheus: what the
// always-on canary (test="canary") of each target and scenario sent, how
// much of it was good, its attainment against the objective and its
// latency percentiles over a window, summed over every sloprober instance
// and shard that Prometheus scraped.
//
// A sharded prober (--shard i/N) exports only its share of every canary
// load, so no single process's /metrics tells the whole story; Prometheus
// holds every shard's series. The report sums them with increase() over
// the window (which survives counter resets, so a shard's restart costs
// nothing but the requests of its last scrape interval) and says which
// shards and instances reported, and for how long, so that a reader knows
// whether the numbers are the whole canary's.
//
// The package has three layers: Queries are the PromQL (queries.go),
// Fetch runs them against a Prometheus (fetch.go), Assemble turns their
// results into a Report (assemble.go, completeness.go) without any I/O, so
// everything that decides what the report says is tested on plain vectors.
package canary

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Defaults of Options.
const (
	DefaultSelector  = `{job="sloprober"}`
	DefaultTimeout   = 30 * time.Second
	DefaultMaxSeries = 10000
)

// Options say what to report on and where to read it.
type Options struct {
	// URL is the Prometheus base URL (http://127.0.0.1:9090).
	URL string
	// End is the end of the window; Range its length, in whole seconds
	// (PromQL range selectors take no fractions worth reporting on).
	End   time.Time
	Range time.Duration
	// Selector picks the sloprober series, e.g. {job="sloprober"}: label
	// matchers in braces, without a metric name. Every query adds its own
	// matchers to it (test="canary", the targets and scenarios).
	Selector string
	// Targets and Scenarios, if any, restrict the report to them.
	Targets, Scenarios []string
	// Timeout bounds each query, in Prometheus and in the client;
	// MaxSeries the series a query may return.
	Timeout   time.Duration
	MaxSeries int
}

// nameRE is what a target or scenario name may be (config's rule), so a
// name can go into a regular expression matcher as it is.
var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Validate checks the options and fills in the defaults; it is called by
// Fetch, and by a command line before it connects anywhere.
func (o *Options) Validate() error {
	u, err := url.Parse(o.URL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error quotes the URL, password and all
		}
		return fmt.Errorf("the Prometheus URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("the Prometheus URL %s: want http(s)://host:port", u.Redacted())
	}
	o.Range = o.Range.Truncate(time.Second)
	o.End = o.End.Truncate(time.Millisecond) // Prometheus's resolution
	if o.Range <= 0 {
		return fmt.Errorf("the range %s: must be at least 1s", o.Range)
	}
	if now := time.Now(); o.End.IsZero() {
		o.End = now.Truncate(time.Second)
	} else if o.End.After(now.Add(time.Minute)) {
		return fmt.Errorf("the window's end %s is in the future", o.End.UTC().Format(time.RFC3339))
	}
	if o.Selector == "" {
		o.Selector = DefaultSelector
	}
	if _, err := selectorMatchers(o.Selector); err != nil {
		return err
	}
	for _, names := range [][]string{o.Targets, o.Scenarios} {
		for _, n := range names {
			if !nameRE.MatchString(n) {
				return fmt.Errorf("%q is no target or scenario name: names are [a-zA-Z0-9_-]+", n)
			}
		}
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	return nil
}

// Start is the start of the window.
func (o *Options) Start() time.Time { return o.End.Add(-o.Range) }

// redactedURL is the URL as the report and errors show it: a password in
// its userinfo is xxxxx, as everywhere sloprober shows a URL.
func (o *Options) redactedURL() string {
	if u, err := url.Parse(o.URL); err == nil {
		return u.Redacted()
	}
	return "(an unparsable URL)"
}

// selectorMatchers returns the matchers inside a selector's braces,
// `{job="a", instance=~"b"}` giving `job="a", instance=~"b"`. It checks
// only the shape (braces, balanced quotes, nothing that ends the selector
// early), so a selector cannot turn a query into another one; Prometheus
// checks the matchers themselves, and its error names the query.
func selectorMatchers(sel string) (string, error) {
	s := strings.TrimSpace(sel)
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return "", fmt.Errorf("the selector %s: want label matchers in braces, e.g. %s", sel, DefaultSelector)
	}
	inner := s[1 : len(s)-1]
	var quote rune
	escaped := false
	for _, r := range inner {
		switch {
		case escaped:
			escaped = false
		case quote != 0 && r == '\\':
			escaped = true
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'' || r == '`':
			quote = r
		case strings.ContainsRune("{}()[]", r):
			return "", fmt.Errorf("the selector %s: %q outside a quoted value; want label matchers only, e.g. %s", sel, r, DefaultSelector)
		}
	}
	if quote != 0 {
		return "", fmt.Errorf("the selector %s: a quoted value is not closed", sel)
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(inner), ",")), nil
}
