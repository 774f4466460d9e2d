package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

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
	var r struct {
		Data []struct {
			ID          any `json:"id"`
			OwnedBy     any `json:"owned_by"`
			Root        any `json:"root"`
			MaxModelLen any `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a models list: %w", config.RedactURL(url), err)
	}
	str := func(v any) string {
		s, _ := v.(string)
		return boundIdentity(s)
	}
	var out []ServedModel
	for _, d := range r.Data[:min(len(r.Data), maxServedModels)] {
		m := ServedModel{ID: str(d.ID), OwnedBy: str(d.OwnedBy), Root: str(d.Root)}
		if n, ok := d.MaxModelLen.(float64); ok && n > 0 && n <= maxReportedTokens && n == float64(int(n)) {
			m.MaxModelLen = int(n)
		}
		if m.ID != "" {
			out = append(out, m)
		}
	}
	return out, nil
}
