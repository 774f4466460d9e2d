package dashrender

import (
	"cmp"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/sloprober/sloprober/report/chart"
)

// Points a grid unit of a panel is drawn at: 24 columns of a page about
// 1,600 pixels wide, rows of 30 pixels.
const (
	pointsPerColumn = 48
	pointsPerRow    = 26
)

// lines draws a timeseries panel as a line chart, minutes before the
// range's end on X.
func lines(ss []series, unit, id string, w, h int) (template.HTML, error) {
	f, label := scale(unit)
	c := &chart.Chart{ID: id, XLabel: "minutes (0: the end of the range)", YLabel: label, YZero: true,
		Width: max(float64(w*pointsPerColumn), 160), Height: max(float64(h*pointsPerRow-20), 100)}
	for _, s := range ss {
		cs := chart.Series{Name: s.name, X: s.t}
		for _, v := range s.v {
			cs.Y = append(cs.Y, v*f)
		}
		c.Series = append(c.Series, cs)
	}
	svg, err := c.SVG()
	return template.HTML(svg), err //nolint:gosec // report/chart's SVG escapes its text
}

// colours are Grafana's named colours used by the dashboards' mappings.
var colours = map[string]string{
	"green": "#56a64b", "red": "#e02f44", "orange": "#ff9830", "yellow": "#f2cc0c",
	"blue": "#3274d9", "purple": "#a352cc", "text": "#24292e", "transparent": "none",
}

func colour(name string) string {
	if c, ok := colours[name]; ok {
		return c
	}
	if strings.HasPrefix(name, "#") {
		return template.HTMLEscapeString(name)
	}
	return "#8e8e8e"
}

// stat draws a stat panel: each series' value, mapped or in its unit.
func stat(ss []series, p *Panel, now time.Time) template.HTML {
	if len(ss) == 0 {
		return "<i>No data</i>"
	}
	var b strings.Builder
	b.WriteString(`<div class="stat">`)
	for _, s := range ss {
		v := s.v[0]
		text, _, ok := mapped(v, p.FieldConfig.Defaults.Mappings)
		if !ok {
			text = format(v, p.FieldConfig.Defaults.Unit, now)
		}
		bg := p.colourOf(v)
		style, spanStyle := "", ""
		if bg != "" && bg != "text" && bg != "transparent" {
			style, spanStyle = fmt.Sprintf(` style="background:%s;color:#fff"`, colour(bg)), ` style="color:#fff"`
		}
		fmt.Fprintf(&b, `<div%s><b>%s</b><span%s>%s</span></div>`, style, template.HTMLEscapeString(text), spanStyle, template.HTMLEscapeString(s.name))
	}
	b.WriteString(`</div>`)
	return template.HTML(b.String()) //nolint:gosec // escaped above
}

// table draws a table panel: its instant queries' labels and values.
func table(ss []series) template.HTML {
	if len(ss) == 0 {
		return "<i>No data</i>"
	}
	var cols []string
	for _, s := range ss {
		for name := range s.labels {
			if name != model.MetricNameLabel && !slices.Contains(cols, string(name)) {
				cols = append(cols, string(name))
			}
		}
	}
	slices.Sort(cols)
	var b strings.Builder
	b.WriteString("<table><tr>")
	for _, c := range cols {
		fmt.Fprintf(&b, "<th>%s</th>", template.HTMLEscapeString(c))
	}
	b.WriteString("<th>Value</th></tr>")
	for _, s := range ss {
		b.WriteString("<tr>")
		for _, c := range cols {
			fmt.Fprintf(&b, "<td>%s</td>", template.HTMLEscapeString(string(s.labels[model.LabelName(c)])))
		}
		fmt.Fprintf(&b, "<td>%s</td></tr>", strconv.FormatFloat(s.v[0], 'g', 4, 64))
	}
	b.WriteString("</table>")
	return template.HTML(b.String()) //nolint:gosec // escaped above
}

// Size of the SVG of a heatmap or a state timeline, in its own units.
const (
	gridWidth  = 600
	gridHeight = 200
	gridLeft   = 120 // room for the rows' names
)

// heatmap draws a heatmap panel of cumulative histogram buckets ("le"),
// as Grafana's heatmap format does: each bucket's count less the one
// below it, a cell a step, darker for more.
func heatmap(ss []series, rng time.Duration) template.HTML {
	le := func(s series) float64 {
		v, err := strconv.ParseFloat(string(s.labels["le"]), 64)
		if err != nil {
			return math.Inf(1)
		}
		return v
	}
	slices.SortStableFunc(ss, func(a, b series) int { return cmp.Compare(le(a), le(b)) })
	rows := make([][]cellValue, len(ss))
	peak := 0.0
	for i, s := range ss {
		for j, v := range s.v {
			below := 0.0
			if i > 0 {
				below = valueAt(ss[i-1], s.t[j])
			}
			d := v - below
			if math.IsNaN(d) || d < 0 {
				d = 0
			}
			peak = max(peak, d)
			rows[i] = append(rows[i], cellValue{t: s.t[j], v: d})
		}
	}
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = "≤ " + s.name
	}
	return grid(names, rows, rng, func(v float64) (string, float64) {
		if peak == 0 || v == 0 {
			return "none", 0
		}
		return "#ff7a00", 0.1 + 0.9*v/peak
	}, true)
}

// valueAt is a series' value at t (minutes), 0 if it has none.
func valueAt(s series, t float64) float64 {
	if i, ok := slices.BinarySearch(s.t, t); ok {
		return s.v[i]
	}
	return 0
}

type cellValue struct{ t, v float64 }

// timeline draws a state-timeline panel: a row a series, each step
// coloured by its value's mapping.
func timeline(ss []series, p *Panel, rng time.Duration) template.HTML {
	names := make([]string, len(ss))
	rows := make([][]cellValue, len(ss))
	for i, s := range ss {
		names[i] = s.name
		for j := range s.v {
			rows[i] = append(rows[i], cellValue{t: s.t[j], v: s.v[j]})
		}
	}
	return grid(names, rows, rng, func(v float64) (string, float64) {
		if c := p.colourOf(v); c != "" {
			return colour(c), 1
		}
		return "#8e8e8e", 1
	}, false)
}

// grid draws rows of cells over the range (minutes before its end),
// the first row at the bottom if bottomUp, named on the left.
func grid(names []string, rows [][]cellValue, rng time.Duration, fill func(float64) (string, float64), bottomUp bool) template.HTML {
	if len(rows) == 0 {
		return "<i>No data</i>"
	}
	span := rng.Minutes()
	plotW := float64(gridWidth - gridLeft)
	h := float64(gridHeight-20) / float64(len(rows))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-size="10" font-family="sans-serif">`, gridWidth, gridHeight, gridWidth, gridHeight)
	every := max(1, len(rows)/8) // at most about 8 names
	for i, row := range rows {
		y := float64(i) * h
		if bottomUp {
			y = float64(len(rows)-1-i) * h
		}
		if i%every == 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`, gridLeft-4, y+h/2, template.HTMLEscapeString(cut(names[i], 22)))
		}
		for j, c := range row {
			x0 := gridLeft + plotW*(1+c.t/span)
			x1 := float64(gridWidth)
			if j+1 < len(row) {
				x1 = gridLeft + plotW*(1+row[j+1].t/span)
			}
			colour, opacity := fill(c.v)
			if colour == "none" || math.IsNaN(c.v) {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%.2f"/>`, x0, y+0.5, max(x1-x0, 0.5), h-1, colour, opacity)
		}
	}
	for m := 0; m <= 4; m++ {
		t := -span * float64(4-m) / 4
		anchor := "middle"
		if m == 4 {
			anchor, t = "end", 0 // not "-0", and not cut at the edge
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s">%s</text>`, gridLeft+plotW*(1+t/span), gridHeight-4, anchor, number(t))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // escaped above
}

func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
