// Package tracing exports an OpenTelemetry trace of each probe: one CLIENT
// span named after the GenAI operation and model ("chat my-model"), with
// child spans on the request's real timeline for its phases (network,
// gateway, queue, prefill, decode, unattributed: prober.SplitPhases), and
// events for the first token and for stalls. It is an observer of finished
// requests (prober.ObserverFactory): the spans are built after the request
// ended, from its Result, with the ids its traceparent carried, so the
// sampling can follow the verdict (prober.Traced): every bad request is
// exported, good ones at the configured ratio.
//
// A collector that is down or slow never slows probing: a finished request
// is handed to a bounded queue without waiting (a full queue drops it,
// counted), and one goroutine builds the spans and exports them in
// batches, each within a timeout: the SDK's batch processor is not used,
// since its drops cannot be counted and, blocking, it could hold the
// builder for ever once shut down. The exporter is rebuilt when the
// configuration's tracing section changes, as Prometheus's and
// Alertmanager's tracing managers do.
package tracing

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/version"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/ratelog"
	"github.com/sloprober/sloprober/prober"
)

// Export batching: the builder exports what it has collected every
// exportInterval, or as soon as maxExportBatch spans wait, so that a slow
// request's trace is in the backend by the time someone clicks its
// exemplar; at 50 traced requests a second (300 spans) that is one export
// a second.
const (
	exportInterval = time.Second
	maxExportBatch = 512
)

// Tracer turns finished probes into spans. It is an ObserverFactory for the
// manager's Fanout; ApplyConfig installs the configuration's tracing.
//
// Probes never wait for it: a finished request is handed to a queue
// bounded by tracing.queue_size (full: dropped, counted), and one builder
// goroutine makes its spans and exports them in batches, each within the
// configured timeout. A collector that is down or slow holds the builder
// (at most the timeout an export), the queue fills, and requests are
// dropped from tracing; probing goes on unchanged.
type Tracer struct {
	logger   *slog.Logger
	metrics  *Metrics
	instance string

	mu      sync.Mutex // serialises Prepare and Commit, guards cfg, retired and stopped
	cfg     config.TracingConfig
	state   atomic.Pointer[tracerState] // nil while tracing is off
	targets atomic.Pointer[map[string]targetInfo]
	// retired are the states replaced since the builder last looked: it
	// sends what it collected with each (if it had adopted it) and shuts
	// it down. Every state replaced is retired exactly once.
	retired []*tracerState
	stopped bool
	// stopCtx, once set by Stop, bounds what the builder still does: the
	// jobs left in the queue and the last exports share one deadline.
	stopCtx atomic.Pointer[context.Context]

	// jobs holds the requests waiting for their spans; pending counts
	// them against limit (tracing.queue_size), so that a reload can change
	// the bound without a new channel.
	jobs     chan *job
	pending  atomic.Int64
	limit    atomic.Int64
	stopOnce sync.Once
	done     chan struct{}

	// errLog and dropLog hold the export errors and the drops logged to
	// one line each an errorLogInterval.
	errLog, dropLog *ratelog.Limiter
}

// tracerState is an installed configuration: the tracer whose spans the
// builder collects, and the exporter it sends them with.
type tracerState struct {
	tracer    trace.Tracer
	provider  *sdktrace.TracerProvider
	collected *collector
	exporter  *otlptrace.Exporter
	timeout   time.Duration
}

// collector is the provider's span processor: it keeps the ended spans for
// the builder to export in batches. Spans are ended in the builder's
// goroutine only, so it needs no lock.
type collector struct {
	spans []sdktrace.ReadOnlySpan
}

func (c *collector) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *collector) OnEnd(s sdktrace.ReadOnlySpan)                   { c.spans = append(c.spans, s) }
func (c *collector) Shutdown(context.Context) error                  { return nil }
func (c *collector) ForceFlush(context.Context) error                { return nil }

// targetInfo is what the spans say about a target besides the result.
type targetInfo struct {
	operation, model, provider, address string
	port                                int
}

// job is what the spans of one finished request need, copied from its
// Result when it is queued: under 5 KiB (4.9 KiB measured for 4,096
// tokens that all stalled: 32 stalls kept), not its chunk offsets (32 KiB
// at 4,096 tokens) or its reply.
type job struct {
	name       string
	sc         trace.SpanContext
	start, end time.Time
	attrs      []attribute.KeyValue
	firstToken time.Duration // offset of t1; -1 without a token
	// firstAnswer is the offset of the first answer token when reasoning
	// came before it; -1 otherwise.
	firstAnswer time.Duration
	stalls      []stall // at most maxStallEvents
	stallCount  int
	phases      []prober.PhaseSpan
	failed      bool
	errMsg      string
}

// stall is a gap between chunks above the scenario's max ITL.
type stall struct {
	at    time.Duration // offset of the chunk that ended it
	gap   time.Duration
	index int
}

// New returns a Tracer with tracing off; instance is the
// service.instance.id resource attribute (the host name if empty). Its
// builder goroutine runs until Stop.
func New(logger *slog.Logger, metrics *Metrics, instance string) *Tracer {
	if instance == "" {
		instance, _ = os.Hostname()
	}
	t := &Tracer{
		logger:   logger,
		metrics:  metrics,
		instance: instance,
		cfg:      config.DefaultTracingConfig,
		jobs:     make(chan *job, config.MaxTracingQueue),
		done:     make(chan struct{}),
		errLog:   ratelog.New(errorLogInterval),
		dropLog:  ratelog.New(errorLogInterval),
	}
	t.targets.Store(&map[string]targetInfo{})
	t.limit.Store(int64(config.DefaultTracingConfig.QueueSize))
	go t.build()
	return t
}

// ApplyConfig installs the tracing section of cfg and the targets the
// spans describe (Prepare, then Commit).
func (t *Tracer) ApplyConfig(cfg *config.Config) error {
	p, err := t.Prepare(cfg)
	if err != nil {
		return err
	}
	p.Commit()
	return nil
}

// Prepared is a configuration's tracing, built but not installed: Commit
// installs it, Discard drops it. One of the two must be called.
type Prepared struct {
	t       *Tracer
	cfg     config.TracingConfig
	targets map[string]targetInfo
	state   *tracerState // nil: tracing off
	keep    bool         // the section did not change: the state in place stays
}

// Prepare builds the exporter of cfg's tracing section when it changed,
// changing nothing: a reload builds everything that can fail first (a TLS
// file that cannot be read), and commits only once nothing can.
func (t *Tracer) Prepare(cfg *config.Config) (*Prepared, error) {
	p := &Prepared{t: t, cfg: cfg.Tracing, targets: map[string]targetInfo{}}
	for _, tc := range cfg.Targets {
		p.targets[tc.Name] = describeTarget(tc)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// TLS files are read when the exporter is built: a section with them
	// is rebuilt on every reload, so that renewed certificates are used.
	p.keep = reflect.DeepEqual(t.cfg, p.cfg) && p.cfg.TLSConfig == (commoncfg.TLSConfig{})
	if p.cfg.Enabled() && !p.keep {
		st, err := t.newState(p.cfg)
		if err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
		p.state = st
	}
	return p, nil
}

// Discard drops a prepared configuration.
func (p *Prepared) Discard() {
	if p.state != nil {
		p.t.close(context.Background(), p.state)
	}
}

// Commit installs the prepared configuration. A replaced exporter sends
// what the builder collected with it, then shuts down; an endpoint left out
// turns tracing off.
func (p *Prepared) Commit() {
	t := p.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		p.Discard()
		return
	}
	t.targets.Store(&p.targets)
	t.limit.Store(int64(p.cfg.QueueSize))
	if p.keep {
		return
	}
	t.cfg = p.cfg
	if old := t.state.Swap(p.state); old != nil {
		t.retired = append(t.retired, old)
	}
	if p.state != nil {
		t.logger.Info("Tracing probes", "endpoint", p.cfg.Endpoint, "client_type", p.cfg.ClientType, "sampling_fraction", p.cfg.SamplingFraction)
	} else {
		t.logger.Info("Tracing is off")
	}
}

// Stop ends the builder within the export timeout (at most
// maxStopTimeout): the jobs still queued are built and the last spans sent
// while that lasts, the rest is dropped (counted). Requests that finish
// later are not traced.
func (t *Tracer) Stop() {
	t.stopOnce.Do(func() {
		t.mu.Lock()
		t.stopped = true
		timeout := min(time.Duration(t.cfg.Timeout), maxStopTimeout)
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		t.stopCtx.Store(&ctx)
		t.jobs <- nil // the builder's last job; the channel stays open for late requests
		<-t.done
	})
}

// maxStopTimeout bounds Stop: the exit of sloprober waits for it.
const maxStopTimeout = 5 * time.Second

// newState returns an installed configuration exporting to its collector.
func (t *Tracer) newState(tc config.TracingConfig) (*tracerState, error) {
	client, err := newClient(tc)
	if err != nil {
		return nil, err
	}
	// otlptrace.New connects lazily over gRPC, and not at all over HTTP:
	// a collector that is down is an export error later, not an error of
	// the reload.
	exp, err := otlptrace.New(context.Background(), client)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(context.Background(),
		resource.WithSchemaURL(semconvSchemaURL),
		resource.WithAttributes(
			keyServiceName.String("sloprober"),
			keyServiceVersion.String(version.Version),
			keyServiceInstance.String(t.instance),
		),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, err
	}
	col := &collector{}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(col),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()), // prober.Traced decided
		sdktrace.WithIDGenerator(probeIDs{}),
	)
	return &tracerState{
		tracer:    provider.Tracer("github.com/sloprober/sloprober/tracing", trace.WithInstrumentationVersion(version.Version)),
		provider:  provider,
		collected: col,
		exporter:  exp,
		timeout:   time.Duration(tc.Timeout),
	}, nil
}

// build makes the spans of queued requests and exports them, until Stop
// queues nil.
func (t *Tracer) build() {
	defer close(t.done)
	tick := time.NewTicker(exportInterval)
	defer tick.Stop()
	var cur *tracerState
	// follow installs the current state: what a retired one collected is
	// sent with its own exporter, then it is shut down.
	follow := func() {
		t.mu.Lock()
		retired := t.retired
		t.retired = nil
		t.mu.Unlock()
		for _, st := range retired {
			if st == cur {
				t.export(cur)
				cur = nil
			}
			t.close(t.deadline(), st)
		}
		cur = t.state.Load()
	}
	for {
		select {
		case j := <-t.jobs:
			follow()
			if j == nil {
				if cur != nil {
					t.export(cur)
					t.close(t.deadline(), cur)
				}
				return
			}
			t.pending.Add(-1)
			if cur == nil || t.deadline().Err() != nil {
				// Turned off since it was queued, or stopping and out
				// of time.
				t.drop()
				continue
			}
			emit(cur.tracer, j)
			if len(cur.collected.spans) >= maxExportBatch {
				t.export(cur)
			}
		case <-tick.C:
			follow()
			if cur != nil {
				t.export(cur)
			}
		}
	}
}

// deadline is the context the builder's work is bound by: none until Stop.
func (t *Tracer) deadline() context.Context {
	if ctx := t.stopCtx.Load(); ctx != nil {
		return *ctx
	}
	return context.Background()
}

// export sends the spans st collected, within its timeout.
func (t *Tracer) export(st *tracerState) {
	spans := st.collected.spans
	if len(spans) == 0 {
		return
	}
	st.collected.spans = nil
	ctx, cancel := context.WithTimeout(t.deadline(), st.timeout)
	defer cancel()
	if err := st.exporter.ExportSpans(ctx, spans); err != nil {
		t.metrics.exportErrors.Inc()
		t.metrics.lost.Add(float64(len(spans)))
		t.logExportError(err, len(spans))
		return
	}
	t.metrics.exported.Add(float64(len(spans)))
}

// close shuts down a state that is no longer installed.
func (t *Tracer) close(parent context.Context, st *tracerState) {
	ctx, cancel := context.WithTimeout(parent, st.timeout)
	defer cancel()
	_ = st.provider.Shutdown(ctx)
	if err := st.exporter.Shutdown(ctx); err != nil {
		t.logger.Debug("Error shutting down a trace exporter", "err", err)
	}
}

// drop counts a request whose spans are not exported, and logs it at most
// once an errorLogInterval.
func (t *Tracer) drop() {
	t.metrics.dropped.Inc()
	if ok, skipped := t.dropLog.Allow(time.Now()); ok {
		t.logger.Warn("Dropping spans: the export queue is full (tracing.queue_size) or tracing stopped", "drops_not_logged", skipped)
	}
}

// logExportError logs a failed export, at most once an errorLogInterval.
func (t *Tracer) logExportError(err error, spans int) {
	if ok, skipped := t.errLog.Allow(time.Now()); ok {
		t.logger.Warn("Error exporting spans", "err", err, "spans", spans, "errors_not_logged", skipped)
	}
}

// errorLogInterval is the least time between two logged export errors: a
// collector that is down fails every export, once a second.
const errorLogInterval = time.Minute

// newClient returns the OTLP client of the configuration.
func newClient(tc config.TracingConfig) (otlptrace.Client, error) {
	headers := map[string]string{}
	for k, v := range tc.Headers {
		headers[k] = string(v)
	}
	timeout := time.Duration(tc.Timeout)
	// Retries end within the export's timeout: spans that cannot be sent
	// in time are dropped by the exporter, not retried for a minute while
	// newer ones queue up.
	retryGRPC := otlptracegrpc.RetryConfig{Enabled: true, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: timeout}
	var tlsConf *tls.Config
	if !tc.Insecure {
		var err error
		if tlsConf, err = commoncfg.NewTLSConfig(&tc.TLSConfig); err != nil {
			return nil, err
		}
	}
	switch tc.ClientType {
	case config.TracingClientHTTP:
		opts := []otlptracehttp.Option{
			otlptracehttp.WithEndpoint(tc.Endpoint), otlptracehttp.WithTimeout(timeout), otlptracehttp.WithHeaders(headers),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig(retryGRPC)),
		}
		if tc.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		} else {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsConf))
		}
		if tc.Compression == "gzip" {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		}
		return otlptracehttp.NewClient(opts...), nil
	default:
		opts := []otlptracegrpc.Option{
			otlptracegrpc.WithEndpoint(tc.Endpoint), otlptracegrpc.WithTimeout(timeout), otlptracegrpc.WithHeaders(headers),
			otlptracegrpc.WithRetry(retryGRPC),
		}
		if tc.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		} else {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tlsConf)))
		}
		if tc.Compression == "gzip" {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		return otlptracegrpc.NewClient(opts...), nil
	}
}

// describeTarget returns what the spans say about a target.
func describeTarget(tc *config.TargetConfig) targetInfo {
	ti := targetInfo{operation: operations[tc.API], model: tc.Model, provider: defaultProvider(tc.API)}
	if p := tc.Metadata["provider"]; p != "" {
		ti.provider = p
	}
	if u, err := url.Parse(tc.URL); err == nil {
		ti.address = u.Hostname()
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		ti.port, _ = strconv.Atoi(port)
		if ip := net.ParseIP(ti.address); ip != nil {
			ti.address = ip.String()
		}
	}
	return ti
}

// Observe implements prober.ObserverFactory.
func (t *Tracer) Observe(info prober.LoadInfo) prober.Observer {
	o := &observer{t: t}
	for _, s := range info.SLOs {
		if s.Name == "max_itl" {
			o.maxITL, o.hasMaxITL = s.Threshold, true
		}
	}
	return o
}

// Update implements prober.ObserverFactory.
func (t *Tracer) Update(prober.LoadInfo) {}

// Forget implements prober.ObserverFactory.
func (t *Tracer) Forget(prober.LoadInfo) {}

// observer hands the traced requests of a load to the span builder.
type observer struct {
	t         *Tracer
	maxITL    time.Duration
	hasMaxITL bool
}

func (o *observer) Scheduled()                    {}
func (o *observer) Dropped(prober.DropReason)     {}
func (o *observer) Sent(time.Time, time.Duration) {}

// Finished queues a traced request's spans without waiting: a full queue
// (a collector that cannot keep up) drops them, counted.
func (o *observer) Finished(r *prober.Result, m *prober.Measurement) {
	t := o.t
	if !prober.Traced(r, m) || t.state.Load() == nil {
		return
	}
	if t.pending.Add(1) > t.limit.Load() {
		t.pending.Add(-1)
		t.drop()
		return
	}
	ti := (*t.targets.Load())[r.Target]
	t.jobs <- newJob(ti, r, m, o.maxITL, o.hasMaxITL) // never blocks: pending <= limit <= cap
	t.metrics.queued.Inc()
}
