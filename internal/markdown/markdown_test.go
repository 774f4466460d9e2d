package markdown

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSafe(t *testing.T) {
	for _, tc := range []struct{ in, cell, text, code string }{
		{in: "plain", cell: "plain", text: "plain", code: "plain"},
		{in: "a|b\nc", cell: `a\|b c`, text: "a|b c", code: "a|b c"},
		{in: "<img src=x>", cell: "&lt;img src=x>", text: "&lt;img src=x>", code: "<img src=x>"},
		{in: "[x](http://e)", cell: `\[x\](http://e)`, text: `\[x\](http://e)`, code: "[x](http://e)"},
		{in: "`rm` *b* _i_", cell: "'rm' *b* _i_", text: `'rm' \*b\* \_i\_`, code: "'rm' *b* _i_"},
	} {
		require.Equal(t, tc.cell, Cell(tc.in), tc.in)
		require.Equal(t, tc.text, Text(tc.in), tc.in)
		require.Equal(t, tc.code, CodeSpan(tc.in), tc.in)
	}
	require.Equal(t, `\*x\_`, Free("*x_"))
	var w Writer
	w.Table("a", "b|c")
	w.Row("1", "x\ny")
	require.Equal(t, "| a | b\\|c |\n|---|---|\n| 1 | x y |\n", w.String())
}
