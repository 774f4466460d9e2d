package simulator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// validates compiles schema with a real JSON schema validator and reports
// whether doc satisfies it (and why not).
func validates(t *testing.T, schema, doc string) error {
	t.Helper()
	s, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("schema.json", s))
	sch, err := c.Compile("schema.json")
	require.NoError(t, err, schema)
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// TestGenerateSatisfiesSchema: the generated document is valid for its
// schema by a real validator, lists properties in the schema's order and
// is the same every time.
func TestGenerateSatisfiesSchema(t *testing.T) {
	for _, tc := range []struct{ name, schema, want string }{
		{"strings", `{"type":"object","properties":{"city":{"type":"string"},"code":{"type":"string","minLength":8,"maxLength":9},"x":{"type":"string","maxLength":2}},"required":["city"]}`,
			`{"city": "city", "code": "codexxxx", "x": "x"}`},
		{"numbers", `{"type":"object","properties":{"n":{"type":"integer"},"lo":{"type":"integer","minimum":100},"hi":{"type":"integer","maximum":-3},"ex":{"type":"integer","exclusiveMinimum":41,"exclusiveMaximum":43},"f":{"type":"number"},"between":{"type":"number","minimum":10,"maximum":11},"gt":{"type":"number","exclusiveMinimum":4.5},"lt":{"type":"number","exclusiveMaximum":0}}}`,
			`{"n": 42, "lo": 100, "hi": -3, "ex": 42, "f": 4.5, "between": 10.5, "gt": 5.5, "lt": -1}`},
		{"enum const bool null", `{"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit"]},"v":{"const":{"a":[1, 2]}},"ok":{"type":"boolean"},"nothing":{"type":"null"},"maybe":{"type":["string","null"]},"orNot":{"type":["null","integer"]}}}`,
			`{"unit": "celsius", "v": {"a":[1,2]}, "ok": true, "nothing": null, "maybe": "maybe", "orNot": 42}`},
		{"arrays", `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}},"three":{"type":"array","items":{"type":"integer"},"minItems":3},"none":{"type":"array","maxItems":0},"any":{"type":"array"}}}`,
			`{"tags": ["item"], "three": [42, 42, 42], "none": [], "any": ["item"]}`},
		{"nested, annotations", `{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t","description":"d","type":"object","additionalProperties":false,"properties":{"who":{"type":"object","properties":{"name":{"type":"string","description":"a name","default":"x"}},"required":["name"],"additionalProperties":false}},"required":["who"]}`,
			`{"who": {"name": "name"}}`},
		{"properties without type", `{"properties":{"q":{"type":"string"}}}`, `{"q": "q"}`},
		{"escapes", `{"type":"object","properties":{"say \"hi\"\\":{"type":"string"}}}`, `{"say \"hi\"\\": "say \"hi\"\\"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSchema(json.RawMessage(tc.schema), "$")
			require.NoError(t, err)
			doc, dropped, err := generate(s, false)
			require.NoError(t, err)
			require.False(t, dropped)
			require.Equal(t, tc.want, doc)
			require.NoError(t, validates(t, tc.schema, doc))
			again, _, _ := generate(s, false)
			require.Equal(t, doc, again, "deterministic")
		})
	}
}

// TestGenerateDropsRequired: with dropRequired the document is valid JSON
// without the first required property met (the root's first), so a real
// validator refuses it; a schema that requires nothing cannot be broken so.
func TestGenerateDropsRequired(t *testing.T) {
	const sch = `{"type":"object","properties":{"a":{"type":"string"},"inner":{"type":"object","properties":{"b":{"type":"integer"}},"required":["b"]}},"required":["inner"]}`
	s, err := parseSchema(json.RawMessage(sch), "$")
	require.NoError(t, err)
	doc, dropped, err := generate(s, true)
	require.NoError(t, err)
	require.True(t, dropped)
	require.Equal(t, `{"a": "a"}`, doc, "the root's required property goes first")
	require.True(t, json.Valid([]byte(doc)))
	require.ErrorContains(t, validates(t, sch, doc), "missing property 'inner'")

	const nested = `{"type":"object","properties":{"inner":{"type":"object","properties":{"b":{"type":"integer"},"c":{"type":"integer"}},"required":["c"]}}}`
	s, err = parseSchema(json.RawMessage(nested), "$")
	require.NoError(t, err)
	doc, dropped, _ = generate(s, true)
	require.True(t, dropped)
	require.Equal(t, `{"inner": {"b": 42}}`, doc, "else the first required one found, depth first")
	require.Error(t, validates(t, nested, doc))

	s, err = parseSchema(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`), "$")
	require.NoError(t, err)
	_, dropped, _ = generate(s, true)
	require.False(t, dropped, "nothing is required")
}

// TestSchemaErrors: what the generator cannot satisfy with certainty is an
// error naming the keyword and where it is.
func TestSchemaErrors(t *testing.T) {
	for schema, want := range map[string]string{
		`[]`: "$: a schema must be a JSON object",
		`{"type":"object","properties":{"a":{"anyOf":[{"type":"string"}]}}}`: `$.properties.a: the keyword "anyOf" is not supported`,
		`{"$ref":"#/$defs/x"}`:                                                           `$: the keyword "$ref" is not supported`,
		`{"type":"string","pattern":"^a+$"}`:                                             `$: the keyword "pattern" is not supported`,
		`{"type":"string","format":"date-time"}`:                                         `$: the keyword "format" is not supported`,
		`{"type":"number","multipleOf":3}`:                                               `$: the keyword "multipleOf" is not supported`,
		`{"type":"array","items":{"type":"object","properties":{"x":{"not":{}}}}}`:       `$.items.properties.x: the keyword "not" is not supported`,
		`{"type":"strnig"}`:                                                              `$.type: unknown type "strnig"`,
		`{"type":[]}`:                                                                    "$.type: must be a type name or a non-empty list of them",
		`{"description":"no type"}`:                                                      "$: a schema needs a type, properties, enum or const",
		`{"type":"object","properties":{"a":{"type":"string"}},"required":["b"]}`:        `$.required: the required property "b" is not in properties`,
		`{"type":"object","properties":[]}`:                                              "$.properties: must be an object",
		`{"enum":[]}`:                                                                    "$.enum: must be a non-empty list",
		`{"type":"integer","minimum":"1"}`:                                               "$.minimum: must be a number",
		`{"type":"string","minLength":-1}`:                                               "$.minLength: must be a non-negative integer",
		`{"type":"string","minLength":3,"maxLength":2}`:                                  "$: minLength 3 is above maxLength 2",
		`{"type":"integer","minimum":1.5,"maximum":1.9}`:                                 "$: no integer lies within its minimum and maximum",
		`{"type":"integer","exclusiveMinimum":1,"exclusiveMaximum":2}`:                   "$: no integer lies within its minimum and maximum",
		`{"type":"number","exclusiveMinimum":1,"exclusiveMaximum":1}`:                    "$: no number lies within its minimum and maximum",
		`{"type":"array","items":{"type":"string"},"minItems":3,"maxItems":2}`:           "$: minItems 3 is above maxItems 2",
		`{"type":"object","properties":{"big":{"type":"integer","minimum":1e300}}}`:      "$.properties.big: bounds beyond ±2^53 are not supported",
		`{"type":"object","properties":{"n":{"type":"number","minimum":3,"maximum":2}}}`: "$.properties.n: no number lies within its minimum and maximum",
	} {
		s, err := parseSchema(json.RawMessage(schema), "$")
		if err == nil {
			_, _, err = generate(s, false)
		}
		require.ErrorContains(t, err, want, schema)
	}
	_, _, err := documentSchema([]byte(`{"type":"string"}`), "text.format.schema")
	require.EqualError(t, err, "text.format.schema: $: the root of the schema must be an object (type: object)")
}

// TestTruncate: a document cut halfway is never valid JSON, since its root
// is an object.
func TestTruncate(t *testing.T) {
	for _, doc := range []string{`{}`, `{"a": 1}`, `{"é": "ü€"}`, `{"a": [1, 2, {"b": null}]}`} {
		cut := truncate(doc)
		require.True(t, strings.HasPrefix(doc, cut))
		require.Less(t, len(cut), len(doc))
		require.False(t, json.Valid([]byte(cut)), "%q cut to %q", doc, cut)
	}
}

// TestPieces: the pieces of a text join to the text again and each counts
// as one token, for both tokenizers.
func TestPieces(t *testing.T) {
	for _, tc := range []struct {
		tok  TokenizerConfig
		text string
		want []string
	}{
		{TokenizerConfig{CharsPerToken: 4}, `{"city": "Paris"}`, []string{`{"ci`, `ty":`, ` "Pa`, `ris"`, `}`}},
		{TokenizerConfig{CharsPerToken: 4}, "12345 ", []string{"1234", "5 "}},
		{TokenizerConfig{CharsPerToken: 1}, "-7", []string{"-", "7"}},
		{TokenizerConfig{CharsPerToken: 3}, "ü€ab", []string{"ü€a", "b"}},
		{TokenizerConfig{Words: true}, `{"city": "Paris", "n": 3}`, []string{`{"city": `, `"Paris", `, `"n": `, `3}`}},
		{TokenizerConfig{Words: true}, "  lead and trail  ", []string{"  lead ", "and ", "trail  "}},
		{TokenizerConfig{Words: true}, "-1234", []string{"-1234"}},
	} {
		tk := newTokenizer(tc.tok)
		got := tk.pieces(tc.text)
		require.Equal(t, tc.want, got, "%+v %q", tc.tok, tc.text)
		require.Equal(t, tc.text, strings.Join(got, ""))
		for _, p := range got {
			require.Equal(t, 1, tk.tokenize([]string{p}, 0).tokens, "piece %q", p)
		}
		require.Equal(t, len(got), tk.tokenize([]string{tc.text}, 0).tokens)
	}
}

// TestKnownAnswer: the question's form, its last occurrence, the operand
// bound and the arithmetic; wrong answers are off by 1 to 10, never 0.
func TestKnownAnswer(t *testing.T) {
	for text, want := range map[string]int64{
		"What is 2 + 2?": 4,
		"filler... What is 1000000000 * -1000000000?": -1_000_000_000_000_000_000,
		"What is -5 - -7?":                            2,
		"What is 1 + 1? And then: What is 3 * 4?":     12,
		"Q: What is 0 - 999999999?":                   -999_999_999,
		"So,What is 2 + 2?":                           4,
		"What is 3 + 3? What is not a question.":      6,
		"What is What is 5 * 5?":                      25,
	} {
		got, ok := knownAnswer(text)
		require.True(t, ok, text)
		require.Equal(t, want, got, text)
	}
	for _, text := range []string{
		"What is 2+2?", "what is 2 + 2?", "What is 2 + 2", "What is 2 / 2?", "What is 1000000001 + 1?",
		"What is 12345678901 + 1?", "SoWhat is 2 + 2?", "What is two + 2?", "",
		"What is 1 + 1? What is 1000000001 + 1?", // the last match counts, though its operand is too big
	} {
		_, ok := knownAnswer(text)
		require.False(t, ok, text)
	}
	seen := map[int64]bool{}
	for i := range 200 {
		d := wrongBy(float64(i) / 200)
		require.NotZero(t, d)
		require.LessOrEqual(t, abs(d), int64(10))
		seen[d] = true
	}
	require.Len(t, seen, 20, "every error from -10 to 10 but 0")
}
