package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/regularfile"
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
	c.starter.addProfileFlag(c.cmd)
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
	if u, err := url.Parse(c.starter.url); err == nil && u.RawQuery != "" {
		// A query may carry an API key (?key=, ?api-key=): never written.
		return fail(fmt.Errorf("--target %s has a query, which may hold a key and would be written into the file: init takes a URL without one (add it to the target's url by hand, from a secret)", config.RedactURL(c.starter.url[:strings.Index(c.starter.url, "?")])))
	}
	dest := "sloprober.yml" // as in `sloprober init --target URL > sloprober.yml`
	if *c.output != "" {
		dest = *c.output
	}
	// Header values come from the environment (never written):
	// every command reading the file then expands it.
	file, env := "--config.file="+dest, ""
	var envs []string
	for _, h := range c.starter.parsedHeaders() {
		envs = append(envs, headerEnv(h.name))
	}
	if len(envs) > 0 {
		file += " --config.expand-env"
		env = "# Set " + strings.Join(envs, ", ") + " (the --header values) in the environment first.\n"
	}
	text := c.starter.yaml(fmt.Sprintf(`# sloprober configuration for %s, written by sloprober init.
%s#   sloprober check config %s
#   sloprober probe %[3]s --target=%[4]s --scenario=%[5]s
#   sloprober test run %[6]s %[3]s
#   sloprober run %[3]s      (the canary; /metrics on :9477)
`, config.RedactURL(c.starter.url), env, file, targetName(c.starter.url), starterScenario, starterTest), true)
	// What is written is what check config accepts (with
	// --config.expand-env and the variables set, where it has some).
	if _, err := config.Load(config.EnvRef.ReplaceAll([]byte(text), []byte("set")), false); err != nil {
		return fail(fmt.Errorf("the starter configuration does not load (a bug): %w", err))
	}
	if *c.output == "" {
		fmt.Fprint(stdout, text)
		return 0
	}
	f, err := regularfile.Create(*c.output, *c.force)
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
	fmt.Fprintf(stderr, "Wrote %s: target %s, model %s, API %s. Next: sloprober check config %s\n", *c.output, targetName(c.starter.url), c.starter.model, c.starter.api, file)
	return 0
}
