package gpu

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
)

// Config is a target's gpu section: where the GPU readings of a capacity
// test's windows come from. Exactly one of Prometheus and Exporter.
type Config struct {
	// Prometheus reads the GPUs through a Prometheus that scrapes
	// dcgm-exporter, by instant queries.
	Prometheus *PrometheusSource `yaml:"prometheus,omitempty"`
	// Exporter reads a dcgm-exporter's /metrics directly.
	Exporter *ExporterSource `yaml:"exporter,omitempty"`
	// Names are the metric names read; each empty one is its default.
	Names Names `yaml:"names,omitempty"`
	// Interval is how often the GPUs are read during a window. Default 5s.
	Interval model.Duration `yaml:"interval,omitempty"`
	// Timeout bounds one read (all the queries of a Prometheus read
	// together), at most the interval. Default 3s, or the interval where
	// that is shorter.
	Timeout model.Duration `yaml:"timeout,omitempty"`
}

// PrometheusSource is a Prometheus whose instant-query API serves
// dcgm-exporter's series.
type PrometheusSource struct {
	// URL is the Prometheus server, e.g. http://127.0.0.1:9090 (the API
	// path /api/v1/query is appended).
	URL string `yaml:"url"`
	// Selector picks the GPUs of this target among all the DCGM series,
	// a PromQL label-matcher set such as {Hostname="gpu-node-1"} or
	// {pod=~"vllm-.*"}. Empty: every series of each name.
	Selector string `yaml:"selector,omitempty"`
	// HTTPClientConfig is prometheus/common's (auth, TLS, proxy).
	HTTPClientConfig commoncfg.HTTPClientConfig `yaml:",inline"`
}

// ExporterSource is a dcgm-exporter's metrics endpoint.
type ExporterSource struct {
	// URL is the endpoint, e.g. http://127.0.0.1:9400/metrics.
	URL string `yaml:"url"`
	// HTTPClientConfig is prometheus/common's (auth, TLS, proxy).
	HTTPClientConfig commoncfg.HTTPClientConfig `yaml:",inline"`
}

// Names are the metric names read, dcgm-exporter's by default. A renamed
// metric (a recording rule, a relabelling) must keep dcgm-exporter's unit.
type Names struct {
	// Utilization is the GPU utilisation in percent, 0-100.
	Utilization string `yaml:"utilization,omitempty"`
	// EngineActive is the ratio of time the graphics engine is active,
	// 0-1: the utilisation of MIG instances, which have no Utilization.
	EngineActive string `yaml:"engine_active,omitempty"`
	// MemoryUsed and MemoryFree are the framebuffer memory in MiB.
	MemoryUsed string `yaml:"memory_used,omitempty"`
	MemoryFree string `yaml:"memory_free,omitempty"`
	// Power is the power draw in watts.
	Power string `yaml:"power,omitempty"`
}

// DefaultNames are dcgm-exporter's names (its default-counters.csv has
// all but DCGM_FI_PROF_GR_ENGINE_ACTIVE, which dcp-metrics-included.csv
// adds and which is the only utilisation of a MIG instance).
var DefaultNames = Names{
	Utilization:  "DCGM_FI_DEV_GPU_UTIL",
	EngineActive: "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
	MemoryUsed:   "DCGM_FI_DEV_FB_USED",
	MemoryFree:   "DCGM_FI_DEV_FB_FREE",
	Power:        "DCGM_FI_DEV_POWER_USAGE",
}

// Defaults of the gpu section, and bounds of its interval.
const (
	DefaultInterval = 5 * time.Second
	DefaultTimeout  = 3 * time.Second
	// MinInterval: dcgm-exporter collects every 30 s by default
	// (DCGM_EXPORTER_INTERVAL, often set to 1-10 s for profiling), so
	// reading it faster than every second reads the same values again.
	MinInterval = time.Second
	MaxInterval = time.Hour
)

// SetDefaults fills what is left out: the names, the interval (5s) and
// the timeout (3s, or the interval where that is shorter), and
// prometheus/common's HTTP defaults of a source with none.
func (c *Config) SetDefaults() {
	n := &c.Names
	for _, p := range []struct {
		v *string
		d string
	}{
		{&n.Utilization, DefaultNames.Utilization},
		{&n.EngineActive, DefaultNames.EngineActive},
		{&n.MemoryUsed, DefaultNames.MemoryUsed},
		{&n.MemoryFree, DefaultNames.MemoryFree},
		{&n.Power, DefaultNames.Power},
	} {
		if *p.v == "" {
			*p.v = p.d
		}
	}
	if c.Interval == 0 {
		c.Interval = model.Duration(DefaultInterval)
	}
	if c.Timeout == 0 {
		c.Timeout = min(model.Duration(DefaultTimeout), c.Interval)
	}
}

// UnmarshalYAML implements yaml.Unmarshaler: the section with its
// defaults (SetDefaults). Strictness (unknown keys) is the decoder's.
func (c *Config) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Config
	*c = Config{}
	if err := unmarshal((*plain)(c)); err != nil {
		return err
	}
	c.SetDefaults()
	return nil
}

// UnmarshalYAML implements yaml.Unmarshaler, with prometheus/common's
// HTTP defaults (follow_redirects, enable_http2).
func (s *PrometheusSource) UnmarshalYAML(unmarshal func(any) error) error {
	type plain PrometheusSource
	*s = PrometheusSource{HTTPClientConfig: commoncfg.DefaultHTTPClientConfig}
	return unmarshal((*plain)(s))
}

// UnmarshalYAML implements yaml.Unmarshaler, with prometheus/common's
// HTTP defaults (follow_redirects, enable_http2).
func (s *ExporterSource) UnmarshalYAML(unmarshal func(any) error) error {
	type plain ExporterSource
	*s = ExporterSource{HTTPClientConfig: commoncfg.DefaultHTTPClientConfig}
	return unmarshal((*plain)(s))
}

// Validate checks a section whose defaults are set. Each error names its
// key under "gpu" and the value refused; all of them are joined.
func (c *Config) Validate() error {
	const key = "gpu"
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", k, fmt.Sprintf(format, args...)))
	}
	switch {
	case (c.Prometheus == nil) == (c.Exporter == nil):
		bad(key, "set exactly one of prometheus and exporter")
	case c.Prometheus != nil:
		k := key + ".prometheus"
		if err := validateURL(c.Prometheus.URL); err != nil {
			bad(k+".url", "%v, got %q", err, redactURL(c.Prometheus.URL))
		}
		if err := ValidateSelector(c.Prometheus.Selector); err != nil {
			bad(k+".selector", "%v, got %q", err, c.Prometheus.Selector)
		}
		if err := c.Prometheus.HTTPClientConfig.Validate(); err != nil {
			bad(k, "%v", redactErr(err))
		}
	case c.Exporter != nil:
		k := key + ".exporter"
		if err := validateURL(c.Exporter.URL); err != nil {
			bad(k+".url", "%v, got %q", err, redactURL(c.Exporter.URL))
		}
		if err := c.Exporter.HTTPClientConfig.Validate(); err != nil {
			bad(k, "%v", redactErr(err))
		}
	}
	for _, n := range []struct{ k, v string }{
		{"utilization", c.Names.Utilization},
		{"engine_active", c.Names.EngineActive},
		{"memory_used", c.Names.MemoryUsed},
		{"memory_free", c.Names.MemoryFree},
		{"power", c.Names.Power},
	} {
		// The query is NAME{selector}: a name PromQL reads unquoted.
		if !model.IsValidLegacyMetricName(n.v) {
			bad(key+".names."+n.k, "must be a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), got %q", n.v)
		}
	}
	if d := time.Duration(c.Interval); d < MinInterval || d > MaxInterval {
		bad(key+".interval", "must be between %s and %s, got %s", MinInterval, model.Duration(MaxInterval), c.Interval)
	}
	if c.Timeout <= 0 || c.Timeout > c.Interval {
		bad(key+".timeout", "must be positive and at most the interval (%s), got %s", c.Interval, c.Timeout)
	}
	return errors.Join(errs...)
}

// validateURL checks an absolute http(s) URL without a password or a
// fragment.
func validateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an absolute http(s) URL")
	}
	if _, ok := u.User.Password(); ok {
		return errors.New("must not hold a password (use basic_auth with password_file)")
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return errors.New("must not have a #fragment, which is never sent")
	}
	return nil
}

// ValidateSelector checks a PromQL label-matcher set: empty, or
// {name op "value", ...} with op one of = != =~ !~, each name a label
// name (or a double-quoted UTF-8 one), each value a PromQL string
// literal ("..." or '...' with Go escapes, or `...`), each regular
// expression one Go's regexp (Prometheus's engine, RE2) compiles, and
// no __name__ matcher (the metric names are the section's). A trailing
// comma and an empty set {} are allowed, as in PromQL.
//
// github.com/prometheus/prometheus (whose parser would be the reference)
// is not a dependency of sloprober, so this is a careful subset: the
// grammar of a matcher set is small and fixed, and what passes here is
// sent inside NAME{...} to Prometheus, whose parser has the last word
// (a query it refuses is a failed read, with its error kept).
func ValidateSelector(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return errors.New(`must be a label-matcher set in braces, e.g. {Hostname="gpu-node-1"}`)
	}
	p := &selParser{s: s[1 : len(s)-1]}
	for {
		p.space()
		if p.done() {
			return nil
		}
		if err := p.matcher(); err != nil {
			return err
		}
		p.space()
		if p.done() {
			return nil
		}
		if !p.eat(",") {
			return fmt.Errorf("expected , or } at %q", p.rest())
		}
	}
}

type selParser struct {
	s string
	i int
}

func (p *selParser) done() bool   { return p.i >= len(p.s) }
func (p *selParser) rest() string { return p.s[p.i:] }

func (p *selParser) space() {
	for p.i < len(p.s) && strings.ContainsRune(" \t\r\n", rune(p.s[p.i])) {
		p.i++
	}
}

func (p *selParser) eat(tok string) bool {
	if strings.HasPrefix(p.rest(), tok) {
		p.i += len(tok)
		return true
	}
	return false
}

func (p *selParser) matcher() error {
	var name string
	if !p.done() && p.s[p.i] == '"' {
		v, err := p.str()
		if err != nil {
			return err
		}
		name = v
	} else {
		j := p.i
		for p.i < len(p.s) && (p.s[p.i] == '_' || p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= 'A' && p.s[p.i] <= 'Z' || p.i > j && p.s[p.i] >= '0' && p.s[p.i] <= '9') {
			p.i++
		}
		name = p.s[j:p.i]
	}
	if name == "" {
		return fmt.Errorf("expected a label name at %q", p.rest())
	}
	if name == model.MetricNameLabel {
		return errors.New("must not match __name__: the metric names are gpu.names")
	}
	p.space()
	var op string
	for _, o := range []string{"=~", "!~", "!=", "="} {
		if p.eat(o) {
			op = o
			break
		}
	}
	if op == "" {
		return fmt.Errorf("expected =, !=, =~ or !~ after %q", name)
	}
	p.space()
	v, err := p.str()
	if err != nil {
		return err
	}
	if op == "=~" || op == "!~" {
		if _, err := regexp.Compile("^(?s:" + v + ")$"); err != nil {
			return fmt.Errorf("invalid regular expression for %s: %v", name, err)
		}
	}
	return nil
}

// str reads a PromQL string literal.
func (p *selParser) str() (string, error) {
	if p.done() {
		return "", errors.New("expected a quoted value at the end")
	}
	q := p.s[p.i]
	switch q {
	case '`':
		end := strings.IndexByte(p.s[p.i+1:], '`')
		if end < 0 {
			return "", errors.New("unterminated `string`")
		}
		v := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		return v, nil
	case '"', '\'':
		j := p.i + 1
		for j < len(p.s) && p.s[j] != q {
			if p.s[j] == '\\' {
				j++
			}
			if j < len(p.s) && p.s[j] == '\n' {
				return "", errors.New("newline in a quoted value")
			}
			j++
		}
		if j >= len(p.s) {
			return "", fmt.Errorf("unterminated %c-quoted value", q)
		}
		lit := p.s[p.i : j+1]
		if q == '\'' { // strconv reads only "..." as a string
			lit = `"` + strings.ReplaceAll(strings.ReplaceAll(lit[1:len(lit)-1], `\'`, `'`), `"`, `\"`) + `"`
		}
		v, err := strconv.Unquote(lit)
		if err != nil {
			return "", fmt.Errorf("invalid quoted value %s", p.s[p.i:j+1])
		}
		p.i = j + 1
		return v, nil
	}
	return "", fmt.Errorf("expected a quoted value at %q", p.rest())
}

// userinfoPassword finds the password of a URL in a text (config's rule).
var userinfoPassword = regexp.MustCompile(`(//[^\s/?#@:"]*:)[^\s/?#"]*@`)

// redactURL replaces the password of a URL in s by xxxxx.
func redactURL(s string) string { return userinfoPassword.ReplaceAllString(s, "${1}xxxxx@") }

// redactErr redacts the URL passwords an error's text quotes.
func redactErr(err error) error {
	if msg := err.Error(); redactURL(msg) != msg {
		return errors.New(redactURL(msg))
	}
	return err
}
