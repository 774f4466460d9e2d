// Package strictyaml decodes YAML strictly, with errors written for the
// author of the file rather than for a Go programmer.
package strictyaml

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v2"
	yaml3 "go.yaml.in/yaml/v3"
)

// Unmarshal decodes b into v; an unknown key is an error. Errors name the
// line and key but not Go types: "line 2: field prefil not found", not
// "... in type config.plain".
//
// A value that a type decodes itself (a duration, a length distribution)
// fails without a position in yaml v2: `timeout: five` gives only
// `not a valid duration string: "five"`. Such an error is located
// afterwards and names the line and the key path:
// `line 7: targets[0].timeout: not a valid duration string: "five"`.
func Unmarshal(b []byte, v any) error {
	err := yaml.UnmarshalStrict(b, v)
	if err == nil {
		return nil
	}
	// Every error of the file, not the first: a user fixes them in one go.
	if ps, rest := check(b, v); len(ps) > 0 {
		e := &Error{Rest: rest}
		for _, p := range ps {
			e.Lines = append(e.Lines, Line{p.line, p.path, p.String()})
		}
		return e
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return locate(b, v, err)
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

// Error is Unmarshal's error when it found every error of the file: each
// at its line and key path.
type Error struct {
	Lines []Line
	// Rest is the file without the keys to blame (nil when an error is
	// an element of a sequence's): what decodes of it, checked further
	// (its references, its values' ranges), tells the rest of the
	// errors in the same go, not after these are fixed.
	Rest []byte
}

// Line is an error of a file: its line, the key path it names and its
// text, "line 7: targets[0].timeout: ...".
type Line struct {
	Line int
	Path string
	Text string
}

// Error is the errors, a line each, the first maxProblems of them.
func (e *Error) Error() string {
	return Join(e.Lines)
}

// Join writes errors a line each, sorted by their line (stable), at most
// maxProblems of them and how many more there are.
func Join(ls []Line) string {
	ls = slices.Clone(ls)
	slices.SortStableFunc(ls, func(a, b Line) int { return a.Line - b.Line })
	msgs := make([]string, 0, min(len(ls), maxProblems)+1)
	for _, l := range ls[:min(len(ls), maxProblems)] {
		msgs = append(msgs, l.Text)
	}
	if len(ls) > maxProblems {
		msgs = append(msgs, fmt.Sprintf("and %d more errors", len(ls)-maxProblems))
	}
	return strings.Join(msgs, "\n")
}

// locate finds where a value's own UnmarshalYAML failed with err, which
// yaml v2 reports without a position. It parses b again into yaml v3 nodes,
// which keep their lines, and walks them beside v's type: a node is to
// blame when decoding it alone into the Go type at its place fails with the
// same message, and none of its children does. The walk decodes each
// subtree on the way down once per level, O(size × depth), and runs only
// on this error path. When the message cannot be reproduced (a syntax
// error, a document v3 reads differently), err is returned as it is.
func locate(b []byte, v any, err error) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return err
	}
	var doc yaml3.Node
	if yaml3.Unmarshal(b, &doc) != nil || doc.Kind != yaml3.DocumentNode || len(doc.Content) != 1 {
		return err
	}
	path, line, ok := find(doc.Content[0], t.Elem(), "", err.Error())
	if !ok || path == "" {
		return err
	}
	if hint := UnitHint(err.Error()); hint != err.Error() {
		return fmt.Errorf("line %d: %s: %s", line, path, hint)
	}
	return fmt.Errorf("line %d: %s: %w", line, path, err)
}

// find returns the key path and line of the deepest node under n that,
// decoded into a t, fails with msg.
func find(n *yaml3.Node, t reflect.Type, path, msg string) (string, int, bool) {
	if n.Kind == yaml3.AliasNode {
		return "", 0, false
	}
	if err := n.Decode(reflect.New(t).Interface()); err == nil || err.Error() != msg {
		return "", 0, false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml3.MappingNode && t.Kind() == reflect.Struct:
		keys := fields(t, nil)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if ft, ok := keys[k]; ok {
				if p, l, ok := find(n.Content[i+1], ft, join(path, k), msg); ok {
					return p, l, true
				}
			}
		}
	case n.Kind == yaml3.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if p, l, ok := find(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), msg); ok {
				return p, l, true
			}
		}
	case n.Kind == yaml3.SequenceNode && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i, c := range n.Content {
			if p, l, ok := find(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), msg); ok {
				return p, l, true
			}
		}
	}
	return path, n.Line, true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Fields maps the YAML keys of struct type t to their field types, with
// the fields of inlined structs merged in, as yaml v2 reads them.
func Fields(t reflect.Type) map[string]reflect.Type { return fields(t, nil) }

// fields is Fields, merged into m (nil: a new map).
func fields(t reflect.Type, m map[string]reflect.Type) map[string]reflect.Type {
	if m == nil {
		m = map[string]reflect.Type{}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if ft := f.Type; strings.Contains(","+opts+",", ",inline,") {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				fields(ft, m)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f.Type
	}
	return m
}
