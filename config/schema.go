package config

import (
	"reflect"
	"strings"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/sloprober/sloprober/workload"
)

// SchemaID is the JSON Schema's $id: where editors find it in the
// repository (docs/sloprober.schema.json).
const SchemaID = "https://github.com/sloprober/sloprober/blob/main/docs/sloprober.schema.json"

// durationPattern is a Prometheus duration (model.Duration): 30s, 1m30s,
// 0s.
const durationPattern = `^((\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?|0)$`

// JSONSchema is the configuration file's JSON Schema (draft 2020-12),
// made from Config's types as the strict YAML decoder reads them: every
// key, its type, and the keys an object does not take (additionalProperties
// false). describe, if not nil, gives a field's description from its type
// and Go field name ("TargetConfig", "URL"); the tests fill it from the
// doc comments. Bounds and cross-references (a load's target must exist)
// are Validate's: a file the schema accepts can still fail check config,
// with an error naming the key.
func JSONSchema(describe func(typ, field string) string) map[string]any {
	g := &schemaGen{describe: describe, defs: map[string]any{}}
	root := g.object(reflect.TypeFor[Config]())
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = SchemaID
	root["title"] = "sloprober configuration"
	root["$defs"] = g.defs
	return root
}

type schemaGen struct {
	describe func(typ, field string) string
	defs     map[string]any
}

var (
	durationType = reflect.TypeFor[model.Duration]()
	distType     = reflect.TypeFor[workload.Distribution]()
	windowType   = reflect.TypeFor[WindowConfig]()
	urlType      = reflect.TypeFor[commoncfg.URL]()
	tlsVersion   = reflect.TypeFor[commoncfg.TLSVersion]()
)

// of is the schema of a value of type t.
func (g *schemaGen) of(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	duration := map[string]any{"type": "string", "pattern": durationPattern, "minLength": 1}
	switch t {
	case durationType:
		return duration
	case distType:
		// A plain number is a fixed length.
		return map[string]any{"anyOf": []any{map[string]any{"type": "integer", "minimum": 1}, g.ref(t)}}
	case windowType:
		// A soak's window may be its steady duration alone.
		return map[string]any{"anyOf": []any{duration, g.ref(t)}}
	case urlType:
		return map[string]any{"type": "string", "format": "uri"}
	case tlsVersion: // a uint16 read from its name
		return map[string]any{"enum": []any{"TLS10", "TLS11", "TLS12", "TLS13"}}
	}
	switch t.Kind() {
	case reflect.Struct:
		return g.ref(t)
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.of(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.of(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	}
	return map[string]any{} // any value (a JSON schema a check carries, a tool's parameters)
}

// ref defines struct type t once, under $defs, and refers to it.
func (g *schemaGen) ref(t reflect.Type) map[string]any {
	name := t.Name()
	if t.PkgPath() != reflect.TypeFor[Config]().PkgPath() {
		name = t.PkgPath()[strings.LastIndex(t.PkgPath(), "/")+1:] + "." + name
	}
	if _, ok := g.defs[name]; !ok {
		g.defs[name] = nil // a recursive type refers to itself
		g.defs[name] = g.object(t)
	}
	return map[string]any{"$ref": "#/$defs/" + name}
}

// object is the schema of struct type t: its YAML keys, inlined structs'
// merged in; an inlined map takes any other key.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var rest any = false
	var fields func(t reflect.Type)
	fields = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() && !f.Anonymous {
				continue
			}
			if strings.Contains(","+opts+",", ",inline,") {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				switch ft.Kind() {
				case reflect.Struct:
					fields(ft)
				case reflect.Map:
					rest = g.of(ft.Elem())
				}
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			s := g.of(f.Type)
			if g.describe != nil {
				if d := g.describe(t.Name(), f.Name); d != "" {
					if _, isRef := s["$ref"]; isRef {
						s = map[string]any{"allOf": []any{s}} // $ref beside keywords: older validators ignore them
					}
					s["description"] = d
				}
			}
			props[name] = s
		}
	}
	fields(t)
	return map[string]any{"type": "object", "properties": props, "additionalProperties": rest}
}
