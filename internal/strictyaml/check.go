package strictyaml

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v2"
	yaml3 "go.yaml.in/yaml/v3"
)

// maxProblems bounds the errors a file is reported with: a file of a
// thousand bad entries says so in 20 lines, not a thousand.
const maxProblems = 20

// problem is one error of a file, at its line and key path. key is the
// mapping key the error is a value (or a name) of, nil for an element of
// a sequence: what the file is without it (Error.Rest) leaves it out.
type problem struct {
	line int
	path string
	msg  string
	key  *yaml3.Node
}

func (p problem) String() string {
	if p.path == "" {
		return fmt.Sprintf("line %d: %s", p.line, p.msg)
	}
	return fmt.Sprintf("line %d: %s: %s", p.line, p.path, p.msg)
}

// check finds every error of a document that yaml v2 failed to decode
// into v, instead of the first: every unknown key (with the known key it
// is most likely a typo of) and every value that does not decode, each at
// its line and key path. It walks yaml v3 nodes, which keep their lines,
// beside v's type, and descends only into the subtrees that fail to decode
// on their own with yaml v2 (the decoder the file is read with): a subtree
// that decodes is never blamed, whatever a type's own UnmarshalYAML makes
// of its keys. A failing subtree in which no part is to blame is itself
// the error. It returns nil when the document does not parse as yaml v3.
//
// It also returns the document without the keys to blame, to be checked
// further (Error.Rest), or nil when a problem is not a key's (an element
// of a sequence: leaving it out would renumber the ones after it).
func check(b []byte, v any) ([]problem, []byte) {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return nil, nil
	}
	var doc yaml3.Node
	if yaml3.Unmarshal(b, &doc) != nil || doc.Kind != yaml3.DocumentNode || len(doc.Content) != 1 {
		return nil, nil
	}
	ps := walk(doc.Content[0], nil, t.Elem(), "")
	slices.SortStableFunc(ps, func(a, b problem) int { return a.line - b.line })
	return ps, without(&doc, ps)
}

// without is the document doc without the keys of ps (each with its
// value), encoded; nil if a problem has no key.
func without(doc *yaml3.Node, ps []problem) []byte {
	blamed := map[*yaml3.Node]bool{}
	for _, p := range ps {
		if p.key == nil {
			return nil
		}
		blamed[p.key] = true
	}
	var cut func(n *yaml3.Node)
	cut = func(n *yaml3.Node) {
		if n.Kind == yaml3.MappingNode {
			kept := n.Content[:0:0]
			for i := 0; i+1 < len(n.Content); i += 2 {
				if !blamed[n.Content[i]] {
					kept = append(kept, n.Content[i], n.Content[i+1])
				}
			}
			n.Content = kept
		}
		for _, c := range n.Content {
			cut(c)
		}
	}
	cut(doc)
	b, err := yaml3.Marshal(doc)
	if err != nil {
		return nil
	}
	return b
}

// walk checks n, the value of the mapping key key (nil for an element of
// a sequence, or the document), against t.
func walk(n, key *yaml3.Node, t reflect.Type, path string) []problem {
	if n.Kind == yaml3.AliasNode {
		return nil // its anchor's subtree is checked where it is
	}
	// A subtree holding an alias refers to an anchor elsewhere in the
	// file: it cannot be decoded on its own, only its parts without one.
	alias := hasAlias(n)
	var err error
	if !alias {
		if err = decodeAlone(n, t); err == nil {
			return nil
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var ps []problem
	switch {
	case n.Kind == yaml3.MappingNode && t.Kind() == reflect.Struct:
		keys, rest := fieldsAndRest(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			ft, ok := keys[k]
			switch {
			case k == "<<":
				continue // a merge key: its mapping's keys are this one's
			case ok:
			case rest != nil:
				ft = rest
			default:
				msg := "no such key"
				if s := suggest(k, keys); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				ps = append(ps, problem{n.Content[i].Line, join(path, k), msg, n.Content[i]})
				continue
			}
			ps = append(ps, walk(n.Content[i+1], n.Content[i], ft, join(path, k))...)
		}
	case n.Kind == yaml3.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			ps = append(ps, walk(n.Content[i+1], n.Content[i], t.Elem(), join(path, n.Content[i].Value))...)
		}
	case n.Kind == yaml3.SequenceNode && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i, c := range n.Content {
			ps = append(ps, walk(c, nil, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	if len(ps) == 0 && path != "" && !alias {
		// The document as a whole is left to Unmarshal's own report.
		ps = append(ps, problem{n.Line, path, message(err), key})
	}
	return ps
}

// hasAlias reports whether the subtree n holds an alias.
func hasAlias(n *yaml3.Node) bool {
	if n.Kind == yaml3.AliasNode {
		return true
	}
	return slices.ContainsFunc(n.Content, hasAlias)
}

// decodeAlone decodes the subtree n into a new t with yaml v2, strictly.
func decodeAlone(n *yaml3.Node, t reflect.Type) error {
	b, err := yaml3.Marshal(n)
	if err != nil {
		return nil // not a subtree this walk can judge
	}
	return yaml.UnmarshalStrict(b, reflect.New(t).Interface())
}

// snippetLine is the position yaml v2 gives within a re-encoded subtree:
// not the file's line, which the node gives.
var snippetLine = regexp.MustCompile(`^(yaml: )?(unmarshal errors:\s*)?line \d+: `)

// message is a decoding error's text without its position in the subtree
// and without Go types.
func message(err error) string {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for i, m := range msgs {
		m = snippetLine.ReplaceAllString(strings.TrimSpace(m), "")
		if j := strings.Index(m, " in type "); j > 0 {
			m = m[:j]
		}
		msgs[i] = UnitHint(m)
	}
	return strings.Join(msgs, "; ")
}

// bareDuration is the error of a duration written as a bare number.
var bareDuration = regexp.MustCompile(`(not a valid duration string: |in duration )"([0-9]+(\.[0-9]+)?)"$`)

// UnitHint adds to a duration's decoding error the unit its bare number
// is missing: `ttft: 2` is `not a valid duration string: "2": a duration
// needs its unit: "2s", "2ms"?`; `ttft: 1.5` is `... "1500ms"?`
// (Prometheus's durations take no fraction: "1.5s" is refused too).
func UnitHint(msg string) string {
	m := bareDuration.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	if m[3] == "" {
		return fmt.Sprintf(`%s: a duration needs its unit: "%ss", "%sms"?`, msg, m[2], m[2])
	}
	x, err := strconv.ParseFloat(m[2], 64)
	if ms := x * 1000; err == nil && ms == math.Trunc(ms) {
		return fmt.Sprintf(`%s: a duration needs its unit, in whole numbers: "%.0fms"?`, msg, ms)
	}
	return msg
}

// fieldsAndRest is fields, and the element type of an inlined map, which
// takes every other key (nil without one).
func fieldsAndRest(t reflect.Type) (map[string]reflect.Type, reflect.Type) {
	var rest reflect.Type
	var inlineMap func(t reflect.Type)
	inlineMap = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			_, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !strings.Contains(","+opts+",", ",inline,") {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch ft.Kind() {
			case reflect.Map:
				rest = ft.Elem()
			case reflect.Struct:
				inlineMap(ft)
			}
		}
	}
	inlineMap(t)
	return fields(t, nil), rest
}

// suggest returns the known key that key is most likely a typo of.
func suggest(key string, known map[string]reflect.Type) string {
	return Suggest(key, slices.Sorted(maps.Keys(known)))
}

// Suggest returns the name of known that name is most likely a typo of:
// within an edit distance of 2 (a third of the name's length for short
// names), the nearest, the first of known on a tie; "" if none is near.
// A canary load's `target: simm` is a typo of the target sim.
func Suggest(name string, known []string) string {
	best, bestD := "", max(1, min(2, len(name)/3))+1
	for _, k := range known {
		if d := distance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b, in bytes (keys are
// ASCII), with a transposition counted as one edit.
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range len(b) + 1 {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Key is a key path's place in a YAML document: its line, and whether the
// file gives it no value (a mapping's `model:` or `model: null`).
type Key struct {
	Line int
	Null bool
}

// Keys maps every key path of a YAML document, as errors name them
// ("targets[0].url", "canary[2]"), to its place; nil when b does not
// parse.
func Keys(b []byte) map[string]Key {
	var doc yaml3.Node
	if yaml3.Unmarshal(b, &doc) != nil || doc.Kind != yaml3.DocumentNode || len(doc.Content) != 1 {
		return nil
	}
	keys := map[string]Key{}
	var visit func(n *yaml3.Node, path string)
	visit = func(n *yaml3.Node, path string) {
		switch n.Kind {
		case yaml3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p, v := join(path, n.Content[i].Value), n.Content[i+1]
				keys[p] = Key{Line: n.Content[i].Line, Null: v.Kind == yaml3.ScalarNode && v.ShortTag() == "!!null"}
				visit(v, p)
			}
		case yaml3.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				keys[p] = Key{Line: c.Line}
				visit(c, p)
			}
		}
	}
	visit(doc.Content[0], "")
	return keys
}

// KeyLines maps every key path of a YAML document to its line (Keys); nil
// when b does not parse. A validation error that names a key is located
// with it.
func KeyLines(b []byte) map[string]int {
	keys := Keys(b)
	if keys == nil {
		return nil
	}
	lines := make(map[string]int, len(keys))
	for p, k := range keys {
		lines[p] = k.Line
	}
	return lines
}
