package testrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/report"
	"github.com/sloprober/sloprober/runstore"
)

// NewAPI returns the test API, under /api/v1/:
//
//	GET  /api/v1/tests                  configured tests, their schedule, next and last run, running run
//	GET  /api/v1/runs[?test=NAME]       stored runs, newest first
//	GET  /api/v1/runs/{id}              one run's results (capacity.Run as JSON; with storage_error while not stored)
//	POST /api/v1/tests/{name}/run       start a run now: 202 {"id": ...}; 409 if a test runs on the target
//	POST /api/v1/tests/{name}/abort     abort the running run of a test: 200, 404 if none
//	GET  /reports/{id}[?format=html|md|json]  a run's report (report.Build); HTML by default
//	GET  /reports/compare?a=ID&b=ID[&format=md|json|html]  two runs compared (report.Compare); Markdown by default
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
	// getRun reads the run of the path's {id} and its storage error, or
	// answers the error; lookup the run of an id given otherwise.
	var lookup func(w http.ResponseWriter, raw string) (*capacity.Run, string, bool)
	getRun := func(w http.ResponseWriter, r *http.Request) (*capacity.Run, string, bool) {
		return lookup(w, r.PathValue("id"))
	}
	lookup = func(w http.ResponseWriter, raw string) (*capacity.Run, string, bool) {
		id, err := runstore.ParseID(raw)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return nil, "", false
		}
		run, storageErr, err := s.Lookup(id)
		switch {
		case errors.Is(err, runstore.ErrNotFound):
			writeError(w, http.StatusNotFound, err)
			return nil, "", false
		case err != nil:
			writeError(w, http.StatusInternalServerError, err)
			return nil, "", false
		}
		return run, storageErr, true
	}
	mux.HandleFunc("GET /api/v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		run, storageErr, ok := getRun(w, r)
		if !ok {
			return
		}
		if storageErr != "" {
			// The run as it should be stored, and why it is not.
			writeJSON(w, http.StatusOK, struct {
				*capacity.Run
				StorageError string `json:"storage_error"`
			}{run, storageErr})
			return
		}
		writeJSON(w, http.StatusOK, run)
	})
	mux.HandleFunc("GET /reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		run, _, ok := getRun(w, r)
		if !ok {
			return
		}
		format := r.URL.Query().Get("format")
		if format == "" {
			format = "html"
		}
		var b bytes.Buffer
		if err := report.Write(&b, report.Build(run), format); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		w.Header().Set("Content-Type", report.ContentType(format))
		if format == "html" {
			// The page's own policy, also as a header: nothing it shows
			// (a server's name, a model's) can fetch or run anything.
			w.Header().Set("Content-Security-Policy", report.CSP)
		}
		_, _ = w.Write(b.Bytes())
	})
	// Two runs compared, as `sloprober report compare` compares them.
	mux.HandleFunc("GET /reports/compare", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var reps []*report.Report
		for _, k := range []string{"a", "b"} {
			if q.Get(k) == "" {
				writeError(w, http.StatusBadRequest, fmt.Errorf("compare needs two run ids: /reports/compare?a=ID&b=ID, %s missing", k))
				return
			}
			run, _, ok := lookup(w, q.Get(k))
			if !ok {
				return
			}
			reps = append(reps, report.Build(run))
		}
		c := report.Compare(reps[0], reps[1])
		switch format := q.Get("format"); format {
		case "", "md":
			var b bytes.Buffer
			if err := report.WriteComparison(&b, c); err != nil {
				writeError(w, http.StatusInternalServerError, err)
				return
			}
			w.Header().Set("Content-Type", report.ContentType("md"))
			_, _ = w.Write(b.Bytes())
		case "json":
			writeJSON(w, http.StatusOK, c)
		case "html":
			var b bytes.Buffer
			if err := report.WriteComparisonHTML(&b, c); err != nil {
				writeError(w, http.StatusInternalServerError, err)
				return
			}
			w.Header().Set("Content-Type", report.ContentType("html"))
			w.Header().Set("Content-Security-Policy", report.CSP)
			_, _ = w.Write(b.Bytes())
		default:
			writeError(w, http.StatusBadRequest, fmt.Errorf("a comparison is md, json or html, not %q", format))
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
		found, ended := s.Abort(name, "aborted through the API", abortWait)
		switch {
		case !found:
			writeError(w, http.StatusNotFound, fmt.Errorf("test %q is not running", name))
		case ended:
			writeJSON(w, http.StatusOK, map[string]string{"aborted": name})
		default:
			writeJSON(w, http.StatusAccepted, map[string]string{"aborting": name,
				"note": "the run is ending (a level's requests drain, a fault step's undo runs to its end or its timeout): it is stored when it has ended"})
		}
	}))
	return mux
}

// abortWait is how long an abort waits for its run to end before it
// answers 202: most runs end within it; a level's drain (up to the
// target's timeout) or a fault step's undo (its timeout, 30 s by
// default) may take longer, which the caller need not wait out.
const abortWait = 2 * time.Second

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
