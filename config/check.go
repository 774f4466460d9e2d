package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
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

	// MaxSchemaDepth bounds the nesting of a schema (a json_schema check's,
	// a tool's parameters): its objects and arrays, the outermost object
	// being level 1, are at most 64 levels deep. Each level of nested
	// properties takes two (the properties object and the property's
	// schema), so this allows about 30 levels of nested objects, three times
	// what the APIs' structured outputs accept (OpenAI's: 10), and a
	// schema at the limit compiles in milliseconds. The compiler's work
	// grows with the cube of the depth: 2,000 levels took 15 s and 16 GB
	// of allocations, and are now refused before any of it.
	MaxSchemaDepth = 64
	// MaxSchemaValues bounds the size of a schema: its JSON values
	// (objects, arrays, strings, numbers, booleans, nulls; not the keys).
	// The compiler's work grows with the square of the subschemas: 5,000
	// compile in 0.2 s, 10,000 in 0.8 to 2 s, 100,000 (a 4 MiB file) took
	// 4 minutes. A check's schema is far smaller (the README's weather
	// schema has 10 values). It is also the most subschemas that
	// $ref, allOf, anyOf and the like may apply to one value of a reply,
	// as many as a schema of this size without $ref can (see
	// checkSchemaGraph).
	MaxSchemaValues = 5_000
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
		raw, err := schemaDoc(j.Schema, j.SchemaFile, dir)
		if err != nil {
			v.bad(key, "%v", err)
			return
		}
		// The schema's own errors are at schema, or at schema_file with
		// the file's name.
		field, file := key+".schema", ""
		if j.SchemaFile != "" {
			field, file = key+".schema_file", j.SchemaFile+": "
		}
		if j.Doc, j.Compiled, err = compileSchema(raw); err != nil {
			v.bad(field, "%s%v", file, err)
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
		if t.Prompt == "" && v.absent(key+".prompt") {
			v.required(key+".prompt", `the user's request the tools answer, e.g. "What is the weather in Paris?"`)
		} else if strings.TrimSpace(t.Prompt) == "" {
			v.bad(key+".prompt", "must not be empty")
		}
		if t.Choice == "" {
			t.Choice = "auto"
		}
		if !slices.Contains(ToolChoices, t.Choice) {
			v.bad(key+".tool_choice", "must be one of %s, got %q", strings.Join(ToolChoices, ", "), t.Choice)
		}
		if t.Tools == nil && v.absent(key+".tools") {
			v.required(key+".tools", "the functions offered, a list of 1 to %d, e.g. [{name: get_weather, parameters: {type: object}}]", MaxTools)
		} else if len(t.Tools) == 0 || len(t.Tools) > MaxTools {
			v.bad(key+".tools", "must list between 1 and %d tools, got %d", MaxTools, len(t.Tools))
		}
		seen := map[string]bool{}
		for i, tool := range t.Tools {
			tk := fmt.Sprintf("%s.tools[%d]", key, i)
			if tool == nil {
				v.bad(tk, "must not be empty")
				continue
			}
			if tool.Name == "" && v.absent(tk+".name") {
				v.required(tk+".name", "the function's name (%s), e.g. get_weather", toolNamePattern)
			} else if !toolNamePattern.MatchString(tool.Name) {
				v.bad(tk+".name", "must match %s, got %q", toolNamePattern, tool.Name)
			} else if seen[tool.Name] {
				v.bad(tk+".name", "duplicate tool name %q", tool.Name)
			}
			seen[tool.Name] = true
			params := tool.Parameters
			if params == nil {
				params = map[string]any{"type": "object"}
			}
			var err error
			if tool.Doc, tool.Compiled, err = compileSchema(params); err != nil {
				v.bad(tk+".parameters", "%v", err)
			}
		}
		if t.Expect != "" && !seen[t.Expect] {
			v.bad(key+".expect", "names no tool of the check: %q", t.Expect)
		}
	}
}

// schemaDoc returns a json_schema check's schema: inline, as YAML decoded
// it, or from its file, as JSON values.
func schemaDoc(inline any, file, dir string) (any, error) {
	switch {
	case inline != nil && file != "":
		return nil, errors.New("set schema or schema_file, not both")
	case inline != nil:
		return inline, nil
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

// schemaLocation is the URL a check's schema is compiled at; errors name
// its subschemas by their fragment: #/$defs/a.
const schemaLocation = "sloprober:///schema.json"

// compileSchema converts a schema, as YAML or JSON decoded it, into JSON
// values, and compiles it with no loader: a $ref to a file or a URL is an
// error, never a read or a request.
//
// A schema deeper than MaxSchemaDepth or larger than MaxSchemaValues is
// refused before it is compiled; a compiled one when a $ref loop stays on
// the same value (every validation would fail) or when it applies more
// than MaxSchemaValues subschemas to one value (see checkSchemaGraph).
func compileSchema(raw any) (map[string]any, *jsonschema.Schema, error) {
	doc, err := (&jsonConverter{}).value(raw, 0)
	if err != nil {
		return nil, nil, err
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("must be a JSON schema object, got %T", doc)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaLocation, obj); err != nil {
		return nil, nil, err
	}
	s, err := c.Compile(schemaLocation)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSchemaGraph(s, dynamicTargets(c, obj)); err != nil {
		return nil, nil, err
	}
	return obj, s, nil
}

// sameValue returns the subschemas that s applies to the value it
// validates itself; dyn returns the schemas a $dynamicRef or a
// $recursiveRef may resolve to beside its static target. The validator
// follows these without going into the value, so a loop of them never
// ends: the validator stops it with an error, on every value.
func sameValue(s *jsonschema.Schema, dyn func(*jsonschema.Schema) []*jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref}
	if r := s.RecursiveRef; r != nil {
		out = append(append(out, r), dyn(r)...)
	}
	if r := s.DynamicRef; r != nil && r.Ref != nil {
		out = append(append(out, r.Ref), dyn(r.Ref)...)
	}
	out = append(out, s.Not, s.If, s.Then, s.Else)
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	for _, k := range slices.Sorted(maps.Keys(s.Dependencies)) {
		if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			out = append(out, d)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
		out = append(out, s.DependentSchemas[k])
	}
	return slices.DeleteFunc(out, func(s *jsonschema.Schema) bool { return s == nil })
}

// intoValue returns the subschemas that s applies to a part of its value:
// a property, an item, a property name, a string's decoded content. A
// schema may refer back to itself through these (a tree: the items of its
// children are the tree again): each step goes one level into the reply,
// which is finite.
func intoValue(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		out = append(out, s.Properties[k])
	}
	patterns := slices.SortedFunc(maps.Keys(s.PatternProperties), func(a, b jsonschema.Regexp) int {
		return strings.Compare(a.String(), b.String())
	})
	for _, p := range patterns {
		out = append(out, s.PatternProperties[p])
	}
	for _, a := range []any{s.AdditionalProperties, s.Items, s.AdditionalItems} {
		switch a := a.(type) {
		case *jsonschema.Schema:
			out = append(out, a)
		case []*jsonschema.Schema:
			out = append(out, a...)
		}
	}
	out = append(out, s.PrefixItems...)
	out = append(out, s.PropertyNames, s.UnevaluatedProperties, s.Items2020, s.Contains, s.UnevaluatedItems, s.ContentSchema)
	return slices.DeleteFunc(out, func(s *jsonschema.Schema) bool { return s == nil })
}

// checkSchemaGraph refuses a compiled schema with a loop of subschemas
// that stays on the same value (sameValue), and one that applies more than
// MaxSchemaValues subschemas to one value through them: a chain of 20
// definitions, each allOf: [$ref next, $ref next], applies 2^20, and took
// 3.7 s to validate a reply (39 s for one that fails). The walk is linear
// in the subschemas and their references.
func checkSchemaGraph(root *jsonschema.Schema, dyn func(*jsonschema.Schema) []*jsonschema.Schema) error {
	// Every subschema the validator may reach, in a stable order.
	seen := map[*jsonschema.Schema]bool{root: true}
	all := []*jsonschema.Schema{root}
	for i := 0; i < len(all); i++ {
		for _, t := range append(sameValue(all[i], dyn), intoValue(all[i])...) {
			if !seen[t] {
				seen[t] = true
				all = append(all, t)
			}
		}
	}
	// A depth-first walk of the same-value edges: a subschema met again
	// while its own walk is under way closes a loop. Once its walk is
	// done, applies[s] counts the subschemas s applies to its value,
	// itself included, up to MaxSchemaValues+1.
	const walking = -1
	applies := make(map[*jsonschema.Schema]int, len(all))
	var path []*jsonschema.Schema
	var walk func(s *jsonschema.Schema) error
	walk = func(s *jsonschema.Schema) error {
		switch applies[s] {
		case walking:
			var names []string
			for _, l := range append(path[slices.Index(path, s):], s) {
				names = append(names, schemaName(l))
			}
			return fmt.Errorf("$ref loop that stays on the same value: %s (the validator stops it as an infinite loop: "+
				"every reply that reaches it would fail; a schema may refer back to itself only under a keyword "+
				"that applies to a part of the value, such as properties or items)",
				strings.Join(names, " -> "))
		case 0:
		default:
			return nil // walked
		}
		applies[s] = walking
		path = append(path, s)
		n := 1
		for _, t := range sameValue(s, dyn) {
			if err := walk(t); err != nil {
				return err
			}
			n = min(n+applies[t], MaxSchemaValues+1)
		}
		path = path[:len(path)-1]
		applies[s] = n
		return nil
	}
	for _, s := range all {
		if err := walk(s); err != nil {
			return err
		}
		if applies[s] > MaxSchemaValues {
			return fmt.Errorf("applies more than %d subschemas to one value, from %s through $ref, allOf, anyOf and the like "+
				"(each reply would take seconds to validate)", MaxSchemaValues, schemaName(s))
		}
	}
	return nil
}

// schemaName names a subschema by its place in the schema: #/$defs/a.
func schemaName(s *jsonschema.Schema) string {
	return strings.TrimPrefix(s.Location, schemaLocation)
}

// dynamicTargets returns a function that gives, for the static target of
// a $dynamicRef or a $recursiveRef, the other schemas the reference may
// resolve to: the validator takes the outermost schema of its dynamic
// scope with the same $dynamicAnchor, or with $recursiveAnchor: true. All
// those of the document are taken, more than the validator may take (a
// loop through one it never takes would be a false alarm, in a schema no
// structured output accepts anyway). Each is compiled by its JSON
// pointer: one that no $ref names is reached in no other way.
func dynamicTargets(c *jsonschema.Compiler, doc map[string]any) func(*jsonschema.Schema) []*jsonschema.Schema {
	dynamic := map[string][]*jsonschema.Schema{}
	var recursive []*jsonschema.Schema
	var find func(v any, ptr string)
	find = func(v any, ptr string) {
		switch v := v.(type) {
		case map[string]any:
			name, isDynamic := v["$dynamicAnchor"].(string)
			isRecursive := v["$recursiveAnchor"] == true
			if isDynamic || isRecursive {
				// An object that is no schema (a value under enum)
				// does not compile, or has no anchor: no target.
				if s, err := c.Compile(schemaLocation + "#" + ptr); err == nil {
					if isDynamic && s.DynamicAnchor == name {
						dynamic[name] = append(dynamic[name], s)
					}
					if isRecursive && s.RecursiveAnchor {
						recursive = append(recursive, s)
					}
				}
			}
			for _, k := range slices.Sorted(maps.Keys(v)) {
				find(v[k], ptr+"/"+pointerToken(k))
			}
		case []any:
			for i, e := range v {
				find(e, ptr+"/"+strconv.Itoa(i))
			}
		}
	}
	if hasKey(doc, "$dynamicRef") || hasKey(doc, "$recursiveRef") {
		find(doc, "")
	}
	return func(target *jsonschema.Schema) []*jsonschema.Schema {
		var out []*jsonschema.Schema
		if target.DynamicAnchor != "" {
			out = append(out, dynamic[target.DynamicAnchor]...)
		}
		if target.RecursiveAnchor {
			out = append(out, recursive...)
		}
		return out
	}
}

// hasKey reports whether key is the key of an object anywhere in v.
func hasKey(v any, key string) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if k == key || hasKey(e, key) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, func(e any) bool { return hasKey(e, key) })
	}
	return false
}

// pointerToken escapes a key as a token of a JSON pointer (RFC 6901) in
// a URL's fragment, as the compiler reads it.
func pointerToken(k string) string {
	return url.PathEscape(strings.NewReplacer("~", "~0", "/", "~1").Replace(k))
}

// noLoader refuses to load any schema: checks are self-contained.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schemas are not loaded from %s: a check's schema must be self-contained", url)
}

// jsonConverter converts a schema, as YAML decoded it (maps with keys of
// any type, ints) or JSON (json.Number), into JSON values (maps with
// string keys, []any, float64 or json.Number, string, bool, nil), as the
// compiler takes it and a request sends it. It counts the values, and
// stops at the first one beyond MaxSchemaValues or deeper than
// MaxSchemaDepth, before any more work.
type jsonConverter struct{ values int }

// value converts v, which is inside depth levels of objects and arrays.
func (c *jsonConverter) value(v any, depth int) (any, error) {
	if c.values++; c.values > MaxSchemaValues {
		return nil, fmt.Errorf("more than the limit of %d JSON values", MaxSchemaValues)
	}
	switch v.(type) {
	case map[any]any, map[string]any, []any:
		if depth++; depth > MaxSchemaDepth {
			return nil, fmt.Errorf("nested deeper than the limit of %d levels of objects and arrays", MaxSchemaDepth)
		}
	}
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("a key must be a string, got %v (%T): quote keys such as y, n, on, off, yes, no, which YAML reads as booleans, and numbers", k, k)
			}
			j, err := c.value(e, depth)
			if err != nil {
				return nil, err
			}
			m[ks] = j
		}
		return m, nil
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			j, err := c.value(e, depth)
			if err != nil {
				return nil, err
			}
			m[k] = j
		}
		return m, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			j, err := c.value(e, depth)
			if err != nil {
				return nil, err
			}
			out[i] = j
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
	case json.Number, string, bool, nil:
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
