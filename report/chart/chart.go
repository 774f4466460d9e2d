// Package chart draws the line charts of the capacity report as inline SVG.
//
// The report is one self-contained HTML file, opened offline, attached to
// tickets and printed, under a Content-Security-Policy that forbids anything
// but inline styles and data: images. So a chart here is an <svg> element
// that references nothing outside itself, whose ids cannot collide with
// those of the other charts in the same document, and that scales to the
// width of its container on a screen and on paper.
//
// The types are plain data so that the report composes its concrete charts
// (latency against throughput, a soak over hours, ...) without depending on
// the plotting library, gonum.org/v1/plot, which draws them.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"slices"
	"strings"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The default size, in points (1/72 inch), is 16 cm by 9 cm: the text width
// of an A4 page with 2.5 cm margins, and a comfortable width on a laptop.
const (
	DefaultWidth  = 16 * 72 / 2.54
	DefaultHeight = 9 * 72 / 2.54
)

// Sizes below these leave no room for the data between axes, title and
// legend; asking for one is a mistake of the caller.
const (
	minWidth  = 120
	minHeight = 80
)

// maxAbs bounds the values that are drawn: beyond it the arithmetic of the
// axes (max-min, tick steps) overflows. Nothing a prober measures is that
// large, so such a value is bad data and skipped like a NaN.
const maxAbs = 1e300

// ErrLength is wrapped by the error SVG returns when the slices of a series
// or a band differ in length: a mistake of the caller, not bad data.
var ErrLength = errors.New("slices of different lengths")

// ErrID is wrapped by the error SVG returns when Chart.ID cannot be used as
// an id in HTML and SVG.
var ErrID = errors.New("invalid id")

// A Chart is a line chart: series of points, shaded bands and labelled
// reference lines over shared X and Y axes.
//
// Bad data is skipped rather than refused, because a report must still be
// written when a level or a window measured nothing: a point with a NaN or
// infinite coordinate, or with Y <= 0 on a logarithmic axis, is left out and
// breaks its line, so that a gap in the measurements shows as a gap.
type Chart struct {
	// ID prefixes every id in the SVG, so that charts inlined in the same
	// HTML document never collide; the root <svg> element gets this id.
	// It must start with a letter and hold only letters, digits, '-' and
	// '_'. If empty, it is derived from a hash of the drawing, which is
	// deterministic and differs between different charts; set it when a
	// document may hold the same chart twice.
	ID string

	Title, XLabel, YLabel string

	// Series are drawn in order, each in its own colour, dash pattern and
	// point shape (chosen by position, so that the series stay apart in
	// black and white print and the same position looks the same in every
	// chart), and listed in the legend.
	Series []Series

	// Bands are drawn under the series, in light colours, and listed in the
	// legend after them.
	Bands []Band

	// HLines are horizontal reference lines, such as an SLO threshold; the
	// Y axis always includes them. VLines are vertical markers, such as the
	// knee or a burst's start; the X axis always includes them. Markers are
	// labelled on the chart itself rather than in the legend.
	HLines []Marker
	VLines []Marker

	// YLog draws the Y axis on a logarithmic scale.
	YLog bool

	// YZero includes zero in a linear Y axis, so that a small change is not
	// drawn as a cliff.
	YZero bool

	// YCeil, if not zero, is the most a value on a linear Y axis can be
	// (100 for a percentage): the axis runs a little above it, so that
	// points and intervals at it are drawn whole rather than on the
	// plot's border, and labels no tick above it. Ignored on a
	// logarithmic axis, and where a value lies above it.
	YCeil float64

	// Width and Height are the chart's size in points (1/72 inch); zero
	// means DefaultWidth and DefaultHeight. The SVG scales to the width of
	// its container; the size sets the aspect ratio and the size of text
	// relative to the chart.
	Width, Height float64
}

// A Series is a line through points (X[i], Y[i]), in the order given.
type Series struct {
	Name string
	X, Y []float64

	// Labels, if not nil, holds one annotation per point (such as "n=212"),
	// written beside it; an empty string writes nothing.
	Labels []string

	// Points marks every point with a glyph as well as the line. A lone
	// point between gaps is marked regardless, so that it does not vanish.
	Points bool

	// Low and High, if not nil, hold an interval per point (such as the
	// 95% interval of an attainment), drawn as a vertical bar with caps
	// from Low[i] to High[i] in the series' colour and dash; a NaN in
	// either draws none.
	Low, High []float64
}

// A Band shades the area between Low[i] and High[i] over X[i], such as the
// range from P50 to P99 at every level.
type Band struct {
	Name         string
	X, Low, High []float64
}

// A Marker is a reference line at Value, labelled with Label.
type Marker struct {
	Value float64
	Label string
}

var idRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// SVG draws the chart and returns it as an <svg> element, ready to inline
// in an HTML document. The same chart always gives the same bytes.
//
// It returns an error only for mistakes of the caller (slices of different
// lengths, an invalid ID or size), never for bad data.
func (c *Chart) SVG() (svg string, err error) {
	if err := c.check(); err != nil {
		return "", err
	}
	// prepare's sanitising of the data is what keeps the plotting library
	// from panicking; this only turns a panic left in it, on data nobody
	// thought of, into an error rather than a crashed prober.
	defer func() {
		if r := recover(); r != nil {
			svg, err = "", fmt.Errorf("chart %q: drawing: %v", c.Title, r)
		}
	}()
	w, h := c.size()
	d := c.prepare()
	canvas := vgsvg.New(vg.Points(w), vg.Points(h))
	d.draw(draw.New(canvas))
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("chart %q: writing SVG: %w", c.Title, err)
	}
	out, err := inline(buf.Bytes(), c.ID, d.title)
	if err != nil {
		return "", fmt.Errorf("chart %q: %w", c.Title, err)
	}
	return out, nil
}

// check reports the mistakes of the caller.
func (c *Chart) check() error {
	if c.ID != "" && !idRE.MatchString(c.ID) {
		return fmt.Errorf("chart %q: id %q: %w", c.Title, c.ID, ErrID)
	}
	for _, v := range []float64{c.Width, c.Height} {
		if math.IsNaN(v) || v < 0 || v > 1e5 {
			return fmt.Errorf("chart %q: invalid size %gx%g points", c.Title, c.Width, c.Height)
		}
	}
	if w, h := c.size(); w < minWidth || h < minHeight {
		return fmt.Errorf("chart %q: size %gx%g points is below the minimum %gx%g", c.Title, w, h, float64(minWidth), float64(minHeight))
	}
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("chart %q: series %d %q: %d X values, %d Y values: %w", c.Title, i, s.Name, len(s.X), len(s.Y), ErrLength)
		}
		if s.Labels != nil && len(s.Labels) != len(s.X) {
			return fmt.Errorf("chart %q: series %d %q: %d points, %d labels: %w", c.Title, i, s.Name, len(s.X), len(s.Labels), ErrLength)
		}
		if (s.Low != nil || s.High != nil) && (len(s.Low) != len(s.X) || len(s.High) != len(s.X)) {
			return fmt.Errorf("chart %q: series %d %q: %d points, %d Low values, %d High values: %w", c.Title, i, s.Name, len(s.X), len(s.Low), len(s.High), ErrLength)
		}
	}
	for i, b := range c.Bands {
		if len(b.X) != len(b.Low) || len(b.X) != len(b.High) {
			return fmt.Errorf("chart %q: band %d %q: %d X values, %d Low values, %d High values: %w", c.Title, i, b.Name, len(b.X), len(b.Low), len(b.High), ErrLength)
		}
	}
	return nil
}

func (c *Chart) size() (w, h float64) {
	w, h = c.Width, c.Height
	if w == 0 {
		w = DefaultWidth
	}
	if h == 0 {
		h = DefaultHeight
	}
	return w, h
}

// prepare turns the chart into what is drawn: text made safe for XML, the
// points that can be drawn in runs between gaps, and the axes' ranges.
func (c *Chart) prepare() *drawing {
	d := &drawing{
		title:  cleanText(c.Title),
		xLabel: cleanText(c.XLabel),
		yLabel: cleanText(c.YLabel),
		yLog:   c.YLog,
		x:      newExtent(),
		y:      newExtent(),
	}
	for _, s := range c.Series {
		ps := series{name: cleanText(s.Name), points: s.Points, intervals: s.Low != nil}
		var run []point
		for i := range s.X {
			if !c.drawable(s.X[i], s.Y[i]) {
				if len(run) > 0 {
					ps.runs = append(ps.runs, run)
					run = nil
				}
				continue
			}
			p := point{x: s.X[i], y: s.Y[i]}
			if s.Labels != nil {
				p.label = cleanText(s.Labels[i])
			}
			if s.Low != nil {
				lo, hi := math.Min(s.Low[i], s.High[i]), math.Max(s.Low[i], s.High[i])
				if c.drawable(p.x, lo) && c.drawable(p.x, hi) {
					p.lo, p.hi, p.bar = lo, hi, true
					d.y.add(lo)
					d.y.add(hi)
				}
			}
			run = append(run, p)
			d.x.add(p.x)
			d.y.add(p.y)
			d.hasData = true
		}
		if len(run) > 0 {
			ps.runs = append(ps.runs, run)
		}
		d.series = append(d.series, ps)
	}
	for _, b := range c.Bands {
		pb := band{name: cleanText(b.Name)}
		var run []bandPoint
		for i := range b.X {
			lo, hi := math.Min(b.Low[i], b.High[i]), math.Max(b.Low[i], b.High[i])
			if !c.drawable(b.X[i], lo) || !c.drawable(b.X[i], hi) {
				if len(run) > 0 {
					pb.runs = append(pb.runs, run)
					run = nil
				}
				continue
			}
			run = append(run, bandPoint{x: b.X[i], lo: lo, hi: hi})
			d.x.add(b.X[i])
			d.y.add(lo)
			d.y.add(hi)
			d.hasData = true
		}
		if len(run) > 0 {
			pb.runs = append(pb.runs, run)
		}
		d.bands = append(d.bands, pb)
	}
	for _, m := range c.HLines {
		if !c.drawable(0, m.Value) {
			continue
		}
		d.hLines = append(d.hLines, marker{value: m.Value, label: cleanText(m.Label)})
		d.y.add(m.Value)
	}
	for _, m := range c.VLines {
		if !c.drawable(m.Value, 1) {
			continue
		}
		// Markers at one value are one line with their labels joined
		// ("knee, closed-loop capacity"): two labels side by side at one
		// line read as one phrase.
		if i := slices.IndexFunc(d.vLines, func(v marker) bool { return v.value == m.Value }); i >= 0 {
			if l := cleanText(m.Label); l != "" {
				d.vLines[i].label = strings.TrimPrefix(d.vLines[i].label+", "+l, ", ")
			}
			continue
		}
		d.vLines = append(d.vLines, marker{value: m.Value, label: cleanText(m.Label)})
		d.x.add(m.Value)
	}
	if c.YZero && !c.YLog && d.y.ok() {
		d.y.add(0)
	}
	ceil := c.YCeil != 0 && !c.YLog && math.Abs(c.YCeil) <= maxAbs && d.y.ok() && d.y.max <= c.YCeil
	d.x.widen(false)
	d.y.widen(c.YLog)
	d.x.nice(false)
	if ceil {
		d.y.max = c.YCeil
		ceil = d.y.min < d.y.max
	}
	d.y.nice(c.YLog)
	d.yTicksMax = math.Inf(1)
	if ceil {
		// Ticks up to the ceiling, the axis 4% of its range above it:
		// a point's glyph and an interval's cap at the ceiling are
		// drawn whole, clear of the border.
		d.yTicksMax = c.YCeil
		d.y.max = c.YCeil + 0.04*(c.YCeil-d.y.min)
	}
	return d
}

// drawable reports whether a point can be drawn at all.
func (c *Chart) drawable(x, y float64) bool {
	if math.IsNaN(x) || math.IsNaN(y) || math.Abs(x) > maxAbs || math.Abs(y) > maxAbs {
		return false
	}
	// A logarithmic axis needs Y > 0; below 1e-300 its rounding to powers
	// of ten underflows to zero.
	return !c.YLog || y >= 1e-300
}

// extent is the range of the values on an axis.
type extent struct{ min, max float64 }

func newExtent() extent { return extent{min: math.Inf(1), max: math.Inf(-1)} }

func (e *extent) add(v float64) {
	e.min = math.Min(e.min, v)
	e.max = math.Max(e.max, v)
}

func (e *extent) ok() bool { return e.min <= e.max }

// widen makes a range the axis can draw out of one that may be empty or a
// single value, or so narrow that its tick marks could not be told apart.
func (e *extent) widen(log bool) {
	switch {
	case !e.ok() && log:
		e.min, e.max = 1, 10
	case !e.ok():
		e.min, e.max = 0, 1
	case log && e.max/e.min < 1.01:
		e.min, e.max = e.min/2, e.max*2
	case log:
	case e.max-e.min <= 1e-9*math.Max(math.Abs(e.min), math.Abs(e.max)) || e.max-e.min < 1e-200:
		pad := math.Max(math.Abs(e.min), math.Abs(e.max)) / 2
		if pad < 1e-200 {
			pad = 1
		}
		e.min, e.max = e.min-pad, e.max+pad
	}
}

// nice widens the range to round values, so that both ends of the axis
// are labelled.
func (e *extent) nice(log bool) {
	var lo, hi float64
	if log {
		lo, hi = niceLog(e.min, false), niceLog(e.max, true)
	} else {
		step, _ := linearStep(e.max - e.min)
		lo, hi = math.Floor(e.min/step)*step, math.Ceil(e.max/step)*step
	}
	if !math.IsInf(lo, 0) && !math.IsInf(hi, 0) && lo < hi {
		e.min, e.max = lo, hi
	}
}

// cleanText makes a string safe to write as SVG text: valid UTF-8 holding
// only the characters XML 1.0 allows, on one line. Names and labels may
// come from configuration or a target's responses.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case r < 0x20, r >= 0x7f && r < 0xa0, r == 0xfffe, r == 0xffff,
			strings.ContainsRune(anchorMiddle+anchorEnd, r):
			return -1
		}
		return r
	}, s)
}

// hashID derives an id prefix from the drawing, for a chart without an ID.
func hashID(body []byte) string {
	h := fnv.New64a()
	h.Write(body)
	return fmt.Sprintf("chart-%016x", h.Sum64())[:16]
}
