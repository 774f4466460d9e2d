package testrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sloprober/sloprober/runstore"
)

// NewAPI returns the test API, under /api/v1/:
//
//	GET  /api/v1/tests                  configured tests, their schedule, next and last run, running run
//	GET  /api/v1/runs[?test=NAME]       stored runs, newest first
//	GET  /api/v1/runs/{id}              one run's results (capacity.Run as JSON)
//	POST /api/v1/tests/{name}/run       start a run now: 202 {"id": ...}; 409 if a test runs on the target
//	POST /api/v1/tests/{name}/abort     abort the running run of a test: 200, 404 if none
//
// The POST endpoints answer 403 unless mutations is true
// (--web.enable-test-api): starting a test is a load on a production
// target, and not every reader of /metrics should be able to.
func NewAPI(s *Service, mutations bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/tests", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Tests())
	})
	mux.HandleFunc("GET /api/v1/runs", func(w http.ResponseWriter, r *http.Request) {
		runs := s.Runs(r.URL.Query().Get("test"))
		if runs == nil {
			runs = []RunSummary{}
		}
		writeJSON(w, http.StatusOK, runs)
	})
	mux.HandleFunc("GET /api/v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := runstore.ParseID(r.PathValue("id"))
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		run, err := s.Get(id)
		switch {
		case errors.Is(err, runstore.ErrNotFound):
			writeError(w, http.StatusNotFound, err)
		case err != nil:
			writeError(w, http.StatusInternalServerError, err)
		default:
			writeJSON(w, http.StatusOK, run)
		}
	})
	mutate := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !mutations {
				writeError(w, http.StatusForbidden, errors.New("the test API's POST endpoints are disabled: start sloprober with --web.enable-test-api"))
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST /api/v1/tests/{name}/run", mutate(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.Start(r.PathValue("name"), "api")
		switch {
		case errors.Is(err, ErrUnknown):
			writeError(w, http.StatusNotFound, err)
		case errors.Is(err, ErrBusy):
			writeError(w, http.StatusConflict, err)
		case errors.Is(err, ErrStopping):
			writeError(w, http.StatusServiceUnavailable, err)
		case err != nil:
			writeError(w, http.StatusInternalServerError, err)
		default:
			writeJSON(w, http.StatusAccepted, map[string]string{"id": string(id)})
		}
	}))
	mux.HandleFunc("POST /api/v1/tests/{name}/abort", mutate(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if !s.Abort(name, "aborted through the API") {
			writeError(w, http.StatusNotFound, fmt.Errorf("test %q is not running", name))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"aborted": name})
	}))
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
