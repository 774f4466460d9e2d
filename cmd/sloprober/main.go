// Command sloprober is a Prometheus-native continuous SLO prober for LLM
// serving endpoints.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
)

func main() {
	os.Exit(runMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Exit))
}

// runMain parses the command line and runs the chosen command; it returns
// the process exit code. It is the whole program, as main runs it and as
// the tests run it in-process (alertmanager's app does the same): ctx
// done stops a daemon or a test run as SIGTERM does, and exit is what a
// daemon calls when its stop outlasts its deadline (os.Exit in main; a
// test's records it instead of ending the test binary).
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer, exit func(int)) int {
	app := kingpin.New("sloprober", "A Prometheus-native continuous SLO prober for LLM serving endpoints.")
	app.Version(version.Print("sloprober"))
	app.HelpFlag.Short('h')
	logConfig := &promslog.Config{Writer: stderr}
	promslogflag.AddFlags(app, logConfig)

	runCmd := newRunCommand(app)
	check := newCheckCommand(app)
	probe := newProbeCommand(app)
	// init beside probe in --help: a new user's first commands.
	initCmd := newInitCommand(app)
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
		return runCmd.run(ctx, logger, exit)
	case check.cmd.FullCommand():
		return check.run(stdout, stderr)
	case probe.cmd.FullCommand():
		return probe.run(ctx, logger, stdout, stderr)
	case sim.cmd.FullCommand():
		return sim.run(ctx, logger)
	case wstats.cmd.FullCommand():
		return wstats.run(stdout, stderr)
	case benchCmd.cmd.FullCommand():
		return benchCmd.run(ctx, logger, stdout, stderr)
	case testCmd.cmd.FullCommand():
		testCmd.logConfig = logConfig
		return testCmd.run(ctx, logger, stdout, stderr)
	case reportCmd.show.FullCommand():
		return reportCmd.runShow(stdout, stderr)
	case reportCmd.compare.FullCommand():
		return reportCmd.runCompare(stdout, stderr)
	case reportCmd.canary.FullCommand():
		return reportCmd.runCanary(stdout, stderr)
	case health.cmd.FullCommand():
		return health.run(stderr)
	case initCmd.cmd.FullCommand():
		return initCmd.run(ctx, stdout, stderr)
	}
	return 0
}
