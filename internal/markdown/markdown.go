// Package markdown writes the Markdown of sloprober's reports (capacity
// reports, canary reports): lines, tables, and text made safe in them. A
// server's or user's text must never become markup in a report a person
// reads or a tool renders: no HTML, no link or image, no code span, no
// table cell broken by a pipe.
package markdown

import (
	"fmt"
	"strings"
)

// Writer is a Markdown document being written.
type Writer struct{ strings.Builder }

// P writes a line.
func (w *Writer) P(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }

// Row writes a table row, each cell made safe (Cell).
func (w *Writer) Row(cells ...string) {
	for i, c := range cells {
		cells[i] = Cell(c)
	}
	w.P("| %s |", strings.Join(cells, " | "))
}

// Table writes a table's header row and its separator.
func (w *Writer) Table(header ...string) {
	w.Row(header...)
	w.P("|%s", strings.Repeat("---|", len(header)))
}

// Cell makes a value safe in a table cell: one line, no pipe, no HTML, no
// code span, link or image. A server's or user's text in a cell goes
// through Free first: no emphasis either.
func Cell(s string) string {
	s = strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ", "<", "&lt;", "`", "'", "[", `\[`, "]", `\]`).Replace(s)
	return strings.TrimSpace(s)
}

// CodeSpan makes a text safe inside a code span (one line, no backtick):
// inside one nothing else is markup.
func CodeSpan(s string) string {
	return strings.NewReplacer("`", "'", "\n", " ", "\r", " ").Replace(s)
}

// Free escapes what would make a server's or user's text emphasis (stars
// and underscores), for a table cell.
func Free(s string) string { return strings.NewReplacer("*", `\*`, "_", `\_`).Replace(s) }

// Text makes a server's or user's free text safe in prose: no HTML, one
// line, no code span, link, image or emphasis.
func Text(s string) string {
	return strings.NewReplacer("<", "&lt;", "\n", " ", "\r", " ", "`", "'", "[", `\[`, "]", `\]`, "*", `\*`, "_", `\_`).Replace(s)
}
