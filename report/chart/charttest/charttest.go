// Package charttest reads back what the chart package drew, for tests:
// the texts of an SVG with the boxes they take, the points' glyphs, and
// the straight lines (intervals, their caps, reference lines, the grid),
// in the chart's own coordinates (points, Y up), so that a test can
// assert that labels do not overlap, what colour an interval is, or
// where the plot ends.
//
// It reads the SVG that vgsvg writes and report/chart inlines; it is no
// general SVG parser.
package charttest

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
)

// A Rect is a box in the chart's coordinates, Y up.
type Rect struct{ MinX, MinY, MaxX, MaxY float64 }

// Overlaps reports whether r and o share more than an edge.
func (r Rect) Overlaps(o Rect) bool {
	return r.MinX < o.MaxX && o.MinX < r.MaxX && r.MinY < o.MaxY && o.MinY < r.MaxY
}

// Text is a <text> element not rotated (the Y axis' label is left out),
// with the box Liberation Sans, with which the chart measures, gives it.
type Text struct {
	S    string
	Size float64
	Fill string // "" for black
	Box  Rect
}

// Glyph is a point's marker: a small shape, its centre and colour.
type Glyph struct {
	X, Y  float64
	Color string
	Box   Rect
}

// Line is a path of two points, with its stroke and dashes ("" solid).
type Line struct {
	X1, Y1, X2, Y2 float64
	Stroke, Dashes string
	Width          float64
}

// Vertical reports whether the line is vertical and not a point.
func (l Line) Vertical() bool { return l.X1 == l.X2 && l.Y1 != l.Y2 }

// Horizontal reports whether the line is horizontal and not a point.
func (l Line) Horizontal() bool { return l.Y1 == l.Y2 && l.X1 != l.X2 }

// Drawing is what an SVG holds.
type Drawing struct {
	Texts  []Text
	Glyphs []Glyph
	Lines  []Line
}

var (
	sans       = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sizeRE     = regexp.MustCompile(`font-size:([0-9.]+)px`)
	fillRE     = regexp.MustCompile(`(?:^|;)fill:(#[0-9A-Fa-f]{6})`)
	strokeRE   = regexp.MustCompile(`stroke:(#[0-9A-Fa-f]{6})`)
	widthRE    = regexp.MustCompile(`stroke-width:([0-9.]+)`)
	dashRE     = regexp.MustCompile(`stroke-dasharray:([0-9.,]+)`)
	commandsRE = regexp.MustCompile(`([MLAZ])([^MLAZ]*)`)
)

// Read reads an SVG the chart package wrote.
func Read(svg string) (*Drawing, error) {
	d := &Drawing{}
	dec := xml.NewDecoder(strings.NewReader(svg))
	var rotated []bool // per open <g>: rotated
	var text *xml.StartElement
	var content strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			attrs := map[string]string{}
			for _, a := range t.Attr {
				attrs[a.Name.Local] = a.Value
			}
			switch t.Name.Local {
			case "g":
				rotated = append(rotated, strings.Contains(attrs["transform"], "rotate"))
			case "text":
				text = &t
				content.Reset()
			case "path":
				d.path(attrs)
			}
		case xml.CharData:
			if text != nil {
				content.Write(t)
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "g":
				rotated = rotated[:len(rotated)-1]
			case "text":
				if !anyTrue(rotated) {
					d.Texts = append(d.Texts, textOf(*text, content.String()))
				}
				text = nil
			}
		}
	}
}

func anyTrue(bs []bool) bool {
	for _, b := range bs {
		if b {
			return true
		}
	}
	return false
}

func num(s string) float64 {
	v, _ := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return v
}

func textOf(t xml.StartElement, s string) Text {
	attrs := map[string]string{}
	for _, a := range t.Attr {
		attrs[a.Name.Local] = a.Value
	}
	style := attrs["style"]
	out := Text{S: s}
	if m := sizeRE.FindStringSubmatch(style); m != nil {
		out.Size = num(m[1])
	}
	if m := fillRE.FindStringSubmatch(style); m != nil {
		out.Fill = strings.ToUpper(m[1])
	}
	fnt := sans
	if strings.Contains(style, "font-weight:bold") {
		fnt.Weight = xfont.WeightBold
	}
	face := font.DefaultCache.Lookup(fnt, vg.Length(out.Size))
	w, ext := float64(face.Width(s)), face.Extents()
	// vgsvg writes y negated under scale(1, -1): the baseline is -y.
	x, base := num(attrs["x"]), -num(attrs["y"])
	switch attrs["text-anchor"] {
	case "middle":
		x -= w / 2
	case "end":
		x -= w
	}
	out.Box = Rect{MinX: x, MinY: base - float64(ext.Descent), MaxX: x + w, MaxY: base + float64(ext.Ascent)}
	return out
}

// path adds a path of two points as a Line, and a small shape as a Glyph.
func (d *Drawing) path(attrs map[string]string) {
	style := attrs["style"]
	var xs, ys []float64
	box := Rect{MinX: math.Inf(1), MinY: math.Inf(1), MaxX: math.Inf(-1), MaxY: math.Inf(-1)}
	add := func(x, y, rx, ry float64) {
		box.MinX, box.MaxX = math.Min(box.MinX, x-rx), math.Max(box.MaxX, x+rx)
		box.MinY, box.MaxY = math.Min(box.MinY, y-ry), math.Max(box.MaxY, y+ry)
	}
	arc := false
	for _, m := range commandsRE.FindAllStringSubmatch(attrs["d"], -1) {
		f := strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' || r == ' ' })
		switch {
		case (m[1] == "M" || m[1] == "L") && len(f) == 2:
			xs, ys = append(xs, num(f[0])), append(ys, num(f[1]))
			add(num(f[0]), num(f[1]), 0, 0)
		case m[1] == "A" && len(f) == 7:
			// A circle is drawn as two arcs from one end of its
			// horizontal diameter to the other and back.
			arc = true
			add(num(f[5]), num(f[6]), 0, num(f[1]))
		}
	}
	clr := ""
	if m := fillRE.FindStringSubmatch(style); m != nil && !strings.Contains(style, "fill:none") {
		clr = strings.ToUpper(m[1])
	}
	if m := strokeRE.FindStringSubmatch(style); m != nil {
		clr = strings.ToUpper(m[1])
	}
	if len(xs) == 2 && !arc {
		l := Line{X1: xs[0], Y1: ys[0], X2: xs[1], Y2: ys[1], Stroke: clr, Width: 1}
		if m := widthRE.FindStringSubmatch(style); m != nil {
			l.Width = num(m[1])
		}
		if m := dashRE.FindStringSubmatch(style); m != nil {
			l.Dashes = m[1]
		}
		d.Lines = append(d.Lines, l)
	}
	// Glyphs are 2.5 points in radius (a cross' strokes are drawn apart:
	// each is one).
	if w, h := box.MaxX-box.MinX, box.MaxY-box.MinY; w >= 2 && h >= 2 && w <= 8 && h <= 8 && clr != "" {
		d.Glyphs = append(d.Glyphs, Glyph{X: (box.MinX + box.MaxX) / 2, Y: (box.MinY + box.MaxY) / 2, Color: clr, Box: box})
	}
}

// Find returns the texts whose content is s.
func (d *Drawing) Find(s string) []Text {
	var out []Text
	for _, t := range d.Texts {
		if t.S == s {
			out = append(out, t)
		}
	}
	return out
}

// PlotTop is the top of the data area: the highest end of a vertical
// grid line (#DDDDDD).
func (d *Drawing) PlotTop() float64 {
	top := math.Inf(-1)
	for _, l := range d.Lines {
		if l.Vertical() && l.Stroke == "#DDDDDD" {
			top = math.Max(top, math.Max(l.Y1, l.Y2))
		}
	}
	return top
}

// Overlapping returns the pairs of texts whose boxes overlap, shrunk by
// tol on every side (tol > 0 forgives the rounding of coordinates).
func (d *Drawing) Overlapping(tol float64) [][2]Text {
	var out [][2]Text
	shrink := func(r Rect) Rect { return Rect{r.MinX + tol, r.MinY + tol, r.MaxX - tol, r.MaxY - tol} }
	for i, a := range d.Texts {
		for _, b := range d.Texts[i+1:] {
			if shrink(a.Box).Overlaps(shrink(b.Box)) {
				out = append(out, [2]Text{a, b})
			}
		}
	}
	return out
}

// Hidden lists what a label hides, as a test reports it: two texts that
// overlap (by more than 0.2 pt), and a point's label (7 px) over a point
// or over an interval's bar (a vertical line 1.5 pt wide).
func (d *Drawing) Hidden() []string {
	var out []string
	for _, p := range d.Overlapping(0.2) {
		out = append(out, strconv.Quote(p[0].S)+" overlaps "+strconv.Quote(p[1].S))
	}
	for _, tx := range d.Texts {
		if tx.Size != 7 {
			continue
		}
		for _, g := range d.Glyphs {
			if tx.Box.Overlaps(g.Box) {
				out = append(out, "label "+strconv.Quote(tx.S)+" over a point at ("+strconv.FormatFloat(g.X, 'f', 1, 64)+", "+strconv.FormatFloat(g.Y, 'f', 1, 64)+")")
			}
		}
		for _, l := range d.Lines {
			if !l.Vertical() || l.Width != 1.5 {
				continue
			}
			bar := Rect{MinX: l.X1 - 0.75, MinY: math.Min(l.Y1, l.Y2), MaxX: l.X1 + 0.75, MaxY: math.Max(l.Y1, l.Y2)}
			if tx.Box.Overlaps(bar) {
				out = append(out, "label "+strconv.Quote(tx.S)+" over an interval at x="+strconv.FormatFloat(l.X1, 'f', 1, 64))
			}
		}
	}
	return out
}
