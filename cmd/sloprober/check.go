package main

import (
	"fmt"
	"io"

	"github.com/alecthomas/kingpin/v2"

	"github.com/sloprober/sloprober/config"
)

// checkCommand is `sloprober check config FILE...`.
type checkCommand struct {
	cmd       *kingpin.CmdClause
	files     *[]string
	flagFiles *[]string
	expandEnv *bool
}

func newCheckCommand(app *kingpin.Application) *checkCommand {
	check := app.Command("check", "Check configuration files.")
	c := &checkCommand{cmd: check.Command("config", "Validate configuration files; exit non-zero on error.")}
	c.files = c.cmd.Arg("config-files", "Configuration files to check.").ExistingFiles()
	// Every other command names its file with --config.file: so may this
	// one, once or more, beside the arguments.
	c.flagFiles = c.cmd.Flag("config.file", "A configuration file to check (repeatable; the same as an argument).").ExistingFiles()
	c.expandEnv = c.cmd.Flag("config.expand-env", "Expand ${VAR} references with environment variables first.").Default("false").Bool()
	return c
}

func (c *checkCommand) run(stdout, stderr io.Writer) int {
	files := append(append([]string(nil), *c.flagFiles...), *c.files...)
	if len(files) == 0 {
		fmt.Fprintln(stderr, "sloprober: no configuration file to check: sloprober check config FILE... (or --config.file FILE)")
		return 2
	}
	code := 0
	for _, f := range files {
		cfg, err := config.LoadFile(f, *c.expandEnv)
		if err != nil {
			fmt.Fprintf(stderr, "FAILED: %v\n", err)
			code = 1
			continue
		}
		if len(cfg.Targets) == 0 {
			// Valid, and probing nothing: an empty file, or the wrong one.
			fmt.Fprintf(stderr, "FAILED: %s: no targets: it probes nothing (sloprober init --target URL writes a starter)\n", f)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "SUCCESS: %s is valid: %s, %s, %s, %s\n", f, count(len(cfg.Targets), "target"),
			count(len(cfg.Scenarios), "scenario"), count(len(cfg.Canary), "canary load"), count(len(cfg.Tests), "test"))
	}
	return code
}

// count writes a number of things: "1 target", "3 targets".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
