package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	commoncfg "github.com/prometheus/common/config"

	"github.com/sloprober/sloprober/internal/exposition"
)

// The exporter scrape is servermetrics' bounded scrape (same bounds,
// redirect policy, Accept header and User-Agent), through the package
// both share, internal/exposition: servermetrics imports the config
// package, which imports this one for its Config, so gpu cannot import
// servermetrics.

// UserAgent is the User-Agent of GPU reads: sloprober/<version>, or
// sloprober/dev in a build without a version.
func UserAgent() string { return exposition.UserAgent() }

// exporterReader scrapes a dcgm-exporter.
type exporterReader struct {
	url     string
	client  *http.Client
	timeout time.Duration
	names   Names
}

func newExporterReader(target string, c *Config) (*exporterReader, error) {
	src := c.Exporter
	client, err := commoncfg.NewClientFromConfig(src.HTTPClientConfig, "sloprober_gpu_"+target,
		commoncfg.WithUserAgent(UserAgent()))
	if err != nil {
		return nil, fmt.Errorf("target %q: gpu.exporter: %w", target, redactErr(err))
	}
	client.CheckRedirect = exposition.CheckRedirect(src.HTTPClientConfig.FollowRedirects)
	return &exporterReader{url: src.URL, client: client, timeout: timeoutOf(c), names: namesOf(c)}, nil
}

// timeoutOf is the section's timeout, its default where it is unset.
func timeoutOf(c *Config) time.Duration {
	if t := time.Duration(c.Timeout); t > 0 {
		return t
	}
	return DefaultTimeout
}

// namesOf is the section's names with the defaults filled.
func namesOf(c *Config) Names {
	cc := Config{Names: c.Names, Interval: 1}
	cc.SetDefaults()
	return cc.Names
}

// Read scrapes the exporter once, within the configured timeout. A
// failure is an error naming the cause (connection, status, size, format,
// duplicate); ctx's error when ctx ended first.
func (r *exporterReader) Read(parent context.Context) (Reading, error) {
	ctx, cancel := context.WithTimeout(parent, r.timeout)
	defer cancel()
	fail := func(err error) (Reading, error) {
		switch {
		case parent.Err() != nil:
			return Reading{}, parent.Err()
		case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			return Reading{}, fmt.Errorf("gpu exporter %s: no complete answer within %s", redactURL(r.url), r.timeout)
		}
		return Reading{}, fmt.Errorf("gpu exporter %s: %s", redactURL(r.url), boundError(err.Error()))
	}
	body, contentType, err := exposition.Read(ctx, r.client, r.url, MaxBodyBytes)
	if err != nil {
		return fail(err)
	}
	rd, err := decode(body, contentType, r.names)
	if err != nil {
		return fail(err)
	}
	return rd, nil
}

// decode parses an exposition (bounded by MaxBodyBytes already) and maps
// the five names onto devices.
func decode(body []byte, contentType string, names Names) (Reading, error) {
	fams, err := exposition.Decode(body, contentType, MaxSamples)
	if err != nil {
		return Reading{}, err
	}
	b := newBuilder(names, false)
	for k, name := range b.names {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := m.GetLabel()
			label := func(n string) string {
				for _, l := range labels {
					if l.GetName() == n {
						return l.GetValue()
					}
				}
				return ""
			}
			if err := b.add(kind(k), label, value(m)); err != nil {
				return Reading{}, err
			}
		}
	}
	return b.reading(), nil
}

// value is a gauge's, counter's or untyped series's value; NaN (which is
// rejected) for a histogram or summary under a mapped name.
func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}
