// Package rules holds sloprober's Prometheus rules; its tests check them
// with promtool (Prometheus 3.x and 2.42) and end to end against a real
// Prometheus scraping a real sloprober.
package rules

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

// TestDashboards: every dashboard query (variables set to "All", as the
// end-to-end test sets them) is valid PromQL for Prometheus 2.42 and 3.x,
// checked by promtool as the expression of a recording rule, and every
// recorded series it names (level:metric:operations) is one of the rules'.
// The end-to-end test then requires each query to return data.
func TestDashboards(t *testing.T) {
	queries := dashboardQueries(t)
	require.NotEmpty(t, queries)
	recorded := map[string]bool{}
	for _, name := range recordNames(t) {
		recorded[name] = true
	}
	names := regexp.MustCompile(`\b[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]*[a-zA-Z0-9_]\b`)
	var file strings.Builder
	file.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	for i, q := range queries {
		for _, name := range names.FindAllString(q, -1) {
			require.True(t, recorded[name], "a dashboard query names %s, which no recording rule records: %s", name, q)
		}
		fmt.Fprintf(&file, "      - record: dashboard_query_%d\n        expr: %q\n", i, q)
	}
	rules := filepath.Join(t.TempDir(), "dashboards.rules.yml")
	require.NoError(t, os.WriteFile(rules, []byte(file.String()), 0o600))
	for version, tool := range promtools(t) {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(tool, "check", "rules", rules).CombinedOutput()
			require.NoError(t, err, "promtool check rules on the dashboards' queries:\n%s", out)
		})
	}
}
