package simulator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
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
	// Each kind of decision has its own seeded stream, so that switching
	// one on does not change the others a seed gives, and decisions added
	// later leave a seed's earlier ones as they were.
	lengths          *randomStream
	faultRand        *randomStream
	reasoningLengths *randomStream
	contentRand      *randomStream
	streamErrorRand  *randomStream
	faults           atomic.Pointer[faultSet]
	stats            *stats
	ids              atomic.Uint64
	vocab            []string
	started          int64

	// wrongTools and invalidDocs count the content faults of each kind
	// injected, whose kinds alternate.
	wrongTools, invalidDocs atomic.Uint64

	identity   atomic.Pointer[identity]
	identityMu sync.Mutex // serializes PUT /sim/identity's read-modify-write

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
	s := &Simulator{
		cfg:              cfg.clone(),
		logger:           logger,
		reg:              reg,
		tok:              newTokenizer(cfg.Tokenizer),
		lengths:          newRandomStream(cfg.Seed, 1),
		faultRand:        newRandomStream(cfg.Seed, 2),
		reasoningLengths: newRandomStream(cfg.Seed, 3),
		contentRand:      newRandomStream(cfg.Seed, 4),
		streamErrorRand:  newRandomStream(cfg.Seed, 5),
		stats:            newStats(),
		vocab:            vocabulary(cfg.Tokenizer),
		started:          time.Now().Unix(),
	}
	id := Identity{Model: cfg.Model, Fingerprint: cfg.Fingerprint}
	if id.Fingerprint == "" {
		id.Fingerprint = defaultFingerprint(cfg.Model)
	}
	if h := cfg.IdentityHeader; h != nil {
		hc := *h
		id.Header = &hc
	}
	s.identity.Store(newIdentity(id))
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
	c := s.cfg.clone()
	c.Faults = s.faults.Load().Faults
	if d := c.Faults.Degrade; d != nil {
		dc := *d
		c.Faults.Degrade = &dc
	}
	return c
}

// clone copies c and the blocks it points to, so that the copy shares
// nothing a caller could change under a running simulator.
func (c *Config) clone() Config {
	cc := *c
	if p := c.PrefixCache; p != nil {
		pc := *p
		cc.PrefixCache = &pc
	}
	if r := c.ReasoningTokens; r != nil {
		rc := *r
		cc.ReasoningTokens = &rc
	}
	if h := c.IdentityHeader; h != nil {
		hc := *h
		cc.IdentityHeader = &hc
	}
	return cc
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
	mux.HandleFunc("/v1/chat/completions", s.serveGenerate(apiChat))
	mux.HandleFunc("/v1/completions", s.serveGenerate(apiCompletions))
	mux.HandleFunc("/v1/responses", s.serveGenerate(apiResponses))
	mux.HandleFunc("/v1/messages", s.serveGenerate(apiMessages))
	mux.HandleFunc("/v1/models", s.serveModels)
	mux.HandleFunc("/tokenize", s.serveTokenize)
	mux.HandleFunc("/sim/config", s.serveConfig)
	mux.HandleFunc("/sim/faults", s.serveFaults)
	mux.HandleFunc("/sim/identity", s.serveIdentity)
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
		if h := s.identity.Load().Header; h != nil && strings.HasPrefix(r.URL.Path, "/v1/") {
			w.Header().Set(h.Name, h.Value)
		}
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
POST /v1/responses          OpenAI Responses API (stream)
POST /v1/messages           Anthropic Messages API (stream)
GET  /v1/models             the served model
POST /tokenize              token count, vLLM's form
GET  /sim/config            the configuration with the current faults
GET  /sim/faults            the current faults
PUT  /sim/faults            replace the faults (JSON or YAML; omitted keys are 0)
GET  /sim/identity          the model name, fingerprint and header replies carry
PUT  /sim/identity          change them (JSON or YAML; omitted keys are kept)
GET  /sim/stats             running, waiting, totals, ground truth of replies
GET  /metrics               Prometheus metrics
`, s.cfg.Model, s.describe())
}

// serveGenerate serves a generation API: the request is read and planned
// (its errors are the API's own), its faults drawn, then its reply produced
// on the engine's schedule, in the API's form. The four APIs share all of
// it but the parsing and the writing.
func (s *Simulator) serveGenerate(api apiKind) http.HandlerFunc {
	fail := s.writeError
	if api == apiMessages {
		fail = s.writeAnthropicError
	}
	return func(w http.ResponseWriter, r *http.Request) {
		// The request's phases count from here: reading and parsing it
		// is part of the time it waits, as in a real server.
		arrived := time.Now()
		if r.Method != http.MethodPost {
			fail(w, &requestError{status: http.StatusMethodNotAllowed, msg: "method " + r.Method + " is not allowed, use POST"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err != nil {
			fail(w, badRequest("", "reading request body: %v", err))
			return
		}
		req, err := s.parseRequest(api, r.Header, body)
		if err != nil {
			fail(w, err)
			return
		}
		p, out, err := s.prepare(req)
		if err != nil {
			fail(w, err)
			return
		}
		ctx := r.Context()
		plan := s.plan()
		if plan.headerDelay > 0 {
			s.stats.fault(faultHeaderDelay)
			if !sleep(ctx, plan.headerDelay) {
				return
			}
			// A slow gateway in front: not the engine's time. It
			// reports its own time as a gateway would, in
			// Server-Timing, so that the prober's gateway phase has a
			// ground truth; the engine's phases (timings) count from
			// here, so the two tile the request.
			now := time.Now()
			w.Header().Set("Server-Timing", "gateway;dur="+strconv.FormatFloat(ms(now.Sub(arrived)), 'f', 3, 64))
			arrived = now
		}
		if plan.status != 0 {
			s.stats.fault(faultError)
			status := plan.status
			if api == apiMessages && status == http.StatusServiceUnavailable {
				status = statusOverloaded // Anthropic's overload
			}
			if status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			fail(w, &requestError{status: status, msg: fmt.Sprintf("injected fault: %d %s", status, statusText(status))})
			return
		}

		var src tokenSource
		if s.engine != nil {
			seq := newSequence(ctx, arrived, p, out.n)
			if err := s.engine.submit(seq); err != nil {
				w.Header().Set("Retry-After", "1")
				fail(w, &requestError{status: http.StatusTooManyRequests, msg: fmt.Sprintf("the waiting queue is full (max_queue %d)", s.cfg.MaxQueue)})
				return
			}
			defer s.engine.withdraw(seq)
			src = seq
		} else {
			s.stats.running.Add(1)
			defer s.stats.running.Add(-1)
			s.stats.promptTokens.Add(int64(p.tokens))
			src = newFixedSource(arrived, time.Duration(s.cfg.Fixed.TTFT), time.Duration(s.cfg.Fixed.ITL), out.n, &s.faults)
		}
		rp := &reply{
			sim: s, w: w, api: api, req: req, src: src, prompt: p, out: out, plan: plan,
			ident: s.identity.Load(), id: s.ids.Add(1), created: time.Now().Unix(),
			requestID: r.Header.Get("X-Request-Id"),
		}
		rp.enc = newEncoder(rp)
		if req.stream {
			rp.stream(ctx)
		} else {
			rp.whole(ctx)
		}
	}
}

// parseRequest reads a request of api.
func (s *Simulator) parseRequest(api apiKind, h http.Header, body []byte) (*request, error) {
	switch api {
	case apiResponses:
		return s.parseResponses(body)
	case apiMessages:
		return s.parseMessages(h, body)
	}
	return s.parseCompletion(body, api)
}

func (s *Simulator) describe() string {
	if s.engine == nil {
		return fmt.Sprintf("fixed timing (ttft %s, itl %s)", s.cfg.Fixed.TTFT, s.cfg.Fixed.ITL)
	}
	return fmt.Sprintf("engine with %d slots", s.cfg.Slots)
}
