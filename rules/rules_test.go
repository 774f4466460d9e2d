// Package rules holds sloprober's Prometheus rules; its tests check them
// with promtool (Prometheus 3.x and 2.42) and end to end against a real
// Prometheus scraping a real sloprober.
package rules

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// promtools returns the promtool binaries to check the rules with: the
// Prometheus 3.x one that `make test` installs ($PROMTOOL) and Debian's
// Prometheus 2.42 one ($PROMTOOL_2, or promtool on the PATH).
func promtools(t *testing.T) map[string]string {
	t.Helper()
	tools := map[string]string{}
	p3 := os.Getenv("PROMTOOL")
	if p3 == "" {
		p3, _ = filepath.Abs("../.tools/bin/promtool")
	}
	_, err := os.Stat(p3)
	require.NoError(t, err, "Prometheus 3.x promtool not found: run `make test`, or set $PROMTOOL")
	tools["3.x"] = p3
	p2 := os.Getenv("PROMTOOL_2")
	if p2 == "" {
		p2, err = exec.LookPath("promtool")
		if err == nil && p2 == p3 {
			err = os.ErrNotExist
		}
		require.NoError(t, err, "Prometheus 2.42 promtool not found: run `make test` (it installs Debian's prometheus), or set $PROMTOOL_2")
	}
	tools["2.42"] = p2
	return tools
}

// TestPromtool: the rules load in Prometheus 2.42 and 3.x, and every unit
// test in tests/ passes with both.
func TestPromtool(t *testing.T) {
	tests, err := filepath.Glob("tests/*.yml")
	require.NoError(t, err)
	require.NotEmpty(t, tests)
	for version, tool := range promtools(t) {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(tool, "check", "rules", "sloprober.rules.yml").CombinedOutput()
			require.NoError(t, err, "promtool check rules:\n%s", out)
			out, err = exec.Command(tool, append([]string{"test", "rules"}, tests...)...).CombinedOutput()
			require.NoError(t, err, "promtool test rules:\n%s", out)
		})
	}
}
