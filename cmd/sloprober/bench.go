package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/sloprober/sloprober/internal/bench"
	"github.com/sloprober/sloprober/prober"
)

// benchCommand is `sloprober bench`: the end-to-end load benchmark.
type benchCommand struct {
	cmd     *kingpin.CmdClause
	streams *string
	measure *time.Duration
	json    *string
	profile *string
	heap    *string
	long    *bool
	longFor *time.Duration
	reader  *string
	tls     *bool
}

func newBenchCommand(app *kingpin.Application) *benchCommand {
	c := &benchCommand{cmd: app.Command("bench", "Benchmark sloprober end to end against a simulator in a separate process (loopback only).")}
	c.streams = c.cmd.Flag("streams", "Comma-separated concurrency levels; 5000 and above use 100 ms between tokens, the others 20 ms.").
		Default("100,500,1000,2000,5000").String()
	c.measure = c.cmd.Flag("measure", "Measurement window of each level, after its warm-up.").Default("20s").Duration()
	c.json = c.cmd.Flag("json", "Also write the results as JSON to this file.").String()
	c.profile = c.cmd.Flag("cpuprofile", "Write a CPU profile of the whole run to this file (go tool pprof).").String()
	c.heap = c.cmd.Flag("memprofile", "Write a heap profile at the end of each level's measurement to this file.").String()
	c.long = c.cmd.Flag("long", "Instead of the levels, check schedule fidelity: Poisson arrivals at 500 req/s for --long.duration.").Default("false").Bool()
	c.longFor = c.cmd.Flag("long.duration", "How long the schedule-fidelity run sends.").Default("10m").Duration()
	c.reader = addReaderFlag(c.cmd)
	c.tls = c.cmd.Flag("tls", "Serve the simulator over TLS with a self-signed certificate for 127.0.0.1 (HTTP/1.1).").Default("false").Bool()
	return c
}

func (c *benchCommand) run(ctx context.Context, logger *slog.Logger, stdout, stderr io.Writer) int {
	var steps []bench.Step
	for _, f := range strings.Split(*c.streams, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "sloprober: --streams: %q is not a positive number\n", f)
			return 2
		}
		s := bench.Step{Streams: n, TTFT: 80 * time.Millisecond, ITL: 20 * time.Millisecond, Tokens: 200}
		if n >= 5000 {
			s.ITL = 100 * time.Millisecond
		}
		steps = append(steps, s)
	}
	binary, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return 1
	}
	if *c.profile != "" {
		f, err := os.Create(*c.profile)
		if err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	reader, err := prober.ParseReader(*c.reader)
	if err != nil {
		fmt.Fprintf(stderr, "sloprober: --prober.reader: %v\n", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	opts := bench.Options{Binary: binary, Steps: steps, Measure: *c.measure, Logger: logger, HeapProfile: *c.heap, Reader: reader, TLS: *c.tls}
	var results any
	if *c.long {
		f, err := bench.RunFidelity(ctx, opts, 500, *c.longFor)
		if err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "schedule fidelity: %.0f req/s Poisson for %.0fs: %d arrivals due, %d scheduled (%.3f%% off), %d sent, %d dropped, %d lags recorded, lag P50 %.3f ms, P99 %.3f ms, max %.3f ms\n",
			f.Rate, f.Seconds, f.Expected, f.Scheduled, f.OffPct, f.Sent, f.Dropped, f.Lags, f.LagP50MS, f.LagP99MS, f.LagMaxMS)
		results = f
	} else {
		rs, err := bench.Run(ctx, opts)
		bench.WriteTable(stdout, rs)
		if err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return 1
		}
		results = rs
	}
	if *c.json != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err == nil {
			err = os.WriteFile(*c.json, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "sloprober: %v\n", err)
			return 1
		}
	}
	return 0
}
