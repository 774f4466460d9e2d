package gpu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/sloprober/sloprober/internal/exposition"
)

// prometheusReader reads the GPUs by one instant query a name.
type prometheusReader struct {
	url      string
	api      v1.API
	selector string
	timeout  time.Duration
	names    Names
	client   *http.Client
}

func newPrometheusReader(target string, c *Config) (*prometheusReader, error) {
	src := c.Prometheus
	rt, err := commoncfg.NewRoundTripperFromConfig(src.HTTPClientConfig, "sloprober_gpu_"+target,
		commoncfg.WithUserAgent(UserAgent()))
	if err != nil {
		return nil, fmt.Errorf("target %q: gpu.prometheus: %w", target, redactErr(err))
	}
	client := &http.Client{
		Transport:     limitBody{rt},
		CheckRedirect: exposition.CheckRedirect(src.HTTPClientConfig.FollowRedirects),
	}
	ac, err := api.NewClient(api.Config{Address: src.URL, Client: client})
	if err != nil {
		return nil, fmt.Errorf("target %q: gpu.prometheus.url: %s", target, boundError(err.Error()))
	}
	return &prometheusReader{
		url: src.URL, api: v1.NewAPI(ac), selector: strings.TrimSpace(src.Selector),
		timeout: timeoutOf(c), names: namesOf(c), client: client,
	}, nil
}

// Query is the instant query of one metric name: NAME{selector}, or NAME
// alone without a selector.
func Query(name, selector string) string { return name + strings.TrimSpace(selector) }

// Read runs the five instant queries in turn, all within the configured
// timeout. A name without any series is a value not served (every
// device's is absent), not an error; a query Prometheus refuses, an
// answer that is no instant vector, more than MaxSeries series or a body
// above MaxQueryBytes fails the read. ctx's error when ctx ended first.
func (r *prometheusReader) Read(parent context.Context) (Reading, error) {
	ctx, cancel := context.WithTimeout(parent, r.timeout)
	defer cancel()
	now := time.Now()
	b := newBuilder(r.names, true)
	for k, name := range b.names {
		q := Query(name, r.selector)
		val, _, _, err := r.api.Query(ctx, q, now, v1.WithLimit(MaxSeries+1))
		switch {
		case parent.Err() != nil:
			return Reading{}, parent.Err()
		case ctx.Err() != nil:
			return Reading{}, fmt.Errorf("gpu prometheus %s: no complete answer within %s", redactURL(r.url), r.timeout)
		case err != nil:
			return Reading{}, fmt.Errorf("gpu prometheus %s: query %s: %s", redactURL(r.url), q, boundError(err.Error()))
		}
		vec, ok := val.(model.Vector)
		if !ok {
			return Reading{}, fmt.Errorf("gpu prometheus %s: query %s: a %s, not an instant vector", redactURL(r.url), q, val.Type())
		}
		if len(vec) > MaxSeries {
			return Reading{}, fmt.Errorf("gpu prometheus %s: query %s: more than %d series; narrow the selector", redactURL(r.url), q, MaxSeries)
		}
		for _, s := range vec {
			v := float64(s.Value)
			if s.Histogram != nil {
				v = math.NaN()
			}
			label := func(n string) string { return string(s.Metric[model.LabelName(n)]) }
			if err := b.add(kind(k), label, v); err != nil {
				return Reading{}, fmt.Errorf("gpu prometheus %s: query %s: %w", redactURL(r.url), q, err)
			}
		}
	}
	return b.reading(), nil
}

// Close releases the reader's idle connections.
func (r *prometheusReader) Close() { r.client.CloseIdleConnections() }

// Close releases the reader's idle connections.
func (r *exporterReader) Close() { r.client.CloseIdleConnections() }

// errTooLarge ends the reading of a query answer above MaxQueryBytes.
var errTooLarge = fmt.Errorf("answer of more than %d bytes", MaxQueryBytes)

// limitBody bounds the bodies of the answers of a round tripper:
// client_golang reads an answer whole before decoding it.
type limitBody struct{ rt http.RoundTripper }

func (l limitBody) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: MaxQueryBytes}
	return resp, nil
}

type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errTooLarge
	}
	if errors.Is(err, io.EOF) {
		return n, io.EOF
	}
	return n, err
}
