package exporter_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/simulator/simtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startSim serves a simulator with cfg (YAML over the defaults) on 127.0.0.1
// and returns its OpenAI base URL.
func startSim(t *testing.T, cfg string) string {
	t.Helper()
	return simtest.Start(t, cfg).URL + "/v1"
}

// promtool returns the path of the promtool binary that `make test`
// installs (or $PROMTOOL). A missing promtool fails the test: the check it
// runs is part of the contract.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	if p, err := filepath.Abs("../.tools/bin/promtool"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool not found: run `make test` (it installs promtool into .tools/bin) or set $PROMTOOL")
	return p
}
