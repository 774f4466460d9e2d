package simulator

// The admin endpoints: /sim/config, /sim/faults and /sim/stats.

import (
	"io"
	"net/http"
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
		s.SetFaults(f)
		s.logger.Info("Faults replaced", "faults", string(b))
		writeJSON(w, f)
	default:
		s.writeError(w, &requestError{status: http.StatusMethodNotAllowed, msg: "use GET or PUT"})
	}
}

func (s *Simulator) serveStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.stats.snapshot())
}
