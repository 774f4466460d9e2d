package config

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite docs/sloprober.schema.json")

const schemaFile = "../docs/sloprober.schema.json"

// docComments returns the doc comments of the fields of this package's
// structs, by type and field name, as one line each.
func docComments(t *testing.T) func(typ, field string) string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	docs := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, f := range st.Fields.List {
				if f.Doc == nil {
					continue
				}
				for _, name := range f.Names {
					docs[ts.Name.Name+"."+name.Name] = strings.Join(strings.Fields(f.Doc.Text()), " ")
				}
			}
			return false
		})
	}
	return func(typ, field string) string { return docs[typ+"."+field] }
}

// TestJSONSchema: docs/sloprober.schema.json is the schema JSONSchema
// makes, with the fields' doc comments as descriptions; every
// configuration that loads validates against it, and an unknown or
// mistyped key does not.
func TestJSONSchema(t *testing.T) {
	b, err := json.MarshalIndent(JSONSchema(docComments(t)), "", "  ")
	require.NoError(t, err)
	b = append(b, '\n')
	if *updateSchema {
		require.NoError(t, os.WriteFile(schemaFile, b, 0o644))
	}
	want, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	require.Equal(t, string(want), string(b), "run go test ./config -run TestJSONSchema -update-schema after changing the configuration's types")

	c := jsonschema.NewCompiler()
	sch, err := c.Compile(schemaFile)
	require.NoError(t, err)
	asJSON := func(y []byte) any {
		var v any
		require.NoError(t, yaml.Unmarshal(y, &v))
		j, err := json.Marshal(v)
		require.NoError(t, err)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		require.NoError(t, err)
		return doc
	}
	var files []string
	for _, glob := range []string{"testdata/*.yml", "testdata/*/*.yml", "../examples/*.yml", "../examples/*/*.yml", "../cmd/sloprober/default.yml", "../cmd/sloprober/testdata/*.yml", "../deploy/compose/sloprober.yml", "../deploy/kubernetes/base/sloprober.yml"} {
		m, err := filepath.Glob(glob)
		require.NoError(t, err)
		files = append(files, m...)
	}
	valid := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		text := strings.NewReplacer("{{SIM_URL}}", "http://127.0.0.1:8000/v1", "{{SIM_ROOT}}", "http://127.0.0.1:8000").Replace(string(raw))
		if _, err := Parse([]byte(text), false, filepath.Dir(f)); err != nil {
			continue // the schema may or may not refuse what Validate refuses
		}
		valid++
		require.NoError(t, sch.Validate(asJSON([]byte(text))), f)
	}
	require.GreaterOrEqual(t, valid, 10, "configurations checked")

	base := "targets: [{name: a, url: \"http://127.0.0.1:1/v1\", model: m}]\nscenarios: [{name: s}]\ncanary: [{target: a, scenario: s, rate: 1}]\n"
	require.NoError(t, sch.Validate(asJSON([]byte(base))))
	tls := strings.Replace(base, "model: m", "model: m, tls_config: {min_version: TLS12}", 1)
	_, err = Load([]byte(tls), false)
	require.NoError(t, err)
	require.NoError(t, sch.Validate(asJSON([]byte(tls))), "a TLS version by name")
	for _, bad := range []string{
		strings.Replace(base, "model: m", "model: m, timout: 5s", 1),
		strings.Replace(base, "rate: 1", "rate: fast", 1),
		strings.Replace(base, "{name: s}", "{name: s, input_tokens: abc}", 1),
		base + "tests: [{name: t, kind: step, target: a, scenario: s, window: {steady: soon}}]\n",
		strings.Replace(base, "model: m", "model: m, timeout: ''", 1),
	} {
		require.Error(t, sch.Validate(asJSON([]byte(bad))), bad)
	}
}
