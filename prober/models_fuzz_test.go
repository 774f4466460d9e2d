package prober

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseModels: whatever a /models reply holds, its parse ends, keeps
// at most maxServedModels, and every string it keeps is one bounded line
// of valid UTF-8 (a model id goes into configurations and reports).
func FuzzParseModels(f *testing.F) {
	f.Add([]byte(`{"data": [{"id": "m", "owned_by": "vllm", "root": "/models/m", "max_model_len": 4096}]}`))
	f.Add([]byte(`{"data": [{"id": "a\tb\u202e"}, {"id": 7}, {"max_model_len": 1e300}]}`))
	f.Add([]byte(`{"data": "nope"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		models, err := parseModels(b)
		if err != nil {
			return
		}
		if len(models) > maxServedModels {
			t.Fatalf("%d models kept", len(models))
		}
		for _, m := range models {
			for _, s := range []string{m.ID, m.OwnedBy, m.Root} {
				if len(s) > MaxIdentityBytes || !utf8.ValidString(s) || strings.ContainsAny(s, "\n\r\x1b\x00") {
					t.Fatalf("kept %q", s)
				}
			}
			if m.MaxModelLen < 0 || m.MaxModelLen > maxReportedTokens {
				t.Fatalf("max_model_len %d", m.MaxModelLen)
			}
		}
	})
}
