// Package rrproxy is a round-robin HTTP reverse proxy for tests: several
// simulator replicas behind one URL, as a gateway (or a Kubernetes
// Service) puts them, so that a soak test can stop one replica, restart
// it, or take it out of rotation through an admin API the way an http
// fault action would with a real gateway.
//
// It behaves like a gateway without retries or health checks: a request
// sent to a dead replica fails with 502, so with 3 replicas of which one
// is dead, one request in 3 fails until that replica is marked down (or
// comes back). Responses are streamed, every chunk flushed as it comes:
// an SSE stream's time to first token through the proxy is the
// replica's, not the time to fill a buffer.
package rrproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
)

// Proxy spreads requests over its backends in turn, skipping those marked
// down. It is an http.Handler; Admin is its admin API.
type Proxy struct {
	transport *http.Transport
	next      atomic.Uint64

	mu       sync.RWMutex
	backends []*backend
}

type backend struct {
	url    *url.URL
	proxy  *httputil.ReverseProxy
	down   bool
	served atomic.Int64 // requests sent to it, answered or not
	failed atomic.Int64 // of which failed with 502
}

// New returns a proxy over backends, base URLs like http://127.0.0.1:PORT.
// A malformed URL is a bug of the test: New panics naming it.
func New(backends ...string) *Proxy {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // loopback only, whatever the environment says
	p := &Proxy{transport: t}
	for i, s := range backends {
		b, err := p.newBackend(s)
		if err != nil {
			panic(fmt.Sprintf("rrproxy: backend %d: %v", i, err))
		}
		p.backends = append(p.backends, b)
	}
	return p
}

func (p *Proxy) newBackend(s string) (*backend, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("parsing backend URL %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("backend URL %q: want http(s)://host:port", s)
	}
	b := &backend{url: u}
	b.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
		},
		Transport: p.transport,
		// -1: flush after every write, so SSE chunks pass at once.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			b.failed.Add(1)
			http.Error(w, fmt.Sprintf("rrproxy: backend %s: %v", u.Host, err), http.StatusBadGateway)
		},
	}
	return b, nil
}

// ServeHTTP sends r to the next backend that is not marked down: 502 when
// it does not answer, 503 when every backend is down.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b := p.pick()
	if b == nil {
		http.Error(w, "rrproxy: every backend is marked down", http.StatusServiceUnavailable)
		return
	}
	b.served.Add(1)
	// The body is read whole before it is forwarded, as gateways do. A
	// body streamed through raced with the answer: once the replica's
	// stream had begun, the server could close the request's body before
	// the transport had read all of it, and the transport then closed the
	// connection to the replica mid-stream (about one request in 40 at
	// 30 req/s under -race, seen by the prober as a broken stream).
	if r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			http.Error(w, "rrproxy: reading the request body failed or exceeded 64 MiB", http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}
	b.proxy.ServeHTTP(w, r)
}

// maxBody bounds a request body the proxy reads: 64 MiB.
const maxBody = 64 << 20

// pick is the next backend in turn not marked down, or nil.
func (p *Proxy) pick() *backend {
	p.mu.RLock()
	defer p.mu.RUnlock()
	n := uint64(len(p.backends))
	if n == 0 {
		return nil
	}
	start := p.next.Add(1) - 1
	for k := range n {
		if b := p.backends[(start+k)%n]; !b.down {
			return b
		}
	}
	return nil
}

// SetDown takes backend i out of rotation (down) or puts it back, as a
// gateway's admin API does.
func (p *Proxy) SetDown(i int, down bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.backends) {
		return fmt.Errorf("rrproxy: no backend %d (have %d)", i, len(p.backends))
	}
	p.backends[i].down = down
	return nil
}

// SetURL points backend i at another URL: a replica restarted on another
// port. Its counts start again from 0; its down mark is kept.
func (p *Proxy) SetURL(i int, backendURL string) error {
	b, err := p.newBackend(backendURL)
	if err != nil {
		return fmt.Errorf("rrproxy: backend %d: %w", i, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.backends) {
		return fmt.Errorf("rrproxy: no backend %d (have %d)", i, len(p.backends))
	}
	b.down = p.backends[i].down
	p.backends[i] = b
	return nil
}

// BackendState is one backend as Backends and the admin API show it.
type BackendState struct {
	Index  int    `json:"index"`
	URL    string `json:"url"`
	Down   bool   `json:"down"`
	Served int64  `json:"served"`
	Failed int64  `json:"failed"`
}

// Backends is the state of every backend, in order.
func (p *Proxy) Backends() []BackendState {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]BackendState, len(p.backends))
	for i, b := range p.backends {
		out[i] = BackendState{Index: i, URL: b.url.String(), Down: b.down, Served: b.served.Load(), Failed: b.failed.Load()}
	}
	return out
}

// Close closes the proxy's idle connections to its backends (a test's
// goroutine leak check then finds none).
func (p *Proxy) Close() { p.transport.CloseIdleConnections() }

// Admin is the proxy's admin API, for an http fault action to call:
//
//	POST /admin/backends/{i}/down  take backend i out of rotation
//	POST /admin/backends/{i}/up    put it back
//	GET  /admin/backends           every backend's state (JSON)
//
// A change answers 200 with the backend's new state; an unknown backend
// 404.
func (p *Proxy) Admin() http.Handler {
	mux := http.NewServeMux()
	set := func(down bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			i, err := strconv.Atoi(r.PathValue("i"))
			if err == nil {
				err = p.SetDown(i, down)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			writeJSON(w, p.Backends()[i])
		}
	}
	mux.HandleFunc("POST /admin/backends/{i}/down", set(true))
	mux.HandleFunc("POST /admin/backends/{i}/up", set(false))
	mux.HandleFunc("GET /admin/backends", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, p.Backends())
	})
	return mux
}

// Handler serves the admin API under /admin/ and proxies everything else:
// one URL for both, as some gateways have.
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/admin/", p.Admin())
	mux.Handle("/", p)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
