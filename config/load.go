package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sloprober/sloprober/internal/regularfile"
	"github.com/sloprober/sloprober/internal/strictyaml"
	"github.com/sloprober/sloprober/workload"
)

// LoadFile reads, decodes and validates a configuration file. With expandEnv,
// ${VAR} references are replaced by environment variables first. Relative
// file paths in the configuration (trace files, TLS files, credentials) are
// resolved against the file's directory. Every error names the file. A
// file above MaxConfigFileBytes is rejected after reading one byte more
// than the limit, not the whole file.
func LoadFile(filename string, expandEnv bool) (*Config, error) {
	f, _, err := regularfile.Open(filename)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	c, err := Parse(b, expandEnv, filepath.Dir(filename))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return c, nil
}

// Load decodes a configuration strictly and validates it; relative paths
// are taken from the working directory.
func Load(b []byte, expandEnv bool) (*Config, error) {
	return Parse(b, expandEnv, "")
}

// errTooLarge is the error of a configuration above MaxConfigFileBytes.
var errTooLarge = fmt.Errorf("larger than the limit of %d bytes (4 MiB)", MaxConfigFileBytes)

// EnvRef is a ${VAR} reference, expanded with --config.expand-env: `init`
// writes them for credentials.
var EnvRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Parse decodes a configuration strictly, resolves relative paths against
// dir, reads the trace files it names, and validates it. The errors of
// reading and of validation are reported together, each at its key, in the
// order of the file.
func Parse(b []byte, expandEnv bool, dir string) (*Config, error) {
	if len(b) > MaxConfigFileBytes {
		return nil, errTooLarge
	}
	sum := sha256.Sum256(b)
	if expandEnv {
		var missing []string
		b = EnvRef.ReplaceAllFunc(b, func(ref []byte) []byte {
			name := string(ref[2 : len(ref)-1])
			v, ok := os.LookupEnv(name)
			if !ok {
				missing = append(missing, name)
			}
			return []byte(v)
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("environment variable %s is not set", strings.Join(missing, ", "))
		}
		if len(b) > MaxConfigFileBytes {
			return nil, fmt.Errorf("with environment variables expanded: %w", errTooLarge)
		}
	}
	c, err := decode(b, dir)
	if err != nil {
		suggestSynonyms(err)
		return nil, envHint(b, expandEnv, redactErr(withRest(b, dir, err)))
	}
	c.hash = hex.EncodeToString(sum[:])
	if err := c.validate(c.readTraces(), b); err != nil {
		return nil, envHint(b, expandEnv, redactErr(withLines(b, err)))
	}
	return c, nil
}

// decode decodes b, a file of dir, strictly, with the defaults where it
// leaves a key out.
func decode(b []byte, dir string) (*Config, error) {
	c := &Config{Global: DefaultGlobalConfig, Tracing: DefaultTracingConfig}
	if err := strictyaml.Unmarshal(b, c); err != nil {
		return nil, err
	}
	for _, t := range c.Targets {
		if t != nil {
			t.HTTPClientConfig.SetDirectory(dir)
			if t.ServerMetrics != nil {
				t.ServerMetrics.HTTPClientConfig.SetDirectory(dir)
			}
		}
	}
	if reflect.DeepEqual(c.Tracing, TracingConfig{}) {
		c.Tracing = DefaultTracingConfig // `tracing:` with nothing under it
	}
	c.Tracing.TLSConfig.SetDirectory(dir)
	c.dir = dir
	return c, nil
}

// withRest adds to the decoding errors err of b the validation errors of
// what decodes of b without the keys to blame (strictyaml.Error.Rest):
// a misspelled target reference is told beside a bad duration, not after
// it is fixed. An error of a key left out, or of a key above or below one
// (its value, or the mapping that lost it: "set scenario or mix"), is left
// to the decoding error, and so is a required key that a misspelled one
// was told it means (`type: step` is "did you mean "kind"?", not also
// "kind: is required").
func withRest(b []byte, dir string, err error) error {
	var se *strictyaml.Error
	if !errors.As(err, &se) || se.Rest == nil {
		return err
	}
	c, rerr := decode(se.Rest, dir)
	if rerr != nil {
		return err
	}
	joined, ok := c.validate(c.readTraces(), se.Rest).(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	meant := map[string]bool{} // the keys the misspelled ones likely are
	for _, l := range se.Lines {
		if m := didYouMeanKey.FindStringSubmatch(l.Text); m != nil {
			k := joinKey(parentKey(l.Path), m[1])
			meant[k] = true
			if alt, ok := strings.CutSuffix(k, ".mix"); ok {
				meant[alt+".scenario"] = true // told at scenario, naming mix
			}
		}
	}
	lines := strictyaml.KeyLines(b)
	ls := slices.Clone(se.Lines)
	for _, e := range joined.Unwrap() {
		key, msg, _ := strings.Cut(e.Error(), ": ")
		if slices.ContainsFunc(se.Lines, func(l strictyaml.Line) bool { return related(key, l.Path) }) {
			continue
		}
		if meant[key] && strings.HasPrefix(msg, "is required: ") {
			continue
		}
		text := e.Error()
		line := keyLine(lines, e)
		if line > 0 {
			text = fmt.Sprintf("line %d: %s", line, text)
		}
		ls = append(ls, strictyaml.Line{Line: line, Path: key, Text: text})
	}
	return errors.New(strictyaml.Join(ls))
}

// didYouMeanKey matches a decoding error's suggestion of a known key.
var didYouMeanKey = regexp.MustCompile(`: no such key \(did you mean "([^"]+)"\?\)$`)

// joinKey is the key path of key under the path parent ("" at the top).
func joinKey(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// synonyms are keys that mean a known key, in other tools' configurations
// or in plain words, but are too far from it for a typo's did-you-mean
// (strictyaml.Suggest: an edit distance of at most 2): a test's `type:
// step` is `kind: step`. An unknown key is told the one of these its
// mapping has.
var synonyms = map[string][]string{
	"type":       {"kind"},
	"base_url":   {"url"},
	"endpoint":   {"url"},
	"model_name": {"model"},
	"qps":        {"rate"},
	"rps":        {"rate"},
	"headers":    {"http_headers"},
}

// suggestSynonyms adds to each unknown key of a decoding error that has
// no did-you-mean the known key of its mapping it is a synonym of
// (synonyms).
func suggestSynonyms(err error) {
	var se *strictyaml.Error
	if !errors.As(err, &se) {
		return
	}
	for i, l := range se.Lines {
		if !strings.HasSuffix(l.Text, ": no such key") {
			continue
		}
		parent := parentKey(l.Path)
		name := strings.TrimPrefix(l.Path[len(parent):], ".")
		known := yamlKeys(typeAt(reflect.TypeFor[Config](), parent))
		for _, s := range synonyms[name] {
			if known[s] {
				se.Lines[i].Text += fmt.Sprintf(" (did you mean %q?)", s)
				break
			}
		}
	}
}

// typeAt is the type of the value at the key path of a document of type
// t ("tests[1]" in a Config is a TestConfig), nil when the path names no
// value of t. A map's key holding "." or "[" is not found.
func typeAt(t reflect.Type, path string) reflect.Type {
	for path != "" {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil {
			return nil
		}
		if rest, ok := strings.CutPrefix(path, "["); ok {
			i := strings.IndexByte(rest, ']')
			if i < 0 || (t.Kind() != reflect.Slice && t.Kind() != reflect.Array) {
				return nil
			}
			t, path = t.Elem(), rest[i+1:]
			continue
		}
		path = strings.TrimPrefix(path, ".")
		i := strings.IndexAny(path, ".[")
		if i < 0 {
			i = len(path)
		}
		seg := path[:i]
		path = path[i:]
		switch t.Kind() {
		case reflect.Struct:
			t = strictyaml.Fields(t)[seg]
		case reflect.Map:
			t = t.Elem()
		default:
			return nil
		}
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// yamlKeys is the set of the keys of struct type t, nil for another
// type.
func yamlKeys(t reflect.Type) map[string]bool {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	keys := map[string]bool{}
	for k := range strictyaml.Fields(t) {
		keys[k] = true
	}
	return keys
}

// related reports whether the key paths a and b are one, or one is above
// the other: targets[0] and targets[0].url, not targets[0].url and
// targets[0].urls.
func related(a, b string) bool {
	under := func(x, y string) bool {
		return strings.HasPrefix(x, y) && (len(x) == len(y) || x[len(y)] == '.' || x[len(y)] == '[')
	}
	return under(a, b) || under(b, a)
}

// withLines prefixes each of the joined validation errors err with the line
// of the key it names: "line 7: targets[0].url: ...". The key is the
// error's text up to its first ": ", or that key's parent for a key the
// file leaves to its default (its parent's line).
func withLines(b []byte, err error) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	lines := strictyaml.KeyLines(b)
	if lines == nil {
		return err
	}
	// In the order of the file, at most 20 and then how many more, as a
	// decoding error's are.
	var ls []strictyaml.Line
	for _, e := range joined.Unwrap() {
		text := e.Error()
		line := keyLine(lines, e)
		if line > 0 {
			text = fmt.Sprintf("line %d: %s", line, text)
		}
		ls = append(ls, strictyaml.Line{Line: line, Text: text})
	}
	return errors.New(strictyaml.Join(ls))
}

// keyLine is the line of the key a validation error e names (its text up
// to its first ": "), or of that key's nearest parent the file has; 0
// when none is found.
func keyLine(lines map[string]int, e error) int {
	key, _, _ := strings.Cut(e.Error(), ": ")
	for ; key != ""; key = parentKey(key) {
		if line, ok := lines[key]; ok {
			return line
		}
	}
	return 0
}

// parentKey is the key path above key: canary[2] for canary[2].rate,
// canary for canary[2], "" at the top.
func parentKey(key string) string {
	i := strings.LastIndexAny(key, ".[")
	if i < 0 {
		return ""
	}
	return key[:i]
}

// envHint adds to err, when the file has ${VAR} references that were not
// expanded, that --config.expand-env expands them: `rate: ${RATE}` is a
// YAML syntax error, and `url: ${URL}` a URL without a scheme, whose
// messages do not say so.
func envHint(b []byte, expandEnv bool, err error) error {
	if expandEnv {
		return err
	}
	ref := EnvRef.Find(b)
	if ref == nil {
		return err
	}
	line := 1 + bytes.Count(b[:bytes.Index(b, ref)], []byte("\n"))
	return fmt.Errorf("%w\n(the file has ${VAR} references, the first %s on line %d: they are expanded with --config.expand-env)", err, ref, line)
}

// userinfoPassword matches the password of a URL's userinfo in a text, up
// to the last @ of the authority, as RedactURL takes it.
var userinfoPassword = regexp.MustCompile(`(//[^\s/?#@:"]*:)[^\s/?#"]*@`)

// redactErr redacts URL passwords in an error's text: errors of other
// packages quote the URL they failed on (prometheus/common's proxy_url:
// parse "http://user:s3cr3t@a b": invalid character " " in host name).
func redactErr(err error) error {
	msg := err.Error()
	if red := userinfoPassword.ReplaceAllString(msg, "${1}"+redactedPassword+"@"); red != msg {
		return errors.New(red)
	}
	return err
}

// traceErrors are the errors of reading trace files, by the TraceFile that
// names the file. Validation reports each at the TraceFile's key, among the
// other errors of its scenario or load, so that all errors keep the order
// of the file.
type traceErrors map[*TraceFile]error

// readTraces reads the trace files of scenarios[].lengths_from and
// canary[].replay, in the order of the file, each file and format once.
// One whose file or format is bad is not read: validation reports it.
func (c *Config) readTraces() traceErrors {
	errs := traceErrors{}
	read := func(tf *TraceFile) {
		if tf.check() != nil {
			return
		}
		if err := c.readTrace(tf); err != nil {
			errs[tf] = err
		}
	}
	for _, s := range c.Scenarios {
		if s != nil && s.LengthsFrom != nil {
			read(s.LengthsFrom)
		}
	}
	for _, l := range c.Canary {
		if l != nil && l.Replay != nil {
			read(&l.Replay.TraceFile)
		}
	}
	for _, t := range c.Tests {
		if t != nil && t.Replay != nil {
			read(&t.Replay.TraceFile)
		}
	}
	return errs
}

// readTrace reads a trace file once per configuration, relative to its
// directory, and sets tf.Trace. tf must pass check.
func (c *Config) readTrace(tf *TraceFile) error {
	path := commoncfg.JoinDir(c.dir, tf.File)
	id := tf.Format + "\x00" + path
	if t, ok := c.traces[id]; ok {
		tf.Trace = t
		return nil
	}
	t, err := workload.LoadTrace(path, tf.Format)
	if err != nil {
		return fmt.Errorf("file: %w", err)
	}
	if c.traces == nil {
		c.traces = map[string]*workload.Trace{}
	}
	c.traces[id] = t
	tf.Trace = t
	return nil
}
