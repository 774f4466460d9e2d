package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/sloprober/sloprober/config"
)

// initCommand is `sloprober init --target URL`: a starter configuration
// for one endpoint, written where asked.
type initCommand struct {
	cmd     *kingpin.CmdClause
	target  *string
	output  *string
	force   *bool
	starter *starter
}

func newInitCommand(app *kingpin.Application) *initCommand {
	c := &initCommand{cmd: app.Command("init", "Write a commented starter configuration for an endpoint (a target, one scenario with SLOs, a canary load and a step test), its model read from the endpoint's /models.")}
	c.target = c.cmd.Flag("target", "The endpoint's OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (a full path such as .../v1/chat/completions also names the API).").Required().String()
	c.output = c.cmd.Flag("output", "File to write; standard output when not given. An existing file is not overwritten without --force.").Short('o').String()
	c.force = c.cmd.Flag("force", "Overwrite the --output file if it exists.").Bool()
	c.starter = addStarterFlags(c.cmd)
	return c
}

func (c *initCommand) run(ctx context.Context, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return 1
	}
	if err := c.starter.resolve(ctx, *c.target); err != nil {
		return fail(err)
	}
	dest := "sloprober.yml" // as in `sloprober init --target URL > sloprober.yml`
	if *c.output != "" {
		dest = *c.output
	}
	text := c.starter.yaml(fmt.Sprintf(`# sloprober configuration for %s, written by sloprober init.
#   sloprober check config %s
#   sloprober probe --config.file=%[2]s --target=%[3]s --scenario=%[4]s
#   sloprober test run %[5]s --config.file=%[2]s
#   sloprober run --config.file=%[2]s      (the canary; /metrics on :9477)
`, config.RedactURL(c.starter.url), dest, targetName(c.starter.url), starterScenario, starterTest))
	// What is written is what check config accepts.
	if _, err := config.Load([]byte(text), false); err != nil {
		return fail(fmt.Errorf("the starter configuration does not load (a bug): %w", err))
	}
	if *c.output == "" {
		fmt.Fprint(stdout, text)
		return 0
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if *c.force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(*c.output, flags, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fail(fmt.Errorf("--output %s exists: give --force to overwrite it", *c.output))
	}
	if err != nil {
		return fail(fmt.Errorf("--output: %w", err))
	}
	_, err = io.WriteString(f, text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(fmt.Errorf("--output %s: %w", *c.output, err))
	}
	fmt.Fprintf(stderr, "Wrote %s: target %s, model %s, API %s. Next: sloprober check config %s\n", *c.output, targetName(c.starter.url), c.starter.model, c.starter.api, *c.output)
	return 0
}
