package simulator

// The admin endpoints: /sim/config, /sim/faults and /sim/stats.

import (
	"io"
	"net/http"
	"time"
)

func (s *Simulator) serveConfig(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.Config())
}

// serveFaults: GET shows the current faults, PUT replaces them with a faults
// block in JSON or YAML (keys it omits are 0).
func (s *Simulator) serveFaults(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, s.faults.Load().Faults)
	case http.MethodPut, http.MethodPost:
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			s.writeError(w, badRequest("", "reading body: %v", err))
			return
		}
		f, err := ParseFaults(b)
		if err != nil {
			s.writeError(w, badRequest("", "invalid faults: %v", err))
			return
		}
		var d time.Duration
		if v := r.URL.Query().Get("for"); v != "" {
			if d, err = time.ParseDuration(v); err != nil || d <= 0 {
				s.writeError(w, badRequest("for", "for must be a positive duration such as 5m, got %q", v))
				return
			}
		}
		s.replaceFaults(f, d)
		s.logger.Info("Faults replaced", "faults", string(b), "for", d)
		writeJSON(w, f)
	default:
		s.writeError(w, &requestError{status: http.StatusMethodNotAllowed, msg: "use GET or PUT"})
	}
}

func (s *Simulator) serveStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.stats.snapshot())
}

// replaceFaults sets f; with d > 0 the faults of before come back d
// later, unless faults are set again first. A soak's fault plan sets its
// steps so: should the prober die during a step (a crash, kill -9), the
// simulator does not go on failing every request.
func (s *Simulator) replaceFaults(f Faults, d time.Duration) {
	s.expiryMu.Lock()
	defer s.expiryMu.Unlock()
	s.gen++
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
	var before Faults
	if fs := s.faults.Load(); fs != nil {
		before = fs.Faults
	}
	s.setFaults(f)
	if d <= 0 {
		return
	}
	gen := s.gen
	s.expiry = time.AfterFunc(d, func() {
		s.expiryMu.Lock()
		defer s.expiryMu.Unlock()
		if s.gen != gen {
			return
		}
		s.gen++
		s.expiry = nil
		s.setFaults(before)
		s.logger.Info("Faults restored: the time they were set for has passed", "for", d)
	})
}
