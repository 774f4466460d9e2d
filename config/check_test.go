package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// checkConfig is a configuration with one scenario whose check section is
// check, on a target of api.
func checkConfig(api, check string) string {
	return `
targets: [{name: t, url: "http://127.0.0.1:1/v1", model: m, api: ` + api + `}]
scenarios: [{name: s, check: ` + check + `}]
canary: [{target: t, scenario: s, rate: 1}]
`
}

func TestChecks(t *testing.T) {
	dir := filepath.Join("testdata", "checks")
	for _, tc := range []struct {
		name, api, check string
		err              string
		assert           func(t *testing.T, c *CheckConfig)
	}{
		{name: "inline schema", api: "chat", check: `{json_schema: {schema: {type: object, properties: {"n": {type: integer}}}}}`,
			assert: func(t *testing.T, c *CheckConfig) {
				require.Equal(t, CheckJSONSchema, c.Name())
				require.Equal(t, "answer", c.JSONSchema.Name)
				require.True(t, c.JSONSchema.IsStrict())
				require.Equal(t, map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}, c.JSONSchema.Doc)
				require.NoError(t, c.JSONSchema.Compiled.Validate(map[string]any{}))
			}},
		{name: "schema file", api: "responses", check: `{json_schema: {schema_file: weather.schema.json, name: weather, strict: false}}`,
			assert: func(t *testing.T, c *CheckConfig) {
				require.False(t, c.JSONSchema.IsStrict())
				require.Error(t, c.JSONSchema.Compiled.Validate(map[string]any{"city": "Paris"}))
			}},
		{name: "answers file", api: "messages", check: `{known_answer: {file: capitals.jsonl}}`,
			assert: func(t *testing.T, c *CheckConfig) {
				require.Len(t, c.KnownAnswer.Answers, 4)
				require.False(t, c.KnownAnswer.UsesBuiltin())
				require.True(t, c.KnownAnswer.Answers[1].Compiled.MatchString("It is Jupiter."))
			}},
		{name: "builtin answers", api: "completions", check: `{known_answer: {}}`,
			assert: func(t *testing.T, c *CheckConfig) { require.True(t, c.KnownAnswer.UsesBuiltin()) }},
		{name: "tools", api: "chat", check: `{tool_call: {prompt: "Weather?", tools: [{name: get_weather, parameters: {type: object}}, {name: get_time}]}}`,
			assert: func(t *testing.T, c *CheckConfig) {
				require.Equal(t, "auto", c.ToolCall.Choice)
				require.Equal(t, "get_weather", c.ToolCall.ExpectedTool().Name)
				require.Equal(t, map[string]any{"type": "object"}, c.ToolCall.Tools[1].Doc, "parameters default to any object")
			}},

		{name: "two checks", api: "chat", check: `{known_answer: {}, json_schema: {schema: {}}}`,
			err: "scenarios[0].check: set exactly one of json_schema, known_answer and tool_call, got 2"},
		{name: "no check", api: "chat", check: `{}`, err: "scenarios[0].check: set exactly one of json_schema, known_answer and tool_call, got 0"},
		{name: "schema and file", api: "chat", check: `{json_schema: {schema: {}, schema_file: weather.schema.json}}`,
			err: "scenarios[0].check.json_schema: set schema or schema_file, not both"},
		{name: "bad schema", api: "chat", check: `{json_schema: {schema: {type: 7}}}`, err: "scenarios[0].check.json_schema.schema: "},
		{name: "schema with a boolean key", api: "chat", check: `{json_schema: {schema: {type: object, properties: {n: {type: integer}}}}}`,
			err: "scenarios[0].check.json_schema.schema: a key must be a string, got false (bool): quote keys such as y, n, on, off"},
		{name: "schema that is no object", api: "chat", check: `{json_schema: {schema: [1]}}`,
			err: "scenarios[0].check.json_schema.schema: must be a JSON schema object, got []interface {}"},
		{name: "remote ref", api: "chat", check: `{json_schema: {schema: {$ref: "http://127.0.0.1:1/schema.json"}}}`,
			err: "a check's schema must be self-contained"},
		{name: "missing schema file", api: "chat", check: `{json_schema: {schema_file: none.json}}`,
			err: "scenarios[0].check.json_schema: schema_file: open testdata/checks/none.json: no such file or directory"},
		{name: "bad answers file", api: "chat", check: `{known_answer: {file: bad_answers.jsonl}}`,
			err: "scenarios[0].check.known_answer.file: testdata/checks/bad_answers.jsonl: line 2: set exactly one of exact, regex and number, got 2"},
		{name: "two questions on a line", api: "chat", check: `{known_answer: {file: two_on_a_line.jsonl}}`,
			err: "scenarios[0].check.known_answer.file: testdata/checks/two_on_a_line.jsonl: line 2: more than one JSON value, at offset 50"},
		{name: "no question", api: "chat", check: `{known_answer: {builtin: false}}`,
			err: "scenarios[0].check.known_answer: builtin is false and no file is given: no question to ask"},
		{name: "tool without prompt", api: "chat", check: `{tool_call: {tools: [{name: f}]}}`,
			err: `scenarios[0].check.tool_call.prompt: is required: the user's request the tools answer, e.g. "What is the weather in Paris?"`},
		{name: "tool with an empty prompt", api: "chat", check: `{tool_call: {prompt: " ", tools: [{name: f}]}}`, err: "scenarios[0].check.tool_call.prompt: must not be empty"},
		{name: "bad tool name", api: "chat", check: `{tool_call: {prompt: x, tools: [{name: "get weather"}]}}`,
			err: `scenarios[0].check.tool_call.tools[0].name: must match ^[a-zA-Z0-9_-]{1,64}$, got "get weather"`},
		{name: "duplicate tool", api: "chat", check: `{tool_call: {prompt: x, tools: [{name: f}, {name: f}]}}`,
			err: `scenarios[0].check.tool_call.tools[1].name: duplicate tool name "f"`},
		{name: "unknown expected tool", api: "chat", check: `{tool_call: {prompt: x, tools: [{name: f}], expect: g}}`,
			err: `scenarios[0].check.tool_call.expect: names no tool of the check: "g"`},
		{name: "bad tool choice", api: "chat", check: `{tool_call: {prompt: x, tools: [{name: f}], tool_choice: always}}`,
			err: `scenarios[0].check.tool_call.tool_choice: must be one of auto, required, named, got "always"`},
		{name: "tools on completions", api: "completions", check: `{tool_call: {prompt: x, tools: [{name: f}]}}`,
			err: `canary[0]: scenario "s" has a tool_call check, which needs a chat, responses or messages target; target "t" has api completions`},
		{name: "unknown key", api: "chat", check: `{known_answer: {answers: x}}`, err: "scenarios[0].check.known_answer.answers: no such key"},

		// Recursive schemas: a tree refers back to itself under items,
		// for a part of the value, and validates; a $ref loop that stays
		// on the same value fails every reply (the validator stops it as
		// an infinite loop), so it is refused at load, naming the loop.
		{name: "recursive schema", api: "chat", check: `{json_schema: {schema_file: tree.schema.json}}`,
			assert: func(t *testing.T, c *CheckConfig) {
				s := c.JSONSchema.Compiled
				require.NoError(t, s.Validate(map[string]any{"name": "a", "children": []any{
					map[string]any{"name": "b", "children": []any{map[string]any{"name": "c"}}}, map[string]any{"name": "d"}}}))
				err := s.Validate(map[string]any{"name": "a", "children": []any{map[string]any{"name": "b", "children": []any{map[string]any{"name": 1}}}}})
				require.ErrorContains(t, err, "/children/0/children/0/name")
				require.NotContains(t, err.Error(), "cycle")
			}},
		{name: "recursive schema through $dynamicRef", api: "chat", check: `{json_schema: {schema_file: dynamic_tree.schema.json}}`,
			assert: func(t *testing.T, c *CheckConfig) {
				s := c.JSONSchema.Compiled
				require.NoError(t, s.Validate(map[string]any{"children": []any{map[string]any{"children": []any{map[string]any{}}}}}))
				err := s.Validate(map[string]any{"children": []any{map[string]any{"children": "x"}}})
				require.Error(t, err)
				require.NotContains(t, err.Error(), "cycle")
			}},
		{name: "recursive tool parameters", api: "chat", check: `{tool_call: {prompt: x, tools: [{name: f, parameters: {type: object, properties: {sub: {$ref: "#"}}}}]}}`,
			assert: func(t *testing.T, c *CheckConfig) {
				require.NoError(t, c.ToolCall.Tools[0].Compiled.Validate(map[string]any{"sub": map[string]any{"sub": map[string]any{}}}))
			}},
		{name: "ref loop at the root", api: "chat", check: `{json_schema: {schema: {$ref: "#"}}}`,
			err: "scenarios[0].check.json_schema.schema: $ref loop that stays on the same value: # -> # (the validator stops it as an infinite loop"},
		{name: "ref loop under a property", api: "chat", check: `{json_schema: {schema: {properties: {a: {allOf: [{$ref: "#/properties/a"}]}}}}}`,
			err: "scenarios[0].check.json_schema.schema: $ref loop that stays on the same value: #/properties/a -> #/properties/a/allOf/0 -> #/properties/a"},
		{name: "mutual ref loop", api: "chat", check: `{json_schema: {schema_file: mutual_loop.schema.json}}`,
			err: "scenarios[0].check.json_schema.schema_file: mutual_loop.schema.json: $ref loop that stays on the same value: #/$defs/a -> #/$defs/b -> #/$defs/b/allOf/1 -> #/$defs/a"},
		{name: "dynamic ref loop", api: "chat", check: `{json_schema: {schema_file: dynamic_loop.schema.json}}`,
			err: "scenarios[0].check.json_schema.schema_file: dynamic_loop.schema.json: $ref loop that stays on the same value: # -> #/$defs/inner -> #/$defs/inner/anyOf/0 -> #"},
		{name: "exponential refs", api: "chat", check: `{json_schema: {schema_file: fanout.schema.json}}`,
			err: "scenarios[0].check.json_schema.schema_file: fanout.schema.json: applies more than 5000 subschemas to one value"},
		{name: "tool parameters ref loop", api: "chat", check: `{tool_call: {prompt: x, tools: [{name: f}, {name: g, parameters: {$ref: "#"}}]}}`,
			err: "scenarios[0].check.tool_call.tools[1].parameters: $ref loop that stays on the same value: # -> #"},
		{name: "tool parameters mutual ref loop", api: "chat",
			check: `{tool_call: {prompt: x, tools: [{name: f, parameters: {$defs: {a: {$ref: "#/$defs/b"}, b: {not: {$ref: "#/$defs/a"}}}, properties: {p: {$ref: "#/$defs/a"}}}}]}}`,
			err:   "scenarios[0].check.tool_call.tools[0].parameters: $ref loop that stays on the same value: #/$defs/a -> #/$defs/b -> #/$defs/b/not -> #/$defs/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(checkConfig(tc.api, tc.check)), false, dir)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.assert(t, c.Scenarios[0].Check)
			// Validate again (a reload's check, a test's spec): no file
			// is read and nothing changes.
			require.NoError(t, c.Validate())
			tc.assert(t, c.Scenarios[0].Check)
			require.Equal(t, c.Scenarios[0].Check.Name(), c.Scenarios[0].SLOs()[0].Name)
			require.True(t, c.Scenarios[0].SLOs()[0].IsQuality())
		})
	}
}

// TestCheckFileBound: a check's file beyond MaxCheckFileBytes is refused
// without being read whole.
func TestCheckFileBound(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.jsonl"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxCheckFileBytes+1))
	require.NoError(t, f.Close())
	_, err = Parse([]byte(checkConfig("chat", `{known_answer: {file: big.jsonl}}`)), false, dir)
	require.ErrorContains(t, err, "larger than 4194304 bytes")
}

// nestedSchema is a schema of n items nested in each other, n+1 levels of
// objects deep: {"items": {"items": ... {}}}.
func nestedSchema(n int) string {
	return strings.Repeat(`{"items": `, n) + `{}` + strings.Repeat(`}`, n)
}

// TestSchemaBounds: a schema deeper than MaxSchemaDepth or larger than
// MaxSchemaValues is refused before it is compiled, whose work grows with
// the cube of the depth (2,000 levels took 15 s and 16 GB of allocations)
// and the square of the subschemas (10,000 properties: 0.8 to 2 s;
// 100,000: 4 min).
func TestSchemaBounds(t *testing.T) {
	dir := t.TempDir()
	for name, n := range map[string]int{"deep": 2000, "at_limit": MaxSchemaDepth - 1, "over_limit": MaxSchemaDepth} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), []byte(nestedSchema(n)), 0o600))
	}
	values := func(n int) string { // a schema of n JSON values
		return `{"enum": [` + strings.Repeat(`"x", `, n-3) + `"x"]}`
	}
	const deepErr = "nested deeper than the limit of 64 levels of objects and arrays"
	for _, tc := range []struct {
		name, check, err string
	}{
		{name: "2,000 levels inline", check: `{json_schema: {schema: ` + nestedSchema(2000) + `}}`,
			err: "scenarios[0].check.json_schema.schema: " + deepErr},
		{name: "2,000 levels in a file", check: `{json_schema: {schema_file: deep.json}}`,
			err: "scenarios[0].check.json_schema.schema_file: deep.json: " + deepErr},
		{name: "2,000 levels of tool parameters", check: `{tool_call: {prompt: x, tools: [{name: f, parameters: ` + nestedSchema(2000) + `}]}}`,
			err: "scenarios[0].check.tool_call.tools[0].parameters: " + deepErr},
		{name: "64 levels", check: `{json_schema: {schema_file: at_limit.json}}`},
		{name: "65 levels", check: `{json_schema: {schema_file: over_limit.json}}`,
			err: "scenarios[0].check.json_schema.schema_file: over_limit.json: " + deepErr},
		{name: "65 levels of tool parameters", check: `{tool_call: {prompt: x, tools: [{name: f, parameters: ` + nestedSchema(MaxSchemaDepth) + `}]}}`,
			err: "scenarios[0].check.tool_call.tools[0].parameters: " + deepErr},
		{name: "most values", check: `{json_schema: {schema: ` + values(MaxSchemaValues) + `}}`},
		{name: "too many values", check: `{json_schema: {schema: ` + values(MaxSchemaValues+1) + `}}`,
			err: fmt.Sprintf("scenarios[0].check.json_schema.schema: more than the limit of %d JSON values", MaxSchemaValues)},
		{name: "too many values of tool parameters", check: `{tool_call: {prompt: x, tools: [{name: f, parameters: ` + values(MaxSchemaValues+1) + `}]}}`,
			err: fmt.Sprintf("scenarios[0].check.tool_call.tools[0].parameters: more than the limit of %d JSON values", MaxSchemaValues)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := Parse([]byte(checkConfig("chat", tc.check)), false, dir)
			// Refused before the compiler's work, in milliseconds: a
			// generous bound for -race on a shared machine, where the
			// compiler took minutes.
			require.Less(t, time.Since(start), 2*time.Second)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// TestSchemaLoopNamesFile: the error of a $ref loop in a schema file names
// the configuration file, the scenario's key, the schema file and the loop,
// as sloprober check config prints it.
func TestSchemaLoopNamesFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sloprober.yml")
	b, err := os.ReadFile(filepath.Join("testdata", "checks", "mutual_loop.schema.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "loop.json"), b, 0o600))
	require.NoError(t, os.WriteFile(cfg, []byte(checkConfig("chat", `{json_schema: {schema_file: loop.json}}`)), 0o600))
	_, err = LoadFile(cfg, false)
	require.EqualError(t, err, cfg+": line 3: scenarios[0].check.json_schema.schema_file: loop.json: "+
		"$ref loop that stays on the same value: #/$defs/a -> #/$defs/b -> #/$defs/b/allOf/1 -> #/$defs/a "+
		"(the validator stops it as an infinite loop: every reply that reaches it would fail; "+
		"a schema may refer back to itself only under a keyword that applies to a part of the value, such as properties or items)")
}
