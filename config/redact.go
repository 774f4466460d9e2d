package config

import (
	"fmt"
	"net/url"
	"strings"

	commoncfg "github.com/prometheus/common/config"
	"go.yaml.in/yaml/v2"
)

// String renders the configuration as YAML, secrets replaced by <secret>
// and the passwords of URLs by xxxxx (RedactURL): target and engine-metrics
// URLs and OAuth2 token URLs here, proxy URLs by prometheus/common.
func (c *Config) String() string {
	cc := *c
	cc.Targets = make([]*TargetConfig, len(c.Targets))
	for i, t := range c.Targets {
		if t != nil {
			tc := *t
			tc.URL = RedactURL(t.URL)
			tc.HTTPClientConfig.OAuth2 = redactOAuth2(t.HTTPClientConfig.OAuth2)
			if sm := t.ServerMetrics; sm != nil {
				smc := *sm
				smc.URL = RedactURL(sm.URL)
				smc.HTTPClientConfig.OAuth2 = redactOAuth2(sm.HTTPClientConfig.OAuth2)
				tc.ServerMetrics = &smc
			}
			t = &tc
		}
		cc.Targets[i] = t
	}
	b, err := yaml.Marshal(&cc)
	if err != nil {
		return fmt.Sprintf("<error creating config string: %s>", err)
	}
	return string(b)
}

// redactOAuth2 returns a copy of o with its token URL's password redacted.
func redactOAuth2(o *commoncfg.OAuth2) *commoncfg.OAuth2 {
	if o == nil {
		return nil
	}
	oc := *o
	oc.TokenURL = RedactURL(o.TokenURL)
	return &oc
}

// redactedPassword replaces a URL's password where it is shown. It is what
// net/url's URL.Redacted writes, so every output of sloprober, logs
// included, looks the same.
const redactedPassword = "xxxxx"

// RedactURL returns s with the password of its userinfo replaced by xxxxx:
// http://user:s3cr3t@host/v1 becomes http://user:xxxxx@host/v1. Use it
// wherever a URL from a configuration or a server is shown (the /config
// page, the landing page, logs, errors, `probe`). A user name alone is
// kept: it is how a target is told apart. A string that net/url cannot
// parse is redacted from its text, "scheme://user:password@": an error
// about a bad URL must not show the password either.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redactedPassword)
			return u.String()
		}
		if u.User != nil || !strings.Contains(s, "@") {
			return s
		}
	}
	// Unparsable, or parsed without userinfo although it has an @
	// ("user:pass@host/v1" parses as scheme "user"): the authority runs
	// from after "//" (or the start) to the first /, ? or #, and its
	// userinfo up to the last @ in it.
	start := 0
	if i := strings.Index(s, "//"); i >= 0 {
		start = i + 2
	}
	auth := s[start:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	at := strings.LastIndex(auth, "@")
	colon := strings.Index(auth, ":")
	if at < 0 || colon < 0 || colon > at {
		return s
	}
	return s[:start+colon+1] + redactedPassword + s[start+at:]
}
