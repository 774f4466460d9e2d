package main

import (
	"fmt"
	"io"

	"github.com/alecthomas/kingpin/v2"

	"github.com/sloprober/sloprober/workload"
)

// workloadStatsCommand is `sloprober workload stats`.
type workloadStatsCommand struct {
	cmd    *kingpin.CmdClause
	file   *string
	format *string
}

func newWorkloadStatsCommand(app *kingpin.Application) *workloadStatsCommand {
	w := app.Command("workload", "Inspect workloads.")
	c := &workloadStatsCommand{cmd: w.Command("stats", "Print what a load built from a trace file will look like: rate, burstiness, length quantiles, correlation, prefix reuse.")}
	c.file = c.cmd.Flag("file", "Trace file.").Required().String()
	c.format = c.cmd.Flag("format", "Trace format.").Required().Enum(workload.Formats...)
	return c
}

func (c *workloadStatsCommand) run(stdout, stderr io.Writer) int {
	t, err := workload.LoadTrace(*c.file, *c.format)
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s (%s)\n", *c.file, *c.format)
	workload.ComputeStats(t).WriteText(stdout)
	return 0
}
