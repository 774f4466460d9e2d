package prober_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/prober"
)

// TestIdentity: who a server says it is (its Server header, the reply's
// model and system_fingerprint, its /v1/models list) is kept, bounded and
// made one printable line, whatever the server sends; the simulator
// states its own.
func TestIdentity(t *testing.T) {
	_, url := startSim(t, "")
	c := newClient(t, target(url))
	r := do(c, 1, 10, 2)
	require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
	require.Equal(t, "sim-model", r.Model)
	require.True(t, strings.HasPrefix(r.ServerHeader, "sloprober-sim"), r.ServerHeader)
	models, err := c.Models(t.Context())
	require.NoError(t, err)
	require.Len(t, models, 1)
	require.Equal(t, "sim-model", models[0].ID)

	long := strings.Repeat("x", 10_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/models") {
			var b strings.Builder
			b.WriteString(`{"data":[{"id":"a\u001b[31mred","owned_by":7,"max_model_len":-5},{"id":null},{"id":"` + long + `","max_model_len":1e300}`)
			for i := range 40 {
				fmt.Fprintf(&b, `,{"id":"m%d","max_model_len":4096}`, i)
			}
			b.WriteString(`]}`)
			fmt.Fprint(w, b.String())
			return
		}
		w.Header().Set("Server", "evil\t\xff"+long)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"model\":\"%s\",\"system_fingerprint\":\"fp_\\u2028x\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", long)
		fmt.Fprint(w, "data: {\"model\":\"second\",\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	c = newClient(t, target(srv.URL))
	r = do(c, 2, 10, 2)
	require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
	for _, s := range []string{r.ServerHeader, r.Model, r.SystemFingerprint} {
		require.LessOrEqual(t, len(s), prober.MaxIdentityBytes, s)
	}
	require.Regexp(t, `^x{119}~[0-9a-f]{8}$`, r.Model, "the first model, cut, with a hash of the whole")
	require.Equal(t, "fp_ x", r.SystemFingerprint, "a line separator is a space")
	models, err = c.Models(t.Context())
	require.NoError(t, err)
	require.Len(t, models, 16-1, "at most 16 entries, the one without an id left out")
	require.Equal(t, prober.ServedModel{ID: "a [31mred", Rewritten: true}, models[0], "an escape character is a space (not the id served: rewritten); an owner not a string and a negative length dropped")
	require.LessOrEqual(t, len(models[1].ID), prober.MaxIdentityBytes)
	require.True(t, models[1].Rewritten, "cut")
	require.False(t, models[2].Rewritten, "kept as it came")
	require.Zero(t, models[1].MaxModelLen, "1e300 is no context length")
	require.Equal(t, 4096, models[2].MaxModelLen)

	// A header line no client parses (a NUL) is quoted in net/http's
	// error: the error kept is bounded all the same.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "evil\x00"+long)
		w.Header().Set("Content-Type", "text/event-stream")
	}))
	defer bad.Close()
	r = do(newClient(t, target(bad.URL)), 3, 10, 2)
	require.NotEqual(t, prober.OutcomeOK, r.Outcome)
	require.Contains(t, r.Error(), "malformed MIME header")
	require.LessOrEqual(t, len(r.Error()), 600)
}
