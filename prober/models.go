package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/sloprober/sloprober/config"
)

// maxServedModels bounds the models kept of a /v1/models reply: a gateway
// in front of a whole fleet may list hundreds.
const maxServedModels = 16

// ServedModel is one model a target lists at /v1/models, as the server
// states it: who it says it is, for a report's test object.
type ServedModel struct {
	ID      string `json:"id"`
	OwnedBy string `json:"owned_by,omitempty"`
	// Root is what vLLM serves the model from (a path or repository id).
	Root string `json:"root,omitempty"`
	// MaxModelLen is vLLM's context length.
	MaxModelLen int `json:"max_model_len,omitempty"`
	// Rewritten: the server's id was not kept as it came (control
	// characters made spaces, or cut past MaxIdentityBytes): it is not
	// a name to send as the model.
	Rewritten bool `json:"-"`
}

// Models returns the models the target lists at /models: at most 16, each
// string bounded like every statement of a server about itself, within the
// calibration requests' bounds (10 s, 4 MiB).
func (c *Client) Models(ctx context.Context) ([]ServedModel, error) {
	url := joinPath(c.target.URL, "/models")
	b, err := c.call(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	models, err := parseModels(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.RedactURL(url), err)
	}
	return models, nil
}

// parseModels reads a /models reply: at most maxServedModels, each string
// bounded, an id the server sent as it was or marked Rewritten.
func parseModels(b []byte) ([]ServedModel, error) {
	var r struct {
		Data []struct {
			ID          any `json:"id"`
			OwnedBy     any `json:"owned_by"`
			Root        any `json:"root"`
			MaxModelLen any `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("not a models list: %w", err)
	}
	str := func(v any) string {
		s, _ := v.(string)
		return boundIdentity(s)
	}
	var out []ServedModel
	for _, d := range r.Data[:min(len(r.Data), maxServedModels)] {
		m := ServedModel{ID: str(d.ID), OwnedBy: str(d.OwnedBy), Root: str(d.Root)}
		raw, _ := d.ID.(string)
		m.Rewritten = m.ID != raw
		if n, ok := d.MaxModelLen.(float64); ok && n > 0 && n <= maxReportedTokens && n == float64(int(n)) {
			m.MaxModelLen = int(n)
		}
		if m.ID != "" {
			out = append(out, m)
		}
	}
	return out, nil
}

// maxSimulatorConfigBytes bounds the configuration a simulator states:
// the embedded default's is about 1 KiB.
const maxSimulatorConfigBytes = 64 << 10

// SimulatorConfig returns what a `sloprober sim` target states of its own
// configuration at /sim/config, beside its OpenAI base URL (the URL
// without its last path element: /v1), as compact JSON: two runs against
// the embedded simulator, whose port changes every run, are compared by
// it. Only a target configured as a simulator is asked.
func (c *Client) SimulatorConfig(ctx context.Context) (string, error) {
	url := editPath(c.target.URL, func(p string) string {
		p = strings.TrimRight(p, "/")
		return p[:max(strings.LastIndex(p, "/"), 0)] + "/sim/config" // the base URL's last element is the API version
	})
	b, err := c.call(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if len(b) > maxSimulatorConfigBytes {
		return "", fmt.Errorf("%s: reply longer than %d bytes", config.RedactURL(url), maxSimulatorConfigBytes)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("%s: not JSON: %w", config.RedactURL(url), err)
	}
	out, err := json.Marshal(v) // compact, keys sorted
	if err != nil {
		return "", err
	}
	return string(out), nil
}
