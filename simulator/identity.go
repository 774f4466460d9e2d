package simulator

// Identity: who the simulator says it is. A deployment can swap the model
// behind a name (a new snapshot, a new quantization, a new serving stack)
// while every request still succeeds; only what replies say about the
// model changes. PUT /sim/identity does that at run time, so identity-drift
// detection can be tested against a known change.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"

	"github.com/sloprober/sloprober/internal/strictyaml"
)

// Identity is what replies say about the model: the model name every API
// reply carries, the system_fingerprint of chat and completions replies,
// and an optional response header on every /v1/ reply.
type Identity struct {
	Model       string        `yaml:"model" json:"model"`
	Fingerprint string        `yaml:"fingerprint" json:"fingerprint"`
	Header      *HeaderConfig `yaml:"header,omitempty" json:"header,omitempty"`
}

// identity is an Identity with its strings encoded once for the stream
// writers. A reply reads it once, so it says one thing throughout.
type identity struct {
	Identity
	modelJSON       string // the model as a JSON string, quotes included
	fingerprintJSON string
}

func newIdentity(id Identity) *identity {
	return &identity{
		Identity:        id,
		modelJSON:       string(appendJSONString(nil, id.Model)),
		fingerprintJSON: string(appendJSONString(nil, id.Fingerprint)),
	}
}

// defaultFingerprint derives a fingerprint from the model name, in
// OpenAI's form ("fp_" and ten hex digits), stable across restarts.
func defaultFingerprint(model string) string {
	return fmt.Sprintf("fp_%010x", fnvString(fnvOffset, model)&(1<<40-1))
}

// Identity returns what replies currently say about the model.
func (s *Simulator) Identity() Identity {
	id := s.identity.Load().Identity
	if id.Header != nil {
		h := *id.Header
		id.Header = &h
	}
	return id
}

// SetIdentity replaces what replies say about the model. Requests may name
// the configured model or id.Model.
func (s *Simulator) SetIdentity(id Identity) error {
	if err := id.validate(); err != nil {
		return err
	}
	if id.Header != nil {
		h := *id.Header
		id.Header = &h
	}
	s.identity.Store(newIdentity(id))
	return nil
}

func (id *Identity) validate() error {
	var errs []error
	if id.Model == "" {
		errs = append(errs, errors.New("model: must not be empty"))
	}
	if strings.IndexFunc(id.Fingerprint, unicode.IsControl) >= 0 {
		errs = append(errs, fmt.Errorf("fingerprint: must not contain control characters, got %q", id.Fingerprint))
	}
	if id.Header != nil {
		errs = append(errs, id.Header.validate("header")...)
	}
	return errors.Join(errs...)
}

// knownModel reports whether a request may name model: the configured name,
// which clients were set up with, or the name replies currently carry.
func (s *Simulator) knownModel(model string) bool {
	return model == s.cfg.Model || model == s.identity.Load().Model
}

// serveIdentity: GET shows the identity; PUT changes the keys its body
// (JSON or YAML) gives and keeps the others, so a test can drift one thing
// at a time: {"fingerprint": "fp_new"}. "header": {} removes the header.
func (s *Simulator) serveIdentity(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, s.Identity())
	case http.MethodPut, http.MethodPost:
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			s.writeError(w, badRequest("", "reading body: %v", err))
			return
		}
		var change struct {
			Model       *string       `yaml:"model"`
			Fingerprint *string       `yaml:"fingerprint"`
			Header      *HeaderConfig `yaml:"header"`
		}
		if err := strictyaml.Unmarshal(b, &change); err != nil {
			s.writeError(w, badRequest("", "invalid identity: %v", err))
			return
		}
		s.identityMu.Lock()
		defer s.identityMu.Unlock()
		id := s.Identity()
		if change.Model != nil {
			id.Model = *change.Model
		}
		if change.Fingerprint != nil {
			id.Fingerprint = *change.Fingerprint
		}
		switch h := change.Header; {
		case h == nil:
		case *h == HeaderConfig{}:
			id.Header = nil
		default:
			id.Header = h
		}
		if err := s.SetIdentity(id); err != nil {
			s.writeError(w, badRequest("", "invalid identity: %v", err))
			return
		}
		s.logger.Info("Identity changed", "identity", string(b))
		writeJSON(w, id)
	default:
		s.writeError(w, &requestError{status: http.StatusMethodNotAllowed, msg: "use GET or PUT"})
	}
}
