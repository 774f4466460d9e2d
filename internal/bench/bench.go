// Package bench is the end-to-end load benchmark of `sloprober bench`: it
// starts the simulator in a separate process with a fixed timing that stamps
// every chunk with its write time, drives sloprober's normal open-loop path
// (manager, scheduler, client, stream reader, Prometheus metrics) at rising
// concurrency, and reports how faithfully sloprober sends and measures, and
// what it costs.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/internal/proc"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
	"github.com/sloprober/sloprober/workload"
)

// Step is one load level: Streams concurrent streams of Tokens tokens, the
// first after TTFT, then one every ITL.
type Step struct {
	Streams int
	TTFT    time.Duration
	ITL     time.Duration
	Tokens  int
}

// Duration is how long one stream lasts.
func (s Step) Duration() time.Duration { return s.TTFT + time.Duration(s.Tokens-1)*s.ITL }

// Rate is the arrival rate that keeps Streams streams in flight.
func (s Step) Rate() float64 { return float64(s.Streams) / s.Duration().Seconds() }

// DefaultSteps are the load levels: 80 ms to the first token, 200
// tokens 20 ms apart (50 tokens/s a stream), and 100 ms apart at 5,000
// streams; about 50,000 chunks/s at 1,000 and at 5,000 streams.
var DefaultSteps = []Step{
	{Streams: 100, TTFT: 80 * time.Millisecond, ITL: 20 * time.Millisecond, Tokens: 200},
	{Streams: 500, TTFT: 80 * time.Millisecond, ITL: 20 * time.Millisecond, Tokens: 200},
	{Streams: 1000, TTFT: 80 * time.Millisecond, ITL: 20 * time.Millisecond, Tokens: 200},
	{Streams: 2000, TTFT: 80 * time.Millisecond, ITL: 20 * time.Millisecond, Tokens: 200},
	{Streams: 5000, TTFT: 80 * time.Millisecond, ITL: 100 * time.Millisecond, Tokens: 200},
}

// Options configure a benchmark run.
type Options struct {
	// Binary is the sloprober executable that serves the simulator.
	Binary string
	Steps  []Step
	// Measure is the measurement window of a step, after a warm-up of one
	// stream duration (the load ramps up to its streams) plus 2 seconds.
	Measure time.Duration
	Logger  *slog.Logger
	// HeapProfile, when set, gets a heap profile at the end of each step's
	// measurement window (the last step's stays).
	HeapProfile string
	// Reader is how the prober reads responses (--prober.reader).
	Reader prober.Reader
	// TLS serves the simulator over TLS (a self-signed certificate for
	// 127.0.0.1), probed over HTTP/1.1.
	TLS bool
}

// Result is what one step measured. Times are in milliseconds.
type Result struct {
	Streams      int     `json:"streams"`
	ITLMS        float64 `json:"itl_ms"`
	IntendedRate float64 `json:"intended_rate"`
	AchievedRate float64 `json:"achieved_rate"`
	Scheduled    int     `json:"scheduled"`
	Sent         int     `json:"sent"`
	Dropped      int     `json:"dropped"`
	Failed       int     `json:"failed"`
	LagP50MS     float64 `json:"lag_p50_ms"`
	LagP99MS     float64 `json:"lag_p99_ms"`
	LagMaxMS     float64 `json:"lag_max_ms"`
	TTFTErrP50MS float64 `json:"ttft_err_p50_ms"`
	TTFTErrP99MS float64 `json:"ttft_err_p99_ms"`
	TTFTErrMean  float64 `json:"ttft_err_mean_ms"`
	ITLErrP50MS  float64 `json:"itl_err_p50_ms"`
	ITLErrP99MS  float64 `json:"itl_err_p99_ms"`
	ITLErrMean   float64 `json:"itl_err_mean_ms"`
	Chunks       int     `json:"chunks"`
	ChunksPerSec float64 `json:"chunks_per_s"`
	CPUCores     float64 `json:"cpu_cores"`
	CPUMSPer1000 float64 `json:"cpu_ms_per_1000_chunks"`
	RSSMB        float64 `json:"rss_mb"`
	RSSPerKiB    float64 `json:"rss_per_stream_kib"`
	HeapPerKiB   float64 `json:"heap_per_stream_kib"`
	StackPerKiB  float64 `json:"stack_per_stream_kib"`
	Goroutines   int     `json:"goroutines"`
	// The prober's own health over the window, judged by the validity
	// rule's default thresholds with no sustain (the window is the level):
	// its CPU share of GOMAXPROCS, the Go scheduler's latency and GC
	// pause P99s (bucket upper bounds), and whether its measurements
	// were valid, or the reasons they were not.
	CPUShare     float64  `json:"cpu_share"`
	SchedP99MS   float64  `json:"sched_latency_p99_ms"`
	GCPauseP99MS float64  `json:"gc_pause_p99_ms"`
	Valid        bool     `json:"valid"`
	Invalid      []string `json:"invalid,omitempty"`
}

// Run runs the steps one after the other.
func Run(ctx context.Context, o Options) ([]Result, error) {
	var out []Result
	for _, s := range o.Steps {
		o.Logger.Info("Benchmark step", "streams", s.Streams, "itl", s.ITL, "rate", fmt.Sprintf("%.1f req/s", s.Rate()), "measure", o.Measure)
		r, err := runStep(ctx, o, s)
		if err != nil {
			return out, fmt.Errorf("%d streams: %w", s.Streams, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// tap observes the requests of the measurement window, beside the metrics.
type tap struct {
	metrics *exporter.Metrics

	mu                       sync.Mutex
	measuring                bool
	scheduled, sent, dropped int
	failed, chunks           int
	lags, ttftErrs           []float64
	itlErrs                  []float32
}

func (t *tap) Observe(info prober.LoadInfo) prober.Observer {
	return &tapObserver{t: t, next: t.metrics.Observe(info)}
}

func (t *tap) Update(info prober.LoadInfo) { t.metrics.Update(info) }
func (t *tap) Forget(info prober.LoadInfo) { t.metrics.Forget(info) }

func (t *tap) setMeasuring(on bool) {
	t.mu.Lock()
	t.measuring = on
	t.mu.Unlock()
}

type tapObserver struct {
	t    *tap
	next prober.Observer
}

func (o *tapObserver) count(f func(t *tap)) {
	o.t.mu.Lock()
	if o.t.measuring {
		f(o.t)
	}
	o.t.mu.Unlock()
}

func (o *tapObserver) Scheduled() {
	o.next.Scheduled()
	o.count(func(t *tap) { t.scheduled++ })
}

func (o *tapObserver) Dropped(r prober.DropReason) {
	o.next.Dropped(r)
	o.count(func(t *tap) { t.dropped++ })
}

func (o *tapObserver) Sent(t0 time.Time, lag time.Duration) {
	o.next.Sent(t0, lag)
	o.count(func(t *tap) { t.sent++ })
}

// Finished records the send lag and, against the simulator's stamps, the
// error of the first-token time and of every inter-token gap: a chunk's
// arrival (t0 on the wall clock plus its monotonic offset) minus the
// simulator's write time.
func (o *tapObserver) Finished(r *prober.Result, m *prober.Measurement) {
	o.next.Finished(r, m)
	o.count(func(t *tap) {
		t.lags = append(t.lags, ms(r.Lag()))
		if r.Outcome != prober.OutcomeOK {
			t.failed++
			return
		}
		t.chunks += len(r.Chunks)
		if len(r.Stamps) != len(r.Chunks) || len(r.Chunks) == 0 {
			return
		}
		sent := r.Sent.UnixNano()
		t.ttftErrs = append(t.ttftErrs, float64(sent+int64(r.Chunks[0])-r.Stamps[0])/1e6)
		for i := 1; i < len(r.Chunks); i++ {
			gap := int64(r.Chunks[i]-r.Chunks[i-1]) - (r.Stamps[i] - r.Stamps[i-1])
			t.itlErrs = append(t.itlErrs, float32(gap)/1e6)
		}
	})
}

// benchOwner owns the benchmark's loads, whose test label it is too.
const benchOwner = "bench"

// benchSpec is the open-loop load of a benchmark step against the
// simulator: requests of in tokens asking for out (ignore_eos, so the
// simulator sends them all), with a TTFT SLO of 1 s.
func benchSpec(simURL, scenario, arrival string, rate float64, timeout time.Duration, maxInFlight, in, out int) config.LoadSpec {
	target := config.DefaultTargetConfig
	target.Name, target.URL, target.Model = "sim", simURL+"/v1", "sim-model"
	target.Timeout, target.MaxInFlight = model.Duration(timeout), maxInFlight
	sc := config.DefaultScenarioConfig
	sc.Name, sc.IgnoreEOS = scenario, true
	sc.InputTokens, sc.OutputTokens = workload.FixedLength(in), workload.FixedLength(out)
	ttft := model.Duration(time.Second)
	sc.SLO.TTFT = &ttft
	return config.LoadSpec{
		Target:    target,
		Scenarios: []config.ScenarioSpec{{ScenarioConfig: sc, Key: config.Key{Target: "sim", Scenario: scenario, Test: benchOwner}, Weight: 1}},
		Arrival:   arrival,
		Rate:      rate,
	}
}

// startLoad starts a benchmark's load through the manager, as a test run
// does, within caps of maxRate and maxInFlight.
func startLoad(m *prober.Manager, spec config.LoadSpec, maxRate float64, maxInFlight int) error {
	if err := m.SetLimits(prober.Limits{MaxRate: maxRate, MaxInFlight: maxInFlight}); err != nil {
		return err
	}
	return m.Apply(benchOwner, []config.LoadSpec{spec})
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func runStep(ctx context.Context, o Options, s Step) (Result, error) {
	dir, err := os.MkdirTemp("", "sloprober-bench")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	simURL, caFile, stopSim, err := startSim(ctx, o.Binary, dir, s, o.TLS)
	if err != nil {
		return Result{}, err
	}
	defer stopSim()

	rate := s.Rate()
	spec := benchSpec(simURL, "bench", config.ArrivalConstant, rate, 5*time.Minute, s.Streams+s.Streams/5+10, 32, s.Tokens)
	if caFile != "" {
		spec.Target.HTTPClientConfig.TLSConfig.CAFile = caFile
		spec.Target.HTTPClientConfig.EnableHTTP2 = false
	}
	runtime.GC()
	rssBefore := proc.RSS()
	var msBefore runtime.MemStats
	runtime.ReadMemStats(&msBefore)
	reg := prometheus.NewRegistry()
	t := &tap{metrics: exporter.NewMetrics(reg)}
	m := prober.NewManager(o.Logger, t, "sloprober/bench")
	m.SetReader(cmp.Or(o.Reader, prober.DefaultReader))
	if err := startLoad(m, spec, 2*rate+1, 2*s.Streams); err != nil {
		return Result{}, err
	}
	defer m.Stop(0)

	if !prober.Sleep(ctx, s.Duration()+2*time.Second) {
		return Result{}, ctx.Err()
	}
	cpu0 := proc.CPU()
	snap := validity.TakeRuntimeSnapshot()
	t.setMeasuring(true)
	start := time.Now()
	if !prober.Sleep(ctx, o.Measure) {
		return Result{}, ctx.Err()
	}
	t.setMeasuring(false)
	window := time.Since(start)
	cpu := proc.CPU() - cpu0
	sched, gcPause := snap.P99s()
	if o.HeapProfile != "" {
		if f, err := os.Create(o.HeapProfile); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	res := Result{Streams: s.Streams, ITLMS: ms(s.ITL), IntendedRate: rate, Goroutines: runtime.NumGoroutine()}
	res.RSSMB = float64(proc.RSS()) / (1 << 20)
	res.RSSPerKiB = float64(proc.RSS()-rssBefore) / 1024 / float64(s.Streams)
	var msAfter runtime.MemStats
	runtime.ReadMemStats(&msAfter)
	res.HeapPerKiB = (float64(msAfter.HeapInuse) - float64(msBefore.HeapInuse)) / 1024 / float64(s.Streams)
	res.StackPerKiB = (float64(msAfter.StackInuse) - float64(msBefore.StackInuse)) / 1024 / float64(s.Streams)

	t.mu.Lock()
	defer t.mu.Unlock()
	res.Scheduled, res.Sent, res.Dropped, res.Failed, res.Chunks = t.scheduled, t.sent, t.dropped, t.failed, t.chunks
	res.AchievedRate = float64(t.sent) / window.Seconds()
	res.ChunksPerSec = float64(t.chunks) / window.Seconds()
	res.LagP50MS, res.LagP99MS, res.LagMaxMS = quantile(t.lags, 0.5), quantile(t.lags, 0.99), quantile(t.lags, 1)
	res.TTFTErrP50MS, res.TTFTErrP99MS, res.TTFTErrMean = quantile(t.ttftErrs, 0.5), quantile(t.ttftErrs, 0.99), mean(t.ttftErrs)
	itl := make([]float64, len(t.itlErrs))
	for i, v := range t.itlErrs {
		itl[i] = float64(v)
	}
	res.ITLErrP50MS, res.ITLErrP99MS, res.ITLErrMean = quantile(itl, 0.5), quantile(itl, 0.99), mean(itl)
	res.CPUCores = cpu.Seconds() / window.Seconds()
	res.CPUShare = res.CPUCores / float64(runtime.GOMAXPROCS(0))
	res.SchedP99MS, res.GCPauseP99MS = ms(sched), ms(gcPause)
	lagP99 := time.Duration(res.LagP99MS * float64(time.Millisecond))
	res.Invalid = validity.DefaultConfig.Judge(res.CPUShare, sched, gcPause, lagP99, 0)
	res.Valid = len(res.Invalid) == 0
	if t.chunks > 0 {
		res.CPUMSPer1000 = ms(cpu) / float64(t.chunks) * 1000
	}
	return res, nil
}

// startSim starts `sloprober sim` in its own process with the step's fixed
// timing and chunk stamps, on a free loopback port; over TLS with tls, its
// certificate in caFile.
func startSim(ctx context.Context, binary, dir string, s Step, tls bool) (url, caFile string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cfgFile := filepath.Join(dir, "sim.yml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("slots: 0\nfixed: {ttft: %s, itl: %s}\nstamp_chunks: true\n", s.TTFT, s.ITL)), 0o600); err != nil {
		return "", "", nil, err
	}
	args := []string{"sim", "--config.file=" + cfgFile, "--web.listen-address=" + addr, "--log.level=warn"}
	url = "http://" + addr
	client := http.DefaultClient
	if tls {
		certFile, keyFile, err := selfSigned(dir)
		if err != nil {
			return "", "", nil, fmt.Errorf("a certificate for the simulator: %w", err)
		}
		webFile := filepath.Join(dir, "web.yml")
		if err := os.WriteFile(webFile, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", certFile, keyFile)), 0o600); err != nil {
			return "", "", nil, err
		}
		args = append(args, "--web.config.file="+webFile)
		url, caFile = "https://"+addr, certFile
		tlsConfig, err := commoncfg.NewTLSConfig(&commoncfg.TLSConfig{CAFile: caFile})
		if err != nil {
			return "", "", nil, err
		}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
		defer client.CloseIdleConnections()
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", "", nil, fmt.Errorf("starting the simulator: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := client.Get(url + "/v1/models")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return url, caFile, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", "", nil, errors.New("the simulator did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quantile is the nearest-rank quantile; 0 for no values (JSON has no NaN).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1 // nearest rank
	return s[min(max(i, 0), len(s)-1)]
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// WriteTable prints the results as a table.
func WriteTable(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%7s %6s %9s %9s %7s %8s %8s %8s %9s %9s %9s %9s %9s %9s %6s %8s %7s %8s %8s %8s %10s %9s  %s\n",
		"streams", "itl", "intended", "achieved", "dropped", "lag p50", "lag p99", "lag max",
		"ttft p50", "ttft p99", "ttft mean", "itl p50", "itl p99", "itl mean", "cores", "ms/1k ch", "rss MB",
		"KiB/str", "heap/str", "stk/str", "goroutines", "sched p99", "measurements")
	for _, r := range rs {
		valid := "valid"
		if !r.Valid {
			valid = "NOT VALID: " + strings.Join(r.Invalid, ", ")
		}
		fmt.Fprintf(w, "%7d %4.0fms %7.1f/s %7.1f/s %7d %6.2fms %6.2fms %6.2fms %7.3fms %7.3fms %7.3fms %7.3fms %7.3fms %7.3fms %6.2f %8.1f %7.1f %8.1f %8.1f %8.1f %10d %7.2fms  %s\n",
			r.Streams, r.ITLMS, r.IntendedRate, r.AchievedRate, r.Dropped, r.LagP50MS, r.LagP99MS, r.LagMaxMS,
			r.TTFTErrP50MS, r.TTFTErrP99MS, r.TTFTErrMean, r.ITLErrP50MS, r.ITLErrP99MS, r.ITLErrMean,
			r.CPUCores, r.CPUMSPer1000, r.RSSMB, r.RSSPerKiB, r.HeapPerKiB, r.StackPerKiB, r.Goroutines, r.SchedP99MS, valid)
	}
}

// Fidelity is the result of the schedule-fidelity run: sloprober's sends
// against the arrivals its seeded schedule says were due.
type Fidelity struct {
	Rate      float64 `json:"rate"`
	Seconds   float64 `json:"seconds"`
	Expected  int     `json:"expected_arrivals"`
	Scheduled int     `json:"scheduled"`
	Sent      int     `json:"sent"`
	Dropped   int     `json:"dropped"`
	Lags      int     `json:"lags_recorded"`
	OffPct    float64 `json:"scheduled_off_expected_pct"`
	LagP50MS  float64 `json:"lag_p50_ms"`
	LagP99MS  float64 `json:"lag_p99_ms"`
	LagMaxMS  float64 `json:"lag_max_ms"`
}

// RunFidelity sends Poisson arrivals at rate for d (short requests: 10 ms
// to the first of 5 tokens, 10 ms apart) and compares what sloprober
// scheduled and sent with the arrivals of the same seeded Poisson schedule.
func RunFidelity(ctx context.Context, o Options, rate float64, d time.Duration) (Fidelity, error) {
	dir, err := os.MkdirTemp("", "sloprober-bench")
	if err != nil {
		return Fidelity{}, err
	}
	defer os.RemoveAll(dir)
	step := Step{Streams: int(rate), TTFT: 10 * time.Millisecond, ITL: 10 * time.Millisecond, Tokens: 5}
	simURL, _, stopSim, err := startSim(ctx, o.Binary, dir, step, false)
	if err != nil {
		return Fidelity{}, err
	}
	defer stopSim()
	spec := benchSpec(simURL, "fidelity", config.ArrivalPoisson, rate, time.Minute, 10000, 16, 5)
	t := &tap{metrics: exporter.NewMetrics(prometheus.NewRegistry())}
	m := prober.NewManager(o.Logger, t, "sloprober/bench")
	m.SetReader(cmp.Or(o.Reader, prober.DefaultReader))
	if err := startLoad(m, spec, rate+1, 10000); err != nil {
		return Fidelity{}, err
	}
	defer m.Stop(0)
	if !prober.Sleep(ctx, 2*time.Second) {
		return Fidelity{}, ctx.Err()
	}
	t.setMeasuring(true)
	start := time.Now()
	if !prober.Sleep(ctx, d) {
		return Fidelity{}, ctx.Err()
	}
	t.setMeasuring(false)
	end := time.Now()
	// The same schedule: the manager seeds a load from its label sets.
	arrivals := prober.NewPoissonArrivals(rate, prober.Seed(spec.Name()), start)
	expected := 0
	for a := arrivals.Next(); a.Due.Before(end); a = arrivals.Next() {
		expected++
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f := Fidelity{Rate: rate, Seconds: end.Sub(start).Seconds(), Expected: expected, Scheduled: t.scheduled,
		Sent: t.sent, Dropped: t.dropped, Lags: len(t.lags)}
	f.OffPct = 100 * math.Abs(float64(t.scheduled-expected)) / float64(expected)
	f.LagP50MS, f.LagP99MS, f.LagMaxMS = quantile(t.lags, 0.5), quantile(t.lags, 0.99), quantile(t.lags, 1)
	return f, nil
}
