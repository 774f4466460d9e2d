package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"regexp"
	"slices"
	"strings"
)

// WriteHTML writes the report as one self-contained HTML page: the
// Markdown report's text (one source for both) with the charts inline as
// SVG, styles inline, and a Content-Security-Policy that forbids every
// fetch and script: a report is opened offline and attached to tickets,
// and must look the same there.
func WriteHTML(w io.Writer, r *Report) error {
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil {
		return err
	}
	svgs, err := chartsBySection(r)
	if err != nil {
		return err
	}
	var b strings.Builder
	title := fmt.Sprintf("Capacity report: %s (%s): %s", r.Test, r.Kind, strings.ToUpper(r.Verdict))
	pageHead(&b, title, `<meta name="generator" content="sloprober `+html.EscapeString(r.Provenance.Version)+`">`+"\n", "")
	verdictClass := "verdict-unknown"
	if slices.Contains([]string{"pass", "fail", "infeasible", "aborted", "inconclusive", "running"}, r.Verdict) {
		verdictClass = "verdict-" + r.Verdict
	}
	renderMarkdown(&b, md.String(), verdictClass, func(section string) {
		for _, c := range svgs[section] {
			fmt.Fprintf(&b, "<figure id=\"fig-%s\">\n%s\n<figcaption>%s</figcaption>\n</figure>\n", c.ID, c.svg, html.EscapeString(c.Caption))
		}
	})
	b.WriteString("</main>\n</body>\n</html>\n")
	_, err = io.WriteString(w, b.String())
	return err
}

// chartsBySection draws the report's charts as SVG, by the section each
// closes (chartSection), in their order.
func chartsBySection(r *Report) (map[string][]namedChart, error) {
	out := map[string][]namedChart{}
	for _, c := range charts(r) {
		svg, err := c.c.SVG()
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", c.ID, err)
		}
		c.svg = svg
		sec := chartSection[c.ID]
		out[sec] = append(out[sec], c)
	}
	return out, nil
}

// sectionName is a section's name without its number: "Capacity
// conclusion" of "4. Capacity conclusion" (a report's sections are
// numbered by what it has).
func sectionName(title string) string {
	if _, name, ok := strings.Cut(title, ". "); ok {
		return name
	}
	return title
}

// pageHead writes a page's start, up to its <main>: the policy, title and
// style every HTML page of a report or a comparison has; meta is written
// after the viewport, extraCSS after the style.
func pageHead(b *strings.Builder, title, meta, extraCSS string) {
	fmt.Fprintf(b, `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="%s">
<meta name="viewport" content="width=device-width, initial-scale=1">
%s<title>%s</title>
<style>%s%s</style>
</head>
<body>
<main>
`, CSP, meta, html.EscapeString(title), css, extraCSS)
}

// CSP is the HTML report's Content-Security-Policy: no fetch, no script;
// inline styles and data: images only.
const CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

// Formats are the report's formats, for Write.
var Formats = []string{"html", "md", "json"}

// Write writes the report in format: html, md or json.
func Write(w io.Writer, r *Report, format string) error {
	switch format {
	case "html":
		return WriteHTML(w, r)
	case "md", "markdown":
		return WriteMarkdown(w, r)
	case "json":
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	return fmt.Errorf("unknown report format %q: one of %s", format, strings.Join(Formats, ", "))
}

// ContentType is the media type of a report format.
func ContentType(format string) string {
	switch format {
	case "html":
		return "text/html; charset=utf-8"
	case "json":
		return "application/json"
	}
	return "text/markdown; charset=utf-8"
}

// chartSection is the section each chart closes.
var chartSection = map[string]string{
	"latency-throughput": "Capacity conclusion", "goodput-load": "Capacity conclusion", "attainment-load": "Capacity conclusion",
	"e2e-bands": "Capacity conclusion", "verification": "Capacity conclusion", "evidence": "Capacity conclusion",
	"burst":        "Risk boundaries",
	"soak-latency": "Soak", "soak-goodput": "Soak",
}

// css is the page's style: readable on a laptop, and in print (no
// backgrounds that waste ink, tables and figures kept whole on a page).
const css = `
:root { color-scheme: light; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1b1f24; margin: 0; background: #fff; }
main { margin: 0 auto; padding: 24px 32px 48px; }
p, ul, blockquote, h1, h2 { max-width: 1100px; }
h1 { font-size: 1.6em; margin: 0 0 .4em; }
h2 { font-size: 1.25em; margin: 1.6em 0 .5em; padding-bottom: .2em; border-bottom: 1px solid #d0d7de; }
blockquote { margin: 0 0 1em; padding: .5em 1em; border-left: 4px solid #8c959f; background: #f6f8fa; }
.verdict-pass blockquote { border-color: #1a7f37; }
.verdict-fail blockquote, .verdict-infeasible blockquote { border-color: #cf222e; }
.verdict-aborted blockquote { border-color: #9a6700; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .88em; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
.wide { overflow-x: auto; }
code { font: .9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f6f8fa; padding: 0 .25em; }
pre { background: #f6f8fa; padding: .75em 1em; overflow-x: auto; }
pre code { background: none; padding: 0; }
figure { margin: 1em 0 1.5em; break-inside: avoid; }
figure svg { display: block; width: 100%; max-width: 900px; height: auto; }
figcaption { font-size: .85em; color: #57606a; margin-top: .3em; }
@media print {
  body { font-size: 10.5pt; }
  main { max-width: none; padding: 0; }
  h2 { break-after: avoid; }
  table, figure, pre { break-inside: avoid; }
  .wide { overflow: visible; }
  th, blockquote, pre, code { background: none; }
}
`

var (
	// Escaped stars (\*) never make two stars in a row: a server's
	// "**x**" reaches the HTML as text.
	boldRE = regexp.MustCompile(`\*\*([^*]+)\*\*`)
	codeRE = regexp.MustCompile("`([^`]+)`")
)

// inline renders the report's inline Markdown (bold and code spans) of a
// text the Markdown writer escaped (&lt; &gt; \|): unescaped, then escaped
// for HTML.
func inline(s string) string {
	s = html.EscapeString(html.UnescapeString(s))
	// Markup first, on the escaped text: a backslash-escaped character
	// (from a server's or user's string) is never part of it.
	s = codeRE.ReplaceAllString(s, "<code>$1</code>")
	s = boldRE.ReplaceAllString(s, "<strong>$1</strong>")
	return mdUnescaper.Replace(s)
}

// mdUnescaper undoes the Markdown writer's backslash escapes.
var mdUnescaper = strings.NewReplacer(`\|`, "|", `\[`, "[", `\]`, "]", `\*`, "*", `\_`, "_")

// renderMarkdown renders the subset of Markdown the report writer emits:
// headings, a block quote, paragraphs, lists, tables and fenced code.
// closing(name) is called at the end of each section, by its name
// ("Capacity conclusion" of "## 4. Capacity conclusion"), for the
// section's charts.
func renderMarkdown(b *strings.Builder, md, verdictClass string, closing func(section string)) {
	lines := strings.Split(md, "\n")
	section := ""
	endSection := func() {
		if section != "" {
			closing(section)
			b.WriteString("</section>\n")
		}
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "# "):
			fmt.Fprintf(b, "<header class=\"%s\">\n<h1>%s</h1>\n", verdictClass, inline(line[2:]))
			for i+1 < len(lines) && (lines[i+1] == "" || strings.HasPrefix(lines[i+1], "> ")) {
				i++
				if q := lines[i]; q != "" {
					fmt.Fprintf(b, "<blockquote>%s</blockquote>\n", inline(q[2:]))
				}
			}
			b.WriteString("</header>\n")
		case strings.HasPrefix(line, "## "):
			endSection()
			title := line[3:]
			section = sectionName(title)
			fmt.Fprintf(b, "<section>\n<h2>%s</h2>\n", inline(title))
		case strings.HasPrefix(line, "```"):
			lang := strings.TrimPrefix(line, "```")
			var code []string
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				code = append(code, lines[i])
			}
			fmt.Fprintf(b, "<pre><code class=\"language-%s\">%s</code></pre>\n", html.EscapeString(lang), html.EscapeString(strings.Join(code, "\n")))
		case strings.HasPrefix(line, "|"):
			var rows [][]string
			for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
				rows = append(rows, cells(lines[i]))
			}
			i--
			b.WriteString("<div class=\"wide\"><table>\n")
			for r, row := range rows {
				if r == 1 {
					continue // the separator
				}
				tag := "td"
				if r == 0 {
					tag = "th"
				}
				b.WriteString("<tr>")
				for _, c := range row {
					fmt.Fprintf(b, "<%s>%s</%s>", tag, inline(c), tag)
				}
				b.WriteString("</tr>\n")
			}
			b.WriteString("</table></div>\n")
		case strings.HasPrefix(line, "- "):
			b.WriteString("<ul>\n")
			for ; i < len(lines) && strings.HasPrefix(lines[i], "- "); i++ {
				fmt.Fprintf(b, "<li>%s</li>\n", inline(lines[i][2:]))
			}
			i--
			b.WriteString("</ul>\n")
		case line == "":
		default:
			// The first line is the paragraph's whatever it starts with:
			// every pass consumes a line.
			para := []string{inline(line)}
			for i++; i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "#") && !strings.HasPrefix(lines[i], "|") &&
				!strings.HasPrefix(lines[i], "- ") && !strings.HasPrefix(lines[i], "```"); i++ {
				para = append(para, inline(lines[i]))
			}
			i--
			fmt.Fprintf(b, "<p>%s</p>\n", strings.Join(para, "<br>\n"))
		}
	}
	endSection()
}

// cells splits a Markdown table row, keeping escaped pipes.
func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	var out []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case line[i] == '|':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// ChartFile is one chart of a report as an SVG file beside its Markdown.
type ChartFile struct{ Name, SVG string }

// WriteMarkdownWithCharts writes the Markdown report with its charts as
// images: each chart's SVG is returned as a file named prefix-ID.svg for
// the caller to write beside the Markdown, which links it (relative) at
// the end of its section, where the HTML report draws it. A Markdown
// viewer (a repository, a ticket with the files attached) shows the
// report as the HTML does, charts included.
func WriteMarkdownWithCharts(w io.Writer, r *Report, prefix string) ([]ChartFile, error) {
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil {
		return nil, err
	}
	bySection, err := chartsBySection(r)
	if err != nil {
		return nil, err
	}
	var files []ChartFile
	var b strings.Builder
	section := ""
	closeSection := func() {
		for _, c := range bySection[section] {
			name := prefix + "-" + c.ID + ".svg"
			files = append(files, ChartFile{Name: name, SVG: c.svg})
			fmt.Fprintf(&b, "![%s](%s)\n\n*%s*\n\n", c.c.Title, name, mdText(c.Caption))
		}
	}
	for line := range strings.Lines(md.String()) {
		if strings.HasPrefix(line, "## ") {
			closeSection()
			section = sectionName(strings.TrimSpace(line[3:]))
		}
		b.WriteString(line)
	}
	if !strings.HasSuffix(b.String(), "\n\n") {
		b.WriteString("\n")
	}
	closeSection()
	_, err = io.WriteString(w, b.String())
	return files, err
}
