package simulator

// JSON schemas: the structured outputs and tool-call arguments the
// simulator generates must satisfy the schema a request gives, so that a
// prober's validation has a known right answer. The generator is small and
// deterministic (the same schema gives the same document) and refuses what
// it cannot satisfy with certainty, rather than emit a document that might
// not validate.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// schema is a JSON schema as far as the generator reads it. Object
// properties keep the order the schema lists them in, and the generated
// document lists them in that order too.
type schema struct {
	typ        string // one of jsonTypes, "" when the schema gives none
	properties []property
	required   []string
	items      *schema
	enum       []json.RawMessage
	constant   json.RawMessage
	minimum    *float64
	maximum    *float64
	exclMin    *float64
	exclMax    *float64
	minLength  *int
	maxLength  *int
	minItems   *int
	maxItems   *int
}

type property struct {
	name   string
	schema *schema
}

var jsonTypes = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

// annotations are keywords that constrain nothing the generator emits:
// additionalProperties included, since only listed properties are emitted.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"additionalProperties": true,
}

// schemaError is a schema the generator cannot satisfy; at says where, as a
// JSON path ($ is the schema's root).
type schemaError struct {
	at, msg string
}

func (e *schemaError) Error() string { return e.at + ": " + e.msg }

func schemaErr(at, format string, args ...any) error {
	return &schemaError{at: at, msg: fmt.Sprintf(format, args...)}
}

// parseSchema reads a JSON schema. Keywords it does not know (anyOf, $ref,
// pattern, format, multipleOf, ...) are errors naming the keyword and where
// it is: the simulator could not promise a document that satisfies them.
func parseSchema(raw json.RawMessage, at string) (*schema, error) {
	keys, vals, err := objectMembers(raw)
	if err != nil {
		return nil, schemaErr(at, "a schema must be a JSON object")
	}
	s := &schema{}
	var types []string
	for i, k := range keys {
		v := vals[i]
		switch k {
		case "type":
			if types, err = schemaTypes(v); err != nil {
				return nil, schemaErr(at+".type", "%v", err)
			}
		case "properties":
			names, schemas, err := objectMembers(v)
			if err != nil {
				return nil, schemaErr(at+".properties", "must be an object")
			}
			for j, name := range names {
				ps, err := parseSchema(schemas[j], at+".properties."+name)
				if err != nil {
					return nil, err
				}
				s.properties = append(s.properties, property{name, ps})
			}
		case "required":
			if json.Unmarshal(v, &s.required) != nil {
				return nil, schemaErr(at+".required", "must be a list of property names")
			}
		case "items":
			if s.items, err = parseSchema(v, at+".items"); err != nil {
				return nil, err
			}
		case "enum":
			if json.Unmarshal(v, &s.enum) != nil || len(s.enum) == 0 {
				return nil, schemaErr(at+".enum", "must be a non-empty list")
			}
		case "const":
			s.constant = v
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			var f float64
			if json.Unmarshal(v, &f) != nil {
				return nil, schemaErr(at+"."+k, "must be a number")
			}
			switch k {
			case "minimum":
				s.minimum = &f
			case "maximum":
				s.maximum = &f
			case "exclusiveMinimum":
				s.exclMin = &f
			default:
				s.exclMax = &f
			}
		case "minLength", "maxLength", "minItems", "maxItems":
			var n int
			if json.Unmarshal(v, &n) != nil || n < 0 {
				return nil, schemaErr(at+"."+k, "must be a non-negative integer")
			}
			switch k {
			case "minLength":
				s.minLength = &n
			case "maxLength":
				s.maxLength = &n
			case "minItems":
				s.minItems = &n
			default:
				s.maxItems = &n
			}
		default:
			if !annotations[k] {
				return nil, schemaErr(at, "the keyword %q is not supported by the simulator's generator (it knows type, properties, required, items, enum, const, minimum, maximum, exclusiveMinimum, exclusiveMaximum, minLength, maxLength, minItems, maxItems)", k)
			}
		}
	}
	// A type list (["string", "null"]) is satisfied by its first type
	// other than null.
	for _, t := range types {
		if s.typ == "" || s.typ == "null" {
			s.typ = t
		}
	}
	if s.typ == "" && s.properties != nil {
		s.typ = "object"
	}
	for _, r := range s.required {
		if !slices.ContainsFunc(s.properties, func(p property) bool { return p.name == r }) {
			return nil, schemaErr(at+".required", "the required property %q is not in properties", r)
		}
	}
	if s.typ == "" && s.enum == nil && s.constant == nil {
		return nil, schemaErr(at, "a schema needs a type, properties, enum or const")
	}
	return s, nil
}

// schemaTypes reads a type keyword: a type name or a list of them.
func schemaTypes(raw json.RawMessage) ([]string, error) {
	var types []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		types = []string{one}
	} else if json.Unmarshal(raw, &types) != nil || len(types) == 0 {
		return nil, fmt.Errorf("must be a type name or a non-empty list of them")
	}
	for _, t := range types {
		if !slices.Contains(jsonTypes, t) {
			return nil, fmt.Errorf("unknown type %q", t)
		}
	}
	return types, nil
}

// objectMembers returns a JSON object's keys and values in document order,
// which encoding/json's maps lose.
func objectMembers(raw json.RawMessage) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("not a JSON object")
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, t.(string)), append(vals, v)
	}
	return keys, vals, nil
}

// generator writes a document that satisfies a schema, in the layout many
// models write: ", " and ": " separators, which with a words tokenizer also
// cut the document into several tokens.
type generator struct {
	b []byte
	// dropRequired, when set, leaves out the first required property met
	// (the root object's first, if it requires one), for a document that
	// is valid JSON but not valid for its schema; it is cleared once one
	// was left out.
	dropRequired bool
	dropped      string // the property left out, for a test's message
}

// generate returns the document for s. With dropRequired, it also reports
// whether a required property could be left out.
func generate(s *schema, dropRequired bool) (doc string, dropped bool, err error) {
	g := &generator{dropRequired: dropRequired}
	if err := g.value(s, "$", ""); err != nil {
		return "", false, err
	}
	return string(g.b), dropRequired && !g.dropRequired, nil
}

// value appends a value for s at path at; name is the property it is the
// value of ("" for none), the seed of a string.
func (g *generator) value(s *schema, at, name string) error {
	switch {
	case s.constant != nil:
		return g.raw(s.constant, at+".const")
	case s.enum != nil:
		return g.raw(s.enum[0], at+".enum")
	}
	switch s.typ {
	case "object":
		return g.object(s, at)
	case "array":
		return g.array(s, at)
	case "string":
		return g.str(s, at, name)
	case "integer":
		return g.integer(s, at)
	case "number":
		return g.number(s, at)
	case "boolean":
		g.b = append(g.b, "true"...)
	case "null":
		g.b = append(g.b, "null"...)
	}
	return nil
}

func (g *generator) raw(v json.RawMessage, at string) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return schemaErr(at, "not valid JSON")
	}
	g.b = append(g.b, buf.Bytes()...)
	return nil
}

func (g *generator) object(s *schema, at string) error {
	drop := ""
	if g.dropRequired && len(s.required) > 0 {
		drop, g.dropRequired, g.dropped = s.required[0], false, at+"."+s.required[0]
	}
	g.b = append(g.b, '{')
	first := true
	for _, p := range s.properties {
		if p.name == drop {
			continue
		}
		if !first {
			g.b = append(g.b, ", "...)
		}
		first = false
		g.b = appendJSONString(g.b, p.name)
		g.b = append(g.b, ": "...)
		if err := g.value(p.schema, at+".properties."+p.name, p.name); err != nil {
			return err
		}
	}
	g.b = append(g.b, '}')
	return nil
}

func (g *generator) array(s *schema, at string) error {
	n := 1
	if s.minItems != nil {
		n = max(n, *s.minItems)
	}
	if s.maxItems != nil {
		if s.minItems != nil && *s.minItems > *s.maxItems {
			return schemaErr(at, "minItems %d is above maxItems %d", *s.minItems, *s.maxItems)
		}
		n = min(n, *s.maxItems)
	}
	item := s.items
	if item == nil {
		item = &schema{typ: "string"} // anything goes
	}
	g.b = append(g.b, '[')
	for i := range n {
		if i > 0 {
			g.b = append(g.b, ", "...)
		}
		if err := g.value(item, at+".items", "item"); err != nil {
			return err
		}
	}
	g.b = append(g.b, ']')
	return nil
}

// str is the property's name (or "text"), padded with x to minLength and
// cut to maxLength, in characters as JSON schema counts them.
func (g *generator) str(s *schema, at, name string) error {
	v := name
	if v == "" {
		v = "text"
	}
	if s.minLength != nil && s.maxLength != nil && *s.minLength > *s.maxLength {
		return schemaErr(at, "minLength %d is above maxLength %d", *s.minLength, *s.maxLength)
	}
	if s.minLength != nil {
		if n := *s.minLength - utf8.RuneCountInString(v); n > 0 {
			v += strings.Repeat("x", n)
		}
	}
	if s.maxLength != nil && utf8.RuneCountInString(v) > *s.maxLength {
		v = string([]rune(v)[:*s.maxLength])
	}
	g.b = appendJSONString(g.b, v)
	return nil
}

// bounds returns the closed range a number must lie in; exclusive bounds
// are moved in by step (1 for integers).
func (s *schema) bounds(step float64) (lo, hi float64) {
	lo, hi = math.Inf(-1), math.Inf(1)
	if s.minimum != nil {
		lo = *s.minimum
	}
	if s.exclMin != nil {
		lo = max(lo, *s.exclMin+step)
	}
	if s.maximum != nil {
		hi = *s.maximum
	}
	if s.exclMax != nil {
		hi = min(hi, *s.exclMax-step)
	}
	return lo, hi
}

// integer is 42, or the closest integer to it within the bounds.
func (g *generator) integer(s *schema, at string) error {
	lo, hi := s.bounds(1)
	lo, hi = math.Ceil(lo), math.Floor(hi)
	if lo > hi {
		return schemaErr(at, "no integer lies within its minimum and maximum")
	}
	v := min(max(42, lo), hi)
	if math.Abs(v) > 1<<53 {
		return schemaErr(at, "bounds beyond ±2^53 are not supported")
	}
	g.b = strconv.AppendInt(g.b, int64(v), 10)
	return nil
}

// number is 4.5, or within bounds: the middle of two, or next to one.
func (g *generator) number(s *schema, at string) error {
	lo, hi := s.bounds(0)
	inclusive := func(v float64) bool {
		return (s.exclMin == nil || v > *s.exclMin) && (s.exclMax == nil || v < *s.exclMax) && v >= lo && v <= hi
	}
	v := 4.5
	switch {
	case inclusive(v):
	case !math.IsInf(lo, 0) && !math.IsInf(hi, 0):
		v = lo + (hi-lo)/2
	case !math.IsInf(lo, 0):
		v = lo + 1
	case !math.IsInf(hi, 0):
		v = hi - 1
	}
	if !inclusive(v) || math.IsInf(v, 0) || math.IsNaN(v) {
		return schemaErr(at, "no number lies within its minimum and maximum")
	}
	g.b = strconv.AppendFloat(g.b, v, 'f', -1, 64)
	return nil
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, everything else as it is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendEscaped(b, s)
	return append(b, '"')
}

// appendEscaped appends s escaped for the inside of a JSON string.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	return append(b, s[start:]...)
}
