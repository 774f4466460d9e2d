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
	expandEnv *bool
}

func newCheckCommand(app *kingpin.Application) *checkCommand {
	check := app.Command("check", "Check configuration files.")
	c := &checkCommand{cmd: check.Command("config", "Validate configuration files; exit non-zero on error.")}
	c.files = c.cmd.Arg("config-files", "Configuration files to check.").Required().ExistingFiles()
	c.expandEnv = c.cmd.Flag("config.expand-env", "Expand ${VAR} references with environment variables first.").Default("false").Bool()
	return c
}

func (c *checkCommand) run(stdout, stderr io.Writer) int {
	code := 0
	for _, f := range *c.files {
		cfg, err := config.LoadFile(f, *c.expandEnv)
		if err != nil {
			fmt.Fprintf(stderr, "FAILED: %v\n", err)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "SUCCESS: %s is valid: %d targets, %d scenarios, %d canary loads\n",
			f, len(cfg.Targets), len(cfg.Scenarios), len(cfg.Canary))
	}
	return code
}
