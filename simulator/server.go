package simulator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
)

// maxBodyBytes bounds a request body: 32 MiB holds a 128k-token prompt
// several times over.
const maxBodyBytes = 32 << 20

// Simulator is a simulated OpenAI-compatible LLM server. Create it with New,
// run its engine with Run and serve Handler.
type Simulator struct {
	cfg    Config
	logger *slog.Logger
	reg    *prometheus.Registry

	tok         tokenizer
	blockTokens int
	engine      *engine // nil with slots: 0
	lengths     *randomStream
	faultRand   *randomStream
	faults      atomic.Pointer[faultSet]
	stats       *stats
	ids         atomic.Uint64
	vocab       []string
	modelJSON   string
	started     int64

	// expiry restores the faults of before a PUT /sim/faults?for=D, D
	// after it, unless faults were set again meanwhile (gen changed).
	expiryMu sync.Mutex
	gen      uint64
	expiry   *time.Timer
}

// New builds a simulator from a validated configuration. Its metrics are
// registered with reg, which Handler serves on /metrics; reg may be nil.
func New(cfg *Config, logger *slog.Logger, reg *prometheus.Registry) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid simulator configuration: %w", err)
	}
	modelJSON, _ := json.Marshal(cfg.Model)
	s := &Simulator{
		cfg:       *cfg,
		logger:    logger,
		reg:       reg,
		tok:       newTokenizer(cfg.Tokenizer),
		lengths:   newRandomStream(cfg.Seed, 1),
		faultRand: newRandomStream(cfg.Seed, 2),
		stats:     newStats(),
		vocab:     vocabulary(cfg.Tokenizer),
		modelJSON: string(modelJSON),
		started:   time.Now().Unix(),
	}
	if cfg.PrefixCache != nil {
		s.blockTokens = cfg.PrefixCache.BlockTokens
	}
	if cfg.Slots > 0 {
		s.engine = newEngine(cfg, s.stats, &s.faults)
	}
	s.SetFaults(cfg.Faults)
	if reg != nil {
		if err := reg.Register(newCollector(s.stats, cfg.Model, cfg.Slots, &s.faults)); err != nil {
			return nil, fmt.Errorf("registering simulator metrics: %w", err)
		}
	}
	return s, nil
}

// Run runs the engine loop until ctx is done; requests in the engine are then
// ended. Without an engine (slots: 0) it only waits for ctx.
func (s *Simulator) Run(ctx context.Context) {
	if s.engine == nil {
		<-ctx.Done()
		return
	}
	s.engine.run(ctx)
}

// Config returns the configuration with the current faults.
func (s *Simulator) Config() Config {
	c := s.cfg
	c.Faults = s.faults.Load().Faults
	if d := c.Faults.Degrade; d != nil {
		dc := *d
		c.Faults.Degrade = &dc
	}
	return c
}

// SetFaults replaces the injected faults (and cancels the restore of a
// PUT /sim/faults?for=). A degradation in f starts now, from no
// degradation and no leak, whether or not one was in effect.
func (s *Simulator) SetFaults(f Faults) { s.replaceFaults(f, 0) }

// setFaults replaces the injected faults; s.expiryMu is held.
func (s *Simulator) setFaults(f Faults) {
	if f.Degrade != nil {
		d := *f.Degrade
		f.Degrade = &d // not shared with the caller
	}
	fs := &faultSet{Faults: f}
	if f.Degrade != nil {
		fs.degrade = &degradation{cfg: *f.Degrade, since: time.Now()}
	}
	for code, rate := range f.ErrorRate {
		n, _ := strconv.Atoi(code)
		if rate > 0 {
			fs.codes = append(fs.codes, codeRate{n, rate})
		}
	}
	slices.SortFunc(fs.codes, func(a, b codeRate) int { return a.code - b.code })
	s.faults.Store(fs)
}

// Stats returns the simulator's counters.
func (s *Simulator) Stats() Stats { return s.stats.snapshot() }

// Handler serves the OpenAI-compatible API, the simulator's own endpoints and
// /metrics.
func (s *Simulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveCompletion(w, r, true) })
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveCompletion(w, r, false) })
	mux.HandleFunc("/v1/models", s.serveModels)
	mux.HandleFunc("/tokenize", s.serveTokenize)
	mux.HandleFunc("/sim/config", s.serveConfig)
	mux.HandleFunc("/sim/faults", s.serveFaults)
	mux.HandleFunc("/sim/stats", s.serveStats)
	if s.reg != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/", s.serveIndex)
	// An engine says what it is in its Server header (llama.cpp:
	// "llama.cpp", vLLM's uvicorn: "uvicorn"), and so does the simulator,
	// for the test object of a report.
	server := "sloprober-sim"
	if version.Version != "" {
		server += "/" + version.Version
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", server)
		mux.ServeHTTP(w, r)
	})
}

func (s *Simulator) serveIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		s.writeError(w, &requestError{status: http.StatusNotFound, msg: "no such endpoint: " + r.URL.Path})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, `sloprober simulator, model %q, %s

POST /v1/chat/completions   OpenAI chat completions (stream or not)
POST /v1/completions        OpenAI completions (stream or not)
GET  /v1/models             the served model
POST /tokenize              token count, vLLM's form
GET  /sim/config            the configuration with the current faults
GET  /sim/faults            the current faults
PUT  /sim/faults            replace the faults (JSON or YAML; omitted keys are 0)
GET  /sim/stats             running, waiting, totals
GET  /metrics               Prometheus metrics
`, s.cfg.Model, s.describe())
}

func (s *Simulator) describe() string {
	if s.engine == nil {
		return fmt.Sprintf("fixed timing (ttft %s, itl %s)", s.cfg.Fixed.TTFT, s.cfg.Fixed.ITL)
	}
	return fmt.Sprintf("engine with %d slots", s.cfg.Slots)
}
