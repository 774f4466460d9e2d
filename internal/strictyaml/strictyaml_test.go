package strictyaml

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

type inner struct {
	Timeout model.Duration  `yaml:"timeout"`
	Every   *model.Duration `yaml:"every,omitempty"`
}

type shared struct {
	After model.Duration `yaml:"after"`
}

type picky struct{ v string }

// UnmarshalYAML fails, without a position, on anything but "ok".
func (p *picky) UnmarshalYAML(unmarshal func(any) error) error {
	if err := unmarshal(&p.v); err != nil {
		return err
	}
	if p.v != "ok" {
		return errors.New("picky: want ok")
	}
	return nil
}

type doc struct {
	Name   string                    `yaml:"name"`
	Count  int                       `yaml:"count"`
	Items  []inner                   `yaml:"items"`
	ByName map[string]model.Duration `yaml:"by_name"`
	Ptr    *inner                    `yaml:"ptr"`
	Picky  picky                     `yaml:"picky"`
	Pickys []*picky                  `yaml:"pickys"`
	Plain  model.Duration            // the key is the lowercased field name
	Skip   model.Duration            `yaml:"-"`
	shared `yaml:",inline"`
	Labels *labels `yaml:"labels"`
}

// labels takes any key, as prometheus/common's http_headers do.
type labels struct {
	M map[string]model.Duration `yaml:",inline"`
}

// TestUnmarshalErrors: errors name the line, and the key path where yaml
// v2 gives no position (a type's own UnmarshalYAML failed).
func TestUnmarshalErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, err string }{
		{"unknown key", "name: a\nnmae: b\n", `line 2: nmae: no such key (did you mean "name"?)`},
		{"unknown key, nothing near", "name: a\nwhatever: b\n", `line 2: whatever: no such key`},
		{"unknown nested key", "items:\n  - timout: 1s\n", `line 2: items[0].timout: no such key (did you mean "timeout"?)`},
		{"wrong type", "count: five\n", "line 1: count: cannot unmarshal !!str `five` into int"},
		{"several", "count: five\nnmae: b\n", "line 1: count: cannot unmarshal !!str `five` into int\nline 2: nmae: no such key (did you mean \"name\"?)"},
		// Every error at once, in the order of the file: a value that
		// a type decodes itself no longer hides the rest.
		{"all at once", "picky: no\nitems:\n  - timeout: five\n  - tmeout: 1s\nplain: 5\ncount: x\n",
			"line 1: picky: picky: want ok\n" +
				`line 3: items[0].timeout: not a valid duration string: "five"` + "\n" +
				`line 4: items[1].tmeout: no such key (did you mean "timeout"?)` + "\n" +
				`line 5: plain: not a valid duration string: "5": a duration needs its unit: "5s", "5ms"?` + "\n" +
				"line 6: count: cannot unmarshal !!str `x` into int"},
		{"inlined map takes any key", "labels: {a: 1s, b: soon}\n", `line 1: labels.b: not a valid duration string: "soon"`},
		// Anchors, aliases and merge keys are valid: an error elsewhere
		// does not make them errors.
		{"aliases and merge keys beside an error", "items:\n  - &i {timeout: 1s}\n  - *i\n  - {<<: *i, every: 2s}\ncount: x\n",
			"line 5: count: cannot unmarshal !!str `x` into int"},
		{"duration in a list", "name: a\nitems:\n  - timeout: 1s\n  - timeout: five\n", `line 4: items[1].timeout: not a valid duration string: "five"`},
		{"pointer", "ptr:\n  every: -5s\n", `line 2: ptr.every: not a valid duration string: "-5s"`},
		{"map value", "by_name: {a: 1s, b: soon}\n", `line 1: by_name.b: not a valid duration string: "soon"`},
		{"custom type", "picky: no\n", "line 1: picky: picky: want ok"},
		{"custom type in a list", "pickys: [ok, ok,\n  no]\n", "line 2: pickys[2]: picky: want ok"},
		{"lowercased field name", "plain: 1.5\n", `line 1: plain: unknown unit "." in duration "1.5": a duration needs its unit, in whole numbers: "1500ms"?`},
		{"inline", "name: a\nafter: later\n", `line 2: after: not a valid duration string: "later"`},
		{"flow mapping on one line", "items: [{timeout: 1s}, {timeout: x}]", `line 1: items[1].timeout: not a valid duration string: "x"`},
		{"syntax", "a:\n  - b\n  c: d\n", "yaml: line 2: did not find expected '-' indicator"},
		{"aliases are not followed", "items:\n  - &x {timeout: bad}\n  - *x\n", `line 2: items[0].timeout: not a valid duration string: "bad"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			require.EqualError(t, Unmarshal([]byte(tc.yaml), &d), tc.err)
		})
	}
}

// TestUnmarshalRest: the file without the keys to blame decodes, with
// every other key as it was, so that what the rest says is checked in
// the same go; none when an element of a list is to blame (leaving it out
// would renumber the rest).
func TestUnmarshalRest(t *testing.T) {
	var d doc
	err := Unmarshal([]byte("name: a\nnmae: b\nitems:\n  - timeout: five\n  - timeout: 2s\ncount: x\n"), &d)
	var se *Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, []string{"nmae", "items[0].timeout", "count"}, []string{se.Lines[0].Path, se.Lines[1].Path, se.Lines[2].Path})
	var rest doc
	require.NoError(t, Unmarshal(se.Rest, &rest), "%s", se.Rest)
	require.Equal(t, "a", rest.Name)
	require.Len(t, rest.Items, 2, "the list keeps its elements")
	require.Equal(t, model.Duration(2*time.Second), rest.Items[1].Timeout)

	err = Unmarshal([]byte("pickys: [ok, no]\nnmae: b\n"), &d)
	require.ErrorAs(t, err, &se)
	require.Nil(t, se.Rest, "an element of a list to blame")
}

// TestUnmarshalManyErrors: a file of many errors is reported with the
// first 20 and a count of the rest.
func TestUnmarshalManyErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("items:\n")
	for range 25 {
		b.WriteString("  - timeout: never\n")
	}
	var d doc
	err := Unmarshal([]byte(b.String()), &d)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 21)
	require.Equal(t, `line 2: items[0].timeout: not a valid duration string: "never"`, lines[0])
	require.Equal(t, "and 5 more errors", lines[20])
}

func TestUnmarshal(t *testing.T) {
	var d doc
	require.NoError(t, Unmarshal([]byte("name: a\nitems: [{timeout: 1s}]\nafter: 2s\npicky: ok\n"), &d))
	require.Equal(t, "a", d.Name)
	require.Equal(t, model.Duration(2e9), d.After)
	require.NoError(t, Unmarshal(nil, &d))
}

// TestUnmarshalNotPointer: an error for a value that is not a pointer is
// returned as yaml v2 gives it.
func TestUnmarshalNotPointer(t *testing.T) {
	require.Error(t, Unmarshal([]byte("a: 1"), doc{}))
}
