package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/report"
	"github.com/sloprober/sloprober/report/canary"
	"github.com/sloprober/sloprober/runstore"
)

// reportCommand is `sloprober report show`, `report compare` and `report
// canary`.
type reportCommand struct {
	show, compare, canary *kingpin.CmdClause
	run                   *string
	a, b                  *string
	format                *string
	output                *string
	storage               *string
	prom                  canaryFlags
}

// canaryFlags are the flags of `report canary`.
type canaryFlags struct {
	url, rangeLength, end, selector *string
	targets, scenarios              *[]string
	timeout                         *time.Duration
	maxSeries                       *int
}

func newReportCommand(app *kingpin.Application) *reportCommand {
	rep := app.Command("report", "Capacity reports of step and soak runs (JSON, Markdown or self-contained HTML), and canary SLO reports from Prometheus.")
	c := &reportCommand{}
	c.format = rep.Flag("format", "Report format: html, md or json (canary: md or json).").Default("md").Enum(report.Formats...)
	c.output = rep.Flag("output", "Write the report to this file instead of the standard output; a Markdown report's charts go beside it as SVG files (report.md: report-evidence.svg, ...).").Short('o').String()
	c.storage = rep.Flag("storage.path", "Directory of the stored runs (the daemon's --storage.path), for runs given by id.").Default("data/").String()
	c.show = rep.Command("show", "Write the report of one run.")
	c.run = c.show.Arg("run", "A run's id in --storage.path (see /api/v1/runs), or a run file written by `test run --json`.").Required().String()
	c.compare = rep.Command("compare", "Set the reports of two runs side by side: their numbers, and what changed in the test object and the load model (md, json, or html with the charts side by side).")
	c.a = c.compare.Arg("a", "The first run (the baseline): an id or a file.").Required().String()
	c.b = c.compare.Arg("b", "The second run: an id or a file.").Required().String()
	c.canary = rep.Command("canary", "A canary SLO report from Prometheus: what the always-on canary (test=\"canary\") of each target and scenario sent and attained over a window, summed over every sloprober instance and shard, and whether every shard reported (md or json).")
	c.prom.url = c.canary.Flag("prometheus.url", "The Prometheus that scrapes sloprober: its base URL, e.g. http://127.0.0.1:9090 (basic auth as its userinfo).").Required().String()
	c.prom.rangeLength = c.canary.Flag("range", "The window's length, a Prometheus duration (1h, 24h, 7d).").Default("24h").String()
	c.prom.end = c.canary.Flag("end", "The window's end, RFC 3339 (2026-05-01T12:00:00Z) or Unix seconds; default now.").String()
	c.prom.targets = c.canary.Flag("target", "Report on this target only; repeatable.").Strings()
	c.prom.scenarios = c.canary.Flag("scenario", "Report on this scenario only; repeatable.").Strings()
	c.prom.selector = c.canary.Flag("selector", "Label matchers in braces that pick sloprober's series in Prometheus: its job, or the instances to include.").Default(canary.DefaultSelector).String()
	c.prom.timeout = c.canary.Flag("query.timeout", "How long each query may take, in Prometheus and waiting for it.").Default(canary.DefaultTimeout.String()).Duration()
	c.prom.maxSeries = c.canary.Flag("query.max-series", "The most series a query may return; beyond it the report fails, naming the query.").Default(strconv.Itoa(canary.DefaultMaxSeries)).Int()
	return c
}

// readRun reads a run given as a file, else as an id in the storage
// directory.
func (c *reportCommand) readRun(arg string) (*capacity.Run, error) {
	if fi, err := os.Stat(arg); err == nil && fi.Mode().IsRegular() {
		run, err := runstore.ReadFile(arg)
		if err != nil {
			return nil, fmt.Errorf("reading the run file %s: %w", arg, err)
		}
		return run, nil
	}
	run, err := runstore.Read(*c.storage, runstore.ID(arg))
	if err != nil {
		return nil, fmt.Errorf("%s is no run file, nor a run in %s: %w", arg, *c.storage, err)
	}
	return run, nil
}

func (c *reportCommand) runShow(stdout, stderr io.Writer) int {
	run, err := c.readRun(*c.run)
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return exitError
	}
	var b bytes.Buffer
	if *c.format == "md" && *c.output != "" {
		// Markdown to a file: its charts as SVG files beside it.
		return c.emitMarkdown(report.Build(run), stdout, stderr)
	}
	if err := report.Write(&b, report.Build(run), *c.format); err != nil {
		fmt.Fprintf(stderr, "sloprober: writing the report: %v\n", err)
		return exitError
	}
	if *c.format == "md" {
		fmt.Fprintln(stderr, "sloprober: the report's charts are in --format html, or as SVG files beside the Markdown with -o FILE.md")
	}
	return c.emit(b.Bytes(), stdout, stderr)
}

// emitMarkdown writes a Markdown report to --output and its charts
// beside it: report.md links report-evidence.svg and the others.
func (c *reportCommand) emitMarkdown(r *report.Report, stdout, stderr io.Writer) int {
	dir, base := filepath.Split(*c.output)
	var b bytes.Buffer
	files, err := report.WriteMarkdownWithCharts(&b, r, strings.TrimSuffix(base, filepath.Ext(base)))
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: writing the report: %v\n", err)
		return exitError
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), []byte(f.SVG), 0o644); err != nil {
			fmt.Fprintf(stderr, "sloprober: writing the report's chart: %v\n", err)
			return exitError
		}
	}
	return c.emit(b.Bytes(), stdout, stderr)
}

func (c *reportCommand) runCompare(stdout, stderr io.Writer) int {
	var reps []*report.Report
	for _, arg := range []string{*c.a, *c.b} {
		run, err := c.readRun(arg)
		if err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return exitError
		}
		reps = append(reps, report.Build(run))
	}
	cmp := report.Compare(reps[0], reps[1])
	var b bytes.Buffer
	var err error
	switch *c.format {
	case "json":
		var j []byte
		if j, err = json.MarshalIndent(cmp, "", "  "); err == nil {
			b.Write(append(j, '\n'))
		}
	case "html":
		err = report.WriteComparisonHTML(&b, cmp)
	default:
		err = report.WriteComparison(&b, cmp)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return exitError
	}
	return c.emit(b.Bytes(), stdout, stderr)
}

// runCanary writes a canary SLO report read from Prometheus; every
// failure (no Prometheus, a query refused, nothing matching) exits 2 with
// one line naming the URL, the query or the selector.
func (c *reportCommand) runCanary(stdout, stderr io.Writer) int {
	if !slices.Contains(canary.Formats, *c.format) {
		fmt.Fprintf(stderr, "sloprober: report canary writes %s, not %s\n", strings.Join(canary.Formats, " or "), *c.format)
		return exitError
	}
	opts, err := c.prom.options()
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return exitError
	}
	rep, err := canary.Build(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return exitError
	}
	var b bytes.Buffer
	if err := canary.Write(&b, rep, *c.format); err != nil {
		fmt.Fprintf(stderr, "sloprober: writing the report: %v\n", err)
		return exitError
	}
	return c.emit(b.Bytes(), stdout, stderr)
}

// options turns the flags into the report's options; report/canary checks
// the rest.
func (f *canaryFlags) options() (canary.Options, error) {
	length, err := model.ParseDuration(*f.rangeLength)
	if err != nil {
		return canary.Options{}, fmt.Errorf("--range %s: %w", *f.rangeLength, err)
	}
	end, err := parseTime(*f.end)
	if err != nil {
		return canary.Options{}, fmt.Errorf("--end %s: %w", *f.end, err)
	}
	return canary.Options{
		URL: *f.url, End: end, Range: time.Duration(length), Selector: *f.selector,
		Targets: *f.targets, Scenarios: *f.scenarios, Timeout: *f.timeout, MaxSeries: *f.maxSeries,
	}, nil
}

// parseTime reads a time as Prometheus's API does: RFC 3339, or Unix
// seconds with an optional fraction; "" is the zero time (now).
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1e11 {
		return time.Time{}, errors.New("want RFC 3339 (2026-05-01T12:00:00Z) or Unix seconds")
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
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
