// Command sloprober is a Prometheus-native continuous SLO prober for LLM
// serving endpoints.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
)

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain parses the command line and runs the chosen command; it returns the
// process exit code.
func runMain(args []string, stdout, stderr io.Writer) int {
	app := kingpin.New("sloprober", "A Prometheus-native continuous SLO prober for LLM serving endpoints.")
	app.Version(version.Print("sloprober"))
	app.HelpFlag.Short('h')
	logConfig := &promslog.Config{Writer: stderr}
	promslogflag.AddFlags(app, logConfig)

	runCmd := newRunCommand(app)
	check := newCheckCommand(app)
	probe := newProbeCommand(app)
	sim := newSimCommand(app)
	wstats := newWorkloadStatsCommand(app)
	benchCmd := newBenchCommand(app)
	testCmd := newTestCommand(app)
	reportCmd := newReportCommand(app)
	health := newHealthcheckCommand(app)

	cmd, err := app.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v, try --help\n", err)
		return 2
	}
	logger := promslog.New(logConfig)
	switch cmd {
	case runCmd.cmd.FullCommand():
		return runCmd.run(logger)
	case check.cmd.FullCommand():
		return check.run(stdout, stderr)
	case probe.cmd.FullCommand():
		return probe.run(logger, stdout, stderr)
	case sim.cmd.FullCommand():
		return sim.run(logger)
	case wstats.cmd.FullCommand():
		return wstats.run(stdout, stderr)
	case benchCmd.cmd.FullCommand():
		return benchCmd.run(logger, stdout, stderr)
	case testCmd.cmd.FullCommand():
		return testCmd.run(logger, stdout, stderr)
	case reportCmd.show.FullCommand():
		return reportCmd.runShow(stdout, stderr)
	case reportCmd.compare.FullCommand():
		return reportCmd.runCompare(stdout, stderr)
	case reportCmd.canary.FullCommand():
		return reportCmd.runCanary(stdout, stderr)
	case health.cmd.FullCommand():
		return health.run(stderr)
	}
	return 0
}
