package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/alecthomas/kingpin/v2"
)

// defaultHealthcheckURL is the liveness endpoint of `sloprober run` on its
// default port, over loopback: a container's health check runs inside the
// container, beside the daemon.
const defaultHealthcheckURL = "http://127.0.0.1:9477/-/healthy"

// healthcheckBodyLimit bounds what is read of an answer: enough for the
// first line of an error text, which goes into the reason.
const healthcheckBodyLimit = 512

// healthcheckCommand is `sloprober healthcheck`: one GET, exit 0 on a 2xx
// and 1 otherwise. Scratch and distroless images have no curl or wget, so a
// Docker HEALTHCHECK (CMD ["/bin/sloprober", "healthcheck"]) needs the binary
// itself to ask. Docker reserves exit code 2, so every failure of the check
// itself is 1; only a malformed command line exits 2, as in every command.
type healthcheckCommand struct {
	cmd      *kingpin.CmdClause
	url      *string
	timeout  *time.Duration
	insecure *bool
}

func newHealthcheckCommand(app *kingpin.Application) *healthcheckCommand {
	c := &healthcheckCommand{cmd: app.Command("healthcheck", "GET a URL (by default this host's /-/healthy) and exit 0 on a 2xx answer, 1 otherwise: a health check for images without curl.")}
	c.url = c.cmd.Flag("url", "The URL to GET. Basic auth credentials may be given as its userinfo (http://user:pass@host:port/-/healthy).").
		Default(defaultHealthcheckURL).String()
	c.timeout = c.cmd.Flag("timeout", "How long the whole request, answer included, may take.").Default("5s").Duration()
	c.insecure = c.cmd.Flag("tls.insecure-skip-verify", "Do not verify the server's certificate (a self-signed one of --web.config.file).").Default("false").Bool()
	return c
}

func (c *healthcheckCommand) run(stderr io.Writer) int {
	if err := healthcheck(*c.url, *c.timeout, *c.insecure); err != nil {
		fmt.Fprintf(stderr, "sloprober healthcheck: %v\n", err)
		return 1
	}
	return 0
}

// healthcheck GETs rawURL within timeout and returns nil on a 2xx answer,
// else one line saying why not. Redirects are not followed (a 3xx is no
// 2xx, as with curl -f) and no proxy is used: the check is of the server at
// the URL, not of whatever the environment routes through. The URL's
// password never appears in the reason.
func healthcheck(rawURL string, timeout time.Duration, insecure bool) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error quotes the URL, password and all
		}
		return fmt.Errorf("--url: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("--url %s: the scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("--url %s: no host", u.Redacted())
	}
	if timeout <= 0 {
		return fmt.Errorf("--timeout %s: must be positive", timeout)
	}
	transport := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: insecure}, //nolint:gosec // only with --tls.insecure-skip-verify
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{
		Transport:     transport,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("GET %s: %v", u.Redacted(), err)
	}
	req.Header.Set("User-Agent", "sloprober-healthcheck")
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			if uerr.Timeout() {
				return fmt.Errorf("GET %s: no answer within %s", u.Redacted(), timeout)
			}
			err = uerr.Err
		}
		return fmt.Errorf("GET %s: %v", u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, healthcheckBodyLimit))
	if err != nil {
		// A 200 whose body never ends is a server that hangs: the
		// whole answer is what --timeout bounds.
		var uerr *url.Error
		if errors.As(err, &uerr) && uerr.Timeout() || errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
			return fmt.Errorf("GET %s: %s, but its body did not end within %s", u.Redacted(), resp.Status, timeout)
		}
		return fmt.Errorf("GET %s: %s, but reading its body failed: %v", u.Redacted(), resp.Status, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	reason := fmt.Sprintf("GET %s: %s", u.Redacted(), resp.Status)
	if line := firstLine(body); line != "" {
		reason += ": " + line
	}
	return errors.New(reason)
}

// firstLine is the first non-empty line of b with control characters
// dropped, so that an answer's text keeps the reason on one line.
func firstLine(b []byte) string {
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(strings.Map(func(r rune) rune {
			if unicode.IsControl(r) || r == unicode.ReplacementChar {
				return -1
			}
			return r
		}, line))
		if line != "" {
			return line
		}
	}
	return ""
}
