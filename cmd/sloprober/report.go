package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/report"
	"github.com/sloprober/sloprober/runstore"
)

// reportCommand is `sloprober report show` and `sloprober report compare`.
type reportCommand struct {
	show, compare *kingpin.CmdClause
	run           *string
	a, b          *string
	format        *string
	output        *string
	storage       *string
}

func newReportCommand(app *kingpin.Application) *reportCommand {
	rep := app.Command("report", "Capacity reports of step and soak runs: JSON, Markdown or self-contained HTML.")
	c := &reportCommand{}
	c.format = rep.Flag("format", "Report format: html, md or json.").Default("md").Enum(report.Formats...)
	c.output = rep.Flag("output", "Write the report to this file instead of the standard output.").Short('o').String()
	c.storage = rep.Flag("storage.path", "Directory of the stored runs (the daemon's --storage.path), for runs given by id.").Default("data/").String()
	c.show = rep.Command("show", "Write the report of one run.")
	c.run = c.show.Arg("run", "A run's id in --storage.path (see /api/v1/runs), or a run file written by `test run --json`.").Required().String()
	c.compare = rep.Command("compare", "Set the reports of two runs side by side: their numbers, and what changed in the test object and the load model (md or json).")
	c.a = c.compare.Arg("a", "The first run (the baseline): an id or a file.").Required().String()
	c.b = c.compare.Arg("b", "The second run: an id or a file.").Required().String()
	return c
}

// readRun reads a run given as a file, else as an id in the storage
// directory.
func (c *reportCommand) readRun(arg string) (*capacity.Run, string, error) {
	if fi, err := os.Stat(arg); err == nil && fi.Mode().IsRegular() {
		run, err := runstore.ReadFile(arg)
		if err != nil {
			return nil, "", fmt.Errorf("reading the run file %s: %w", arg, err)
		}
		return run, "", nil
	}
	run, err := runstore.Read(*c.storage, runstore.ID(arg))
	if err != nil {
		return nil, "", fmt.Errorf("%s is no run file, nor a run in %s: %w", arg, *c.storage, err)
	}
	return run, arg, nil
}

func (c *reportCommand) runShow(stdout, stderr io.Writer) int {
	run, id, err := c.readRun(*c.run)
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return exitError
	}
	var b bytes.Buffer
	if err := report.Write(&b, report.Build(run, id), *c.format); err != nil {
		fmt.Fprintf(stderr, "sloprober: writing the report: %v\n", err)
		return exitError
	}
	return c.emit(b.Bytes(), stdout, stderr)
}

func (c *reportCommand) runCompare(stdout, stderr io.Writer) int {
	if !slices.Contains([]string{"md", "json"}, *c.format) {
		fmt.Fprintf(stderr, "sloprober: report compare writes md or json, not %s\n", *c.format)
		return exitError
	}
	var reps []*report.Report
	for _, arg := range []string{*c.a, *c.b} {
		run, id, err := c.readRun(arg)
		if err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return exitError
		}
		reps = append(reps, report.Build(run, id))
	}
	cmp := report.Compare(reps[0], reps[1])
	var b bytes.Buffer
	if *c.format == "json" {
		j, err := json.MarshalIndent(cmp, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return exitError
		}
		b.Write(append(j, '\n'))
	} else if err := report.WriteComparison(&b, cmp); err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return exitError
	}
	return c.emit(b.Bytes(), stdout, stderr)
}

// emit writes a report to --output, or to stdout.
func (c *reportCommand) emit(b []byte, stdout, stderr io.Writer) int {
	if *c.output == "" {
		if _, err := stdout.Write(b); err != nil {
			return exitError
		}
		return 0
	}
	if err := os.WriteFile(*c.output, b, 0o644); err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stderr, "Wrote %s (%s)\n", *c.output, strings.ToUpper(*c.format))
	return 0
}
