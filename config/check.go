package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	commoncfg "github.com/prometheus/common/config"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Quality checks: the SLO names a check counts as, its key in a scenario's
// check section. A reply that fails its check is ok (the outcome) but not
// good, and counts as slo_missed{slo="<name>"}.
const (
	CheckJSONSchema  = "json_schema"
	CheckKnownAnswer = "known_answer"
	CheckToolCall    = "tool_call"
)

// Bounds of the quality checks' input.
const (
	// MaxCheckFileBytes bounds a schema or answers file.
	MaxCheckFileBytes = 4 << 20
	// MaxKnownAnswers bounds the answers of a known_answer file.
	MaxKnownAnswers = 100_000
	// MaxTools bounds the tools of a tool_call check.
	MaxTools = 128
)

// CheckConfig is a scenario's quality check: exactly one of its keys.
type CheckConfig struct {
	JSONSchema  *JSONSchemaCheck  `yaml:"json_schema,omitempty"`
	KnownAnswer *KnownAnswerCheck `yaml:"known_answer,omitempty"`
	ToolCall    *ToolCallCheck    `yaml:"tool_call,omitempty"`
}

// Name returns the check's SLO name, "" when none is set.
func (c *CheckConfig) Name() string {
	switch {
	case c == nil:
		return ""
	case c.JSONSchema != nil:
		return CheckJSONSchema
	case c.KnownAnswer != nil:
		return CheckKnownAnswer
	case c.ToolCall != nil:
		return CheckToolCall
	}
	return ""
}

// JSONSchemaCheck asks for a reply in a JSON schema (the API's structured
// output: response_format, text.format or output_config.format) and validates
// the reply against it.
type JSONSchemaCheck struct {
	// Name is the schema's name in the request (default "answer").
	Name string `yaml:"name,omitempty"`
	// Schema is the JSON schema, inline; or SchemaFile, a JSON file
	// relative to the configuration file.
	Schema     any    `yaml:"schema,omitempty"`
	SchemaFile string `yaml:"schema_file,omitempty"`
	// Prompt is the instruction sent after the filler (default: reply
	// with a JSON object that follows the schema).
	Prompt string `yaml:"prompt,omitempty"`
	// Strict is sent as the schema's strict flag (default true).
	Strict *bool `yaml:"strict,omitempty"`

	// Doc is the schema as JSON values, sent in requests; Compiled
	// validates replies. Both are set by validation.
	Doc      map[string]any     `yaml:"-"`
	Compiled *jsonschema.Schema `yaml:"-"`
}

// IsStrict reports the strict flag sent with the schema.
func (c *JSONSchemaCheck) IsStrict() bool { return c.Strict == nil || *c.Strict }

// KnownAnswerCheck asks questions with known answers: built-in arithmetic
// questions, drawn per request ("What is 4821 + 377?", which a reply
// answers with the number), and the questions of a file.
type KnownAnswerCheck struct {
	// File is a JSON Lines file of questions, relative to the
	// configuration file: {"prompt": "...", "exact": "..."} or "regex" or
	// "number" (with "tolerance").
	File string `yaml:"file,omitempty"`
	// Builtin adds the built-in arithmetic questions (default: true
	// without a file, false with one).
	Builtin *bool `yaml:"builtin,omitempty"`

	// Answers are the file's questions, read by validation.
	Answers []KnownAnswer `yaml:"-"`
}

// UsesBuiltin reports whether the built-in questions are asked.
func (c *KnownAnswerCheck) UsesBuiltin() bool {
	if c.Builtin != nil {
		return *c.Builtin
	}
	return c.File == ""
}

// KnownAnswer is one question and how its reply is judged: the whole
// reply (trimmed) equal to Exact, matching Regex, or its first number
// within Tolerance of Number.
type KnownAnswer struct {
	Prompt    string   `json:"prompt"`
	Exact     *string  `json:"exact,omitempty"`
	Regex     string   `json:"regex,omitempty"`
	Number    *float64 `json:"number,omitempty"`
	Tolerance float64  `json:"tolerance,omitempty"`

	Compiled *regexp.Regexp `json:"-"`
}

// ToolCallCheck sends tools and expects a call to one of them whose
// arguments validate against its parameter schema.
type ToolCallCheck struct {
	// Prompt is the user's request (required).
	Prompt string `yaml:"prompt"`
	// Tools are the functions offered, in OpenAI's function form.
	Tools []*ToolConfig `yaml:"tools"`
	// Expect names the tool the reply must call (default: the first).
	Expect string `yaml:"expect,omitempty"`
	// Choice is the tool_choice sent: auto (default), required, or named
	// (force the expected tool).
	Choice string `yaml:"tool_choice,omitempty"`
}

// ExpectedTool returns the tool a reply must call.
func (c *ToolCallCheck) ExpectedTool() *ToolConfig {
	for _, t := range c.Tools {
		if t.Name == c.Expect || c.Expect == "" {
			return t
		}
	}
	return nil
}

// ToolConfig is one function offered to the model.
type ToolConfig struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description,omitempty"`
	// Parameters is the JSON schema of the arguments (default: an object
	// with no constraints).
	Parameters any `yaml:"parameters,omitempty"`

	Doc      map[string]any     `yaml:"-"`
	Compiled *jsonschema.Schema `yaml:"-"`
}

// ToolChoices are the tool_choice values a tool_call check may send.
var ToolChoices = []string{"auto", "required", "named"}

// toolNamePattern is what the APIs accept as a function's name.
var toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// validateCheck checks a scenario's check section and compiles its
// schemas and answers; dir is the configuration file's directory.
func (v *validation) validateCheck(key string, s *ScenarioConfig, dir string) {
	c := s.Check
	if c == nil {
		return
	}
	n := 0
	for _, set := range []bool{c.JSONSchema != nil, c.KnownAnswer != nil, c.ToolCall != nil} {
		if set {
			n++
		}
	}
	key += ".check"
	if n != 1 {
		v.bad(key, "set exactly one of json_schema, known_answer and tool_call, got %d", n)
		return
	}
	if s.Conversation != nil {
		v.bad(key, "a quality check applies to single requests, not conversations")
	}
	switch {
	case c.JSONSchema != nil:
		j := c.JSONSchema
		key += ".json_schema"
		if j.Name == "" {
			j.Name = "answer"
		}
		if !toolNamePattern.MatchString(j.Name) {
			v.bad(key+".name", "must match %s, got %q", toolNamePattern, j.Name)
		}
		if j.SchemaFile != "" && !v.readsFiles() {
			return // read by Parse
		}
		doc, err := schemaDoc(j.Schema, j.SchemaFile, dir)
		if err != nil {
			v.bad(key, "%v", err)
			return
		}
		if j.Doc, j.Compiled, err = compileSchema(doc); err != nil {
			v.bad(key+".schema", "%v", err)
		}
	case c.KnownAnswer != nil:
		k := c.KnownAnswer
		key += ".known_answer"
		if k.File != "" && v.readsFiles() {
			answers, err := readAnswers(commoncfg.JoinDir(dir, k.File))
			if err != nil {
				v.bad(key+".file", "%v", err)
			}
			k.Answers = answers
		}
		if !k.UsesBuiltin() && len(k.Answers) == 0 && k.File == "" {
			v.bad(key, "builtin is false and no file is given: no question to ask")
		}
	case c.ToolCall != nil:
		t := c.ToolCall
		key += ".tool_call"
		if strings.TrimSpace(t.Prompt) == "" {
			v.bad(key+".prompt", "must not be empty")
		}
		if t.Choice == "" {
			t.Choice = "auto"
		}
		if !slices.Contains(ToolChoices, t.Choice) {
			v.bad(key+".tool_choice", "must be one of %s, got %q", strings.Join(ToolChoices, ", "), t.Choice)
		}
		if len(t.Tools) == 0 || len(t.Tools) > MaxTools {
			v.bad(key+".tools", "must list between 1 and %d tools, got %d", MaxTools, len(t.Tools))
		}
		seen := map[string]bool{}
		for i, tool := range t.Tools {
			tk := fmt.Sprintf("%s.tools[%d]", key, i)
			if tool == nil {
				v.bad(tk, "must not be empty")
				continue
			}
			if !toolNamePattern.MatchString(tool.Name) {
				v.bad(tk+".name", "must match %s, got %q", toolNamePattern, tool.Name)
			} else if seen[tool.Name] {
				v.bad(tk+".name", "duplicate tool name %q", tool.Name)
			}
			seen[tool.Name] = true
			params := tool.Parameters
			if params == nil {
				params = map[string]any{"type": "object"}
			}
			doc, err := jsonValue(params)
			if err == nil {
				tool.Doc, tool.Compiled, err = compileSchema(doc)
			}
			if err != nil {
				v.bad(tk+".parameters", "%v", err)
			}
		}
		if t.Expect != "" && !seen[t.Expect] {
			v.bad(key+".expect", "names no tool of the check: %q", t.Expect)
		}
	}
}

// schemaDoc returns a json_schema check's schema: inline or from its file.
func schemaDoc(inline any, file, dir string) (any, error) {
	switch {
	case inline != nil && file != "":
		return nil, errors.New("set schema or schema_file, not both")
	case inline != nil:
		return jsonValue(inline)
	case file == "":
		return nil, errors.New("set schema or schema_file")
	}
	b, err := readBounded(commoncfg.JoinDir(dir, file))
	if err != nil {
		return nil, fmt.Errorf("schema_file: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("schema_file %s: %w", file, err)
	}
	return doc, nil
}

// compileSchema compiles a JSON schema given as JSON values, with no
// loader: a $ref to a file or a URL is an error, never a read or a request.
func compileSchema(doc any) (map[string]any, *jsonschema.Schema, error) {
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("must be a JSON schema object, got %T", doc)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	const loc = "sloprober:///schema.json"
	if err := c.AddResource(loc, obj); err != nil {
		return nil, nil, err
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, nil, err
	}
	return obj, s, nil
}

// noLoader refuses to load any schema: checks are self-contained.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schemas are not loaded from %s: a check's schema must be self-contained", url)
}

// jsonValue converts a YAML-decoded value into JSON values (maps with
// string keys, []any, float64, string, bool, nil), as a JSON schema is.
func jsonValue(v any) (any, error) {
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("a key must be a string, got %v (%T): quote keys such as y, n, on, off, yes, no, which YAML reads as booleans, and numbers", k, k)
			}
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			m[ks] = c
		}
		return m, nil
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			m[k] = c
		}
		return m, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case int:
		return float64(v), nil
	case int64:
		return float64(v), nil
	case uint64:
		return float64(v), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%v is no JSON number", v)
		}
		return v, nil
	case string, bool, nil:
		return v, nil
	}
	return nil, fmt.Errorf("%v (%T) is no JSON value", v, v)
}

// readBounded reads a check's file, at most MaxCheckFileBytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxCheckFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxCheckFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxCheckFileBytes)
	}
	return b, nil
}

// readAnswers reads a JSON Lines file of known answers: each line one
// question with exactly one of exact, regex and number.
func readAnswers(path string) ([]KnownAnswer, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	var out []KnownAnswer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), MaxCheckFileBytes)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		var a KnownAnswer
		d := json.NewDecoder(bytes.NewReader(text))
		d.DisallowUnknownFields()
		if err := d.Decode(&a); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, line, err)
		}
		// One object a line: a second one, or text after it, is an
		// error, not a question silently left out.
		if _, err := d.Token(); err != io.EOF {
			return nil, fmt.Errorf("%s: line %d: more than one JSON value, at offset %d", path, line, d.InputOffset())
		}
		if err := a.compile(); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, line, err)
		}
		if len(out) == MaxKnownAnswers {
			return nil, fmt.Errorf("%s: more than %d questions", path, MaxKnownAnswers)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no question", path)
	}
	return out, nil
}

// compile checks a known answer and compiles its regular expression.
func (a *KnownAnswer) compile() error {
	if strings.TrimSpace(a.Prompt) == "" {
		return errors.New("prompt: must not be empty")
	}
	n := 0
	for _, set := range []bool{a.Exact != nil, a.Regex != "", a.Number != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("set exactly one of exact, regex and number, got %d", n)
	}
	if a.Regex != "" {
		re, err := regexp.Compile(a.Regex)
		if err != nil {
			return fmt.Errorf("regex: %w", err)
		}
		a.Compiled = re
	}
	if a.Number != nil && (math.IsNaN(*a.Number) || math.IsInf(*a.Number, 0)) {
		return errors.New("number: must be finite")
	}
	if !(a.Tolerance >= 0) || math.IsInf(a.Tolerance, 0) {
		return fmt.Errorf("tolerance: must be a finite number, not negative, got %g", a.Tolerance)
	}
	return nil
}
