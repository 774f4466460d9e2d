package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	commoncfg "github.com/prometheus/common/config"
	"go.yaml.in/yaml/v3"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// The starter configuration's names: `probe URL` sends its scenario, and
// `test run --target URL` runs its test.
const (
	starterScenario = "chat"
	starterTest     = "capacity"
)

// modelsTimeout bounds the GET of /models that finds the model of a
// target given by its URL.
const modelsTimeout = 15 * time.Second

// starter is an endpoint given on the command line (`init`, `probe URL`,
// `test run --target URL`): everything the starter configuration needs
// that is not a default.
type starter struct {
	url, api, model, bearerTokenFile string
	headers                          []string // "Name: value"
	// profile is the step test's: config.ProfileFirstLook or
	// config.ProfileSign.
	profile string
}

// starterComments are the profiles' comments above the test.
var starterComments = map[string]string{
	config.ProfileFirstLook: `  # sloprober test run %s: one request at a time, the knee of a closed-loop
  # sweep, then the open-loop rate kept at the objective: 0.6x and 0.8x of
  # the closed loop's, then bisection up to its throughput. A first look:
  # a level stops as soon as it is decided (20 s windows of 2 s batches,
  # up to 60 s); a number to sign: --profile sign (about an hour).
`,
	config.ProfileSign: `  # sloprober test run %s: a number to sign: one request at a time, the
  # knee of a closed-loop sweep refined twice, then the open-loop rate kept
  # at the objective: 0.5x and 0.8x of the closed loop's, then bisection to
  # 3%% of it (up to its throughput). A level stops as soon as it is
  # decided (2 min windows of 12 s batches, up to 6 min; the open-loop
  # search's up to 12 min: next to the objective it needs the requests).
`,
}

// addStarterFlags adds the flags that describe an endpoint given by URL.
func addStarterFlags(cmd *kingpin.CmdClause) *starter {
	s := &starter{}
	cmd.Flag("api", "The endpoint's API: chat, completions, responses or messages. Default: from the URL's path when it ends with one (/v1/chat/completions is chat), else chat.").
		EnumVar(&s.api, "chat", "completions", "responses", "messages")
	cmd.Flag("model", "The model to ask for. Default: the first model the endpoint lists at /models.").StringVar(&s.model)
	cmd.Flag("bearer-token-file", "File holding a bearer token sent as `Authorization: Bearer <token>` (the file is read at each request, never copied into a configuration).").StringVar(&s.bearerTokenFile)
	cmd.Flag("header", "A header to send with every request, as 'Name: value'; repeatable. `init` never writes its value: its configuration names an environment variable (SLOPROBER_HEADER_<NAME>) read with --config.expand-env.").StringsVar(&s.headers)
	return s
}

// addProfileFlag adds --profile, the step test's profile of an endpoint
// given by URL (`init`, `test run`).
func (s *starter) addProfileFlag(cmd *kingpin.CmdClause) {
	cmd.Flag("profile", "The step test's profile, with --target: first-look (short windows: minutes) or sign (a number to sign: 2-minute windows up to 6 minutes a level, 12 in the open-loop search, refined; about an hour). The estimate of its duration is printed as it starts.").
		EnumVar(&s.profile, config.Profiles...)
}

// unused reports an error when a flag describing an endpoint by URL was
// given without the URL.
func (s *starter) unused() error {
	if s.api != "" || s.model != "" || s.bearerTokenFile != "" || len(s.headers) > 0 {
		return errors.New("--api, --model, --bearer-token-file and --header describe an endpoint given by URL: with a configuration file, set them in its target")
	}
	if s.profile != "" {
		return errors.New("--profile chooses the step test of an endpoint given by URL (--target): with a configuration file, set its test's windows")
	}
	return nil
}

// parseURL checks raw and returns the base URL (the API's path cut off)
// and the API its path names ("" for none).
func parseURL(raw string) (base, api string, err error) {
	if !strings.Contains(raw, "://") {
		return "", "", fmt.Errorf("target URL %q: must be http:// or https:// with a host, e.g. http://127.0.0.1:8000/v1", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("target URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", "", fmt.Errorf("target URL %q: must be http:// or https:// with a host, e.g. http://127.0.0.1:8000/v1", raw)
	}
	if u.User != nil {
		u.User = nil // a user name alone may be a token: never printed
		return "", "", fmt.Errorf("target URL %s (with user information left out here): credentials in the URL would be written into configurations and logs: use --bearer-token-file or --header", u.Redacted())
	}
	// The API's path, as copied from a server's documentation: the API
	// is detected from it, and it is cut (sloprober appends it itself).
	u.Path, api, _ = config.CutAPIPath(u.Path)
	u.RawPath = ""
	return u.String(), api, nil
}

// targetName is a target name ([a-zA-Z0-9_-]+) made of the URL's host
// and its port where it names one: two servers on one host
// (http://127.0.0.1:8000 and :8001) are two targets, 127-0-0-1-8000 and
// 127-0-0-1-8001, whose stored runs are never mixed up.
func targetName(base string) string {
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return "target"
	}
	name := strings.Trim(nonName.ReplaceAllString(u.Hostname(), "-"), "-")
	if name == "" {
		name = "target" // a host of no ASCII letter or digit
	}
	if p := u.Port(); p != "" {
		name += "-" + p
	}
	return name
}

var nonName = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// headerName is an HTTP header name (RFC 9110's token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// redactHeader is a --header argument for an error message: its name,
// never its value.
func redactHeader(h string) string {
	if name, _, ok := strings.Cut(h, ":"); ok {
		return name + ": <value>"
	}
	return h
}

type header struct{ name, value string }

// parsedHeaders are the --header arguments (checked by resolve).
func (s *starter) parsedHeaders() []header {
	var hs []header
	for _, h := range s.headers {
		name, value, _ := strings.Cut(h, ":")
		hs = append(hs, header{strings.TrimSpace(name), strings.TrimSpace(value)})
	}
	return hs
}

// headerEnv is the environment variable `init` names for a header's
// value: SLOPROBER_HEADER_X_API_KEY for X-Api-Key.
func headerEnv(name string) string {
	return "SLOPROBER_HEADER_" + strings.ToUpper(nonEnv.ReplaceAllString(name, "_"))
}

var nonEnv = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// resolve checks the endpoint's description and completes it: the API
// from the URL's path, the model from the endpoint's /models.
func (s *starter) resolve(ctx context.Context, raw string) error {
	base, api, err := parseURL(raw)
	if err != nil {
		return err
	}
	s.url = base
	if s.api == "" {
		s.api = cmp.Or(api, "chat")
	}
	if err := s.checkHeaders(); err != nil {
		return err
	}
	if s.bearerTokenFile != "" {
		abs, err := filepath.Abs(s.bearerTokenFile)
		if err != nil {
			return fmt.Errorf("--bearer-token-file %q: %w", s.bearerTokenFile, err)
		}
		s.bearerTokenFile = abs
	}
	if s.model == "" {
		if s.model, err = s.servedModel(ctx); err != nil {
			return err
		}
	}
	if strings.Contains(s.model, "${") || strings.Contains(s.url, "${") {
		// --config.expand-env expands text: a server's model name would
		// become an environment variable's value, sent in every request.
		return fmt.Errorf("the model %q or the URL holds ${...}, which --config.expand-env would expand: give --model, or write the configuration by hand", s.model)
	}
	if _, err := s.config(s.model); err != nil {
		return fmt.Errorf("%w (give the model with --model)", err)
	}
	return nil
}

// checkHeaders checks --header: 'Name: value', a header name, a value
// that a configuration can hold and ${VAR} expansion keeps as it is (no
// line break, backslash or double quote), and not a header prometheus/common
// reserves (Authorization: use --bearer-token-file).
func (s *starter) checkHeaders() error {
	vars := map[string]string{} // the environment variable of each header, and whose it is
	for _, h := range s.headers {
		name, value, ok := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok || name == "" || value == "":
			return fmt.Errorf("--header %q: must be 'Name: value'", redactHeader(h))
		case !headerName.MatchString(name):
			return fmt.Errorf("--header %q: %q is not a header name", redactHeader(h), name)
		case strings.EqualFold(name, "Authorization"):
			return fmt.Errorf("--header %s: give a bearer token with --bearer-token-file (prometheus/common sets Authorization itself)", name)
		case strings.ContainsAny(value, "\r\n\x00\\\""):
			return fmt.Errorf("--header %s: the value holds a line break, NUL, backslash or double quote, which a configuration's ${VAR} expansion would not keep: write that header into the configuration by hand", name)
		}
		if other, ok := vars[headerEnv(name)]; ok {
			// X-K and X_K: one variable could not hold both values.
			return fmt.Errorf("--header %s and --header %s would both be read from %s: write them into the configuration by hand", other, name, headerEnv(name))
		}
		vars[headerEnv(name)] = name
		hs := commoncfg.Headers{Headers: map[string]commoncfg.Header{name: {Secrets: []commoncfg.Secret{"x"}}}}
		if err := hs.Validate(); err != nil {
			return fmt.Errorf("--header %s: %w", name, err)
		}
	}
	return nil
}

// servedModel is the first model the endpoint lists at /models, read with
// the target's own client (its credentials, its bounds) from a
// configuration naming a placeholder.
func (s *starter) servedModel(ctx context.Context) (string, error) {
	cfg, err := s.config("placeholder")
	if err != nil {
		return "", err
	}
	client, err := prober.NewClient(cfg.Targets[0], userAgent(), 1)
	if err != nil {
		return "", err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, modelsTimeout)
	defer cancel()
	models, err := client.Models(ctx)
	if err == nil && len(models) == 0 {
		err = errors.New("it lists no model")
	}
	if err != nil {
		return "", fmt.Errorf("reading the model from %s/models: %w (give it with --model)", config.RedactURL(s.url), err)
	}
	if m := models[0]; m.Rewritten {
		// The prober bounds what a server says of itself: a name with
		// control characters, or longer than MaxIdentityBytes, came back
		// cleaned or shortened, and is not the served one.
		return "", fmt.Errorf("the model %s/models lists first (%q as kept) holds control characters or is longer than %d bytes: give it with --model",
			config.RedactURL(s.url), m.ID, prober.MaxIdentityBytes)
	}
	return models[0].ID, nil
}

// config is the starter configuration for model, loaded as a file is.
func (s *starter) config(model string) (*config.Config, error) {
	m := *s
	m.model = model
	cfg, err := config.Load([]byte(m.yaml("", false)), false)
	if err != nil {
		return nil, fmt.Errorf("the configuration of %s: %w", config.RedactURL(s.url), err)
	}
	// The headers are set after loading, as secrets: their values are in
	// no text, hash or log.
	if hs := s.parsedHeaders(); len(hs) > 0 {
		headers := &commoncfg.Headers{Headers: map[string]commoncfg.Header{}}
		for _, h := range hs {
			hdr := headers.Headers[h.name]
			hdr.Secrets = append(hdr.Secrets, commoncfg.Secret(h.value))
			headers.Headers[h.name] = hdr
		}
		cfg.Targets[0].HTTPClientConfig.HTTPHeaders = headers
	}
	return cfg, nil
}

// quote is v as a YAML scalar (quoted where YAML needs it).
func quote(v string) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%q", v)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// yaml is the starter configuration: a target, one scenario with SLOs, a
// canary load and a step test, each commented. Headers are written only
// if headersAsEnv, each naming an environment variable (headerEnv), never
// their value. The SLOs are a chat
// service's (first token within 2 s, 100 ms a token after it: 10
// tokens/s, faster than reading), to be replaced by the service's own.
func (s *starter) yaml(header string, headersAsEnv bool) string {
	name := targetName(s.url)
	var b strings.Builder
	b.WriteString(header)
	fmt.Fprintf(&b, `targets:
  - name: %s
    url: %s
    api: %s          # chat, completions, responses or messages
    model: %s
    replicas: 1         # serving replicas behind the URL: a report divides capacity by it
`, name, quote(s.url), s.api, quote(s.model))
	profile := cmp.Or(s.profile, config.ProfileFirstLook)
	if m := config.ProfileMaxInFlight(profile); m != config.DefaultTargetConfig.MaxInFlight {
		fmt.Fprintf(&b, "    max_in_flight: %d  # twice the sweep's most clients: open-loop levels near capacity hold more\n", m)
	}
	if s.bearerTokenFile != "" {
		fmt.Fprintf(&b, "    authorization: {type: Bearer, credentials_file: %s}\n", quote(s.bearerTokenFile))
	}
	if len(s.headers) > 0 && headersAsEnv {
		// A header's value may be a secret: the file names an environment
		// variable, expanded by --config.expand-env.
		b.WriteString("    http_headers:       # values from the environment: run with --config.expand-env\n")
		for _, h := range s.parsedHeaders() {
			fmt.Fprintf(&b, "      %s: {secrets: [%s]}\n", quote(h.name), strconv.Quote("${"+headerEnv(h.name)+"}"))
		}
	}
	fmt.Fprintf(&b, `scenarios:
  # One request shape and its SLOs: a request is good when it succeeds and
  # meets every SLO; goodput counts good requests a second.
  - name: %s
    input_tokens: 512
    output_tokens: 128
    slo: {ttft: 2s, tpot: 100ms, e2e: 30s}
    objective: 0.95     # the share of requests that must be good
canary:
  # A low open-loop load, day and night (sloprober run): one request in 10 s.
  - {target: %s, scenario: %s, rate: 0.1}
tests:
`, starterScenario, name, starterScenario)
	fmt.Fprintf(&b, starterComments[profile], starterTest)
	fmt.Fprintf(&b, `  - name: %s
    kind: step
    target: %s
    scenario: %s
`, starterTest, name, starterScenario)
	b.WriteString(config.StepProfile(profile))
	return b.String()
}
