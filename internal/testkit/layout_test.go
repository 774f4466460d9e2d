package testkit

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportRules: the rules of the house that the compiler does not
// keep. The prober and its configuration never link the simulator (the
// ground truth they are measured against; a fault plan is checked against
// the faults package alone); the daemon's test runs never import the web
// (the landing page's rows are built in cmd); no package of the program
// imports what only tests use.
func TestImportRules(t *testing.T) {
	const mod = "github.com/sloprober/sloprober/"
	for _, tc := range []struct {
		pkgs      []string
		forbidden []string
	}{
		{[]string{"prober", "config", "capacity", "workload"}, []string{"simulator"}},
		{[]string{"testrun"}, []string{"exporter"}},
		{[]string{"cmd/sloprober"}, []string{"internal/testkit"}},
	} {
		args := []string{"list", "-deps"}
		for _, p := range tc.pkgs {
			args = append(args, mod+p)
		}
		goCmd := os.Getenv("GO")
		if goCmd == "" {
			goCmd = "go"
		}
		out, err := exec.Command(goCmd, args...).Output()
		require.NoError(t, err, "go %s", strings.Join(args, " "))
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range tc.forbidden {
				require.False(t, dep == mod+f || strings.HasPrefix(dep, mod+f+"/"), "%v imports %s", tc.pkgs, dep)
			}
		}
	}
}
