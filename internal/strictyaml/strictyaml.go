// Package strictyaml decodes YAML strictly, with errors written for the
// author of the file rather than for a Go programmer.
package strictyaml

import (
	"errors"
	"strings"

	"go.yaml.in/yaml/v2"
)

// Unmarshal decodes b into v; an unknown key is an error. Errors name the
// line and key but not Go types: "line 2: field prefil not found", not
// "... in type config.plain".
func Unmarshal(b []byte, v any) error {
	err := yaml.UnmarshalStrict(b, v)
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		if j := strings.Index(m, " in type "); j > 0 {
			m = m[:j]
		}
		msgs[i] = m
	}
	return errors.New(strings.Join(msgs, "\n"))
}
