package chart

import (
	"image/color"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The text is measured with Liberation Sans, which gonum/plot embeds; it is
// metrically compatible with Arial and Helvetica, which the SVG names after
// it, so the layout holds wherever the report is opened.
var (
	sans     = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sansBold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}
)

// Font sizes and spacing, in points.
const (
	titleSize  = 11
	labelSize  = 9 // axis labels
	smallSize  = 8 // ticks, legend, marker labels
	noteSize   = 7 // per-point labels
	margin     = 6
	gap        = 4
	thumbWidth = 18
	lineWidth  = 1.5
	glyphSize  = 2.5 // radius
)

var (
	black    = color.Gray{Y: 0}
	grey     = color.Gray{Y: 0x44}
	gridGrey = color.Gray{Y: 0xdd}
	white    = color.White
)

// palette is Okabe and Ito's, whose colours stay apart for readers with a
// colour vision deficiency; yellow is left out, too light for a line.
var palette = []color.NRGBA{
	{R: 0x00, G: 0x72, B: 0xb2, A: 0xff}, // blue
	{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff}, // vermillion
	{R: 0x00, G: 0x9e, B: 0x73, A: 0xff}, // bluish green
	{R: 0xcc, G: 0x79, B: 0xa7, A: 0xff}, // reddish purple
	{R: 0xe6, G: 0x9f, B: 0x00, A: 0xff}, // orange
	{R: 0x56, G: 0xb4, B: 0xe9, A: 0xff}, // sky blue
	{R: 0x00, G: 0x00, B: 0x00, A: 0xff}, // black
}

// dashes and glyphs keep the series apart in black and white print; their
// counts are prime to the palette's so combinations repeat late.
var (
	dashes = [][]vg.Length{
		nil,
		{6, 3},
		{1.5, 2},
		{8, 2, 1.5, 2},
		{3, 3},
		{12, 3},
	}
	glyphs = []draw.GlyphDrawer{
		draw.CircleGlyph{},
		draw.TriangleGlyph{},
		draw.SquareGlyph{},
		draw.CrossGlyph{},
		draw.PlusGlyph{},
		draw.RingGlyph{},
		draw.PyramidGlyph{},
	}
	hLineDash = []vg.Length{5, 2}
	vLineDash = []vg.Length{4, 2, 1, 2}
)

// drawing is a chart prepared for drawing: clean text, drawable points and
// the axes' ranges.
type drawing struct {
	title, xLabel, yLabel string
	yLog                  bool
	x, y                  extent
	series                []series
	bands                 []band
	hLines, vLines        []marker
	hasData               bool
}

type point struct {
	x, y  float64
	label string
}

type series struct {
	name   string
	points bool
	runs   [][]point // runs of drawable points, between gaps
}

type bandPoint struct{ x, lo, hi float64 }

type band struct {
	name string
	runs [][]bandPoint
}

type marker struct {
	value float64
	label string
}

func textStyle(f font.Font, size vg.Length, clr color.Color, x draw.XAlignment, y draw.YAlignment) text.Style {
	return text.Style{
		Color:   clr,
		Font:    font.From(f, size),
		XAlign:  x,
		YAlign:  y,
		Handler: anchored{text.Plain{Fonts: font.DefaultCache}},
	}
}

// Private-use characters that mark, for inline, text to be anchored at its
// middle or end; cleanText removes them from the caller's text.
const (
	anchorMiddle = "\ue000"
	anchorEnd    = "\ue001"
)

// anchored is text.Plain, except that it writes centred and right-aligned
// text at its anchor, marked for inline to set text-anchor, rather than at
// a left edge computed from Liberation Sans' widths: with a wider font in
// its place, a title stays centred and a tick label stays clear of its
// tick, instead of running to the right.
type anchored struct{ text.Plain }

func (h anchored) Draw(c vg.Canvas, txt string, sty text.Style, pt vg.Point) {
	if strings.TrimRight(txt, "\n") == "" {
		return // as text.Plain does, rather than write a lone mark
	}
	var mark string
	switch sty.XAlign {
	case draw.XCenter:
		mark = anchorMiddle
	case draw.XRight:
		mark = anchorEnd
	default:
		h.Plain.Draw(c, txt, sty, pt)
		return
	}
	sty.XAlign = draw.XLeft
	h.Plain.Draw(c, mark+strings.ReplaceAll(txt, "\n", "\n"+mark), sty, pt)
}

// draw draws the title and the legend across the top, and the plot below.
// gonum/plot's own legend is drawn inside the data area, where it hides
// data; a row under the title takes less room than a column beside it.
func (d *drawing) draw(dc draw.Canvas) {
	dc.SetColor(white)
	dc.Fill(dc.Rectangle.Path())
	area := draw.Crop(dc, margin, -margin, margin, -margin)
	if d.title != "" {
		sty := textStyle(sansBold, titleSize, black, draw.XCenter, draw.YTop)
		title := fit(sty, d.title, area.Size().X)
		area.FillText(sty, vg.Point{X: area.Center().X, Y: area.Max.Y}, title)
		area.Max.Y -= sty.Height(title) + gap
	}
	area.Max.Y -= d.legend(area)
	d.plot().Draw(area)
}

// legendEntry is a name in the legend and the sample of its style.
type legendEntry struct {
	name  string
	thumb func(c *draw.Canvas)
}

// legend draws the legend in centred rows across the top of area and
// returns the height it took.
func (d *drawing) legend(area draw.Canvas) vg.Length {
	var entries []legendEntry
	for i, s := range d.series {
		if s.name != "" {
			st := seriesStyle(i)
			entries = append(entries, legendEntry{s.name, func(c *draw.Canvas) { st.thumbnail(c, s.points) }})
		}
	}
	for i, b := range d.bands {
		if b.name != "" {
			clr := bandColor(i)
			entries = append(entries, legendEntry{b.name, func(c *draw.Canvas) { fillRect(c, clr, c.Rectangle) }})
		}
	}
	if len(entries) == 0 {
		return 0
	}

	sty := textStyle(sans, smallSize, black, draw.XLeft, draw.YCenter)
	const sep = 10 // between entries
	avail := area.Size().X
	width := func(e legendEntry) vg.Length { return thumbWidth + gap + sty.Width(e.name) }
	var rows [][]legendEntry
	var row []legendEntry
	var rowWidth vg.Length
	for _, e := range entries {
		e.name = fit(sty, e.name, avail-thumbWidth-gap)
		w := width(e)
		if len(row) > 0 && rowWidth+sep+w > avail {
			rows = append(rows, row)
			row, rowWidth = nil, 0
		}
		if len(row) > 0 {
			rowWidth += sep
		}
		row = append(row, e)
		rowWidth += w
	}
	rows = append(rows, row)

	rowHeight := sty.Height("Xg") * 1.4
	y := area.Max.Y - rowHeight/2
	for _, row := range rows {
		var w vg.Length
		for i, e := range row {
			if i > 0 {
				w += sep
			}
			w += width(e)
		}
		x := area.Center().X - w/2
		for _, e := range row {
			thumb := draw.Canvas{Canvas: area.Canvas, Rectangle: vg.Rectangle{
				Min: vg.Point{X: x, Y: y - 3.5},
				Max: vg.Point{X: x + thumbWidth, Y: y + 3.5},
			}}
			e.thumb(&thumb)
			area.FillText(sty, vg.Point{X: x + thumbWidth + gap, Y: y}, e.name)
			x += width(e) + sep
		}
		y -= rowHeight
	}
	return rowHeight*vg.Length(len(rows)) + gap
}

// fit shortens s with an ellipsis until it is no wider than w, with room
// to spare for a fallback font wider than Liberation Sans (DejaVu Sans, the
// usual sans-serif on Linux without Liberation, is about 10% wider).
func fit(sty text.Style, s string, w vg.Length) string {
	w *= 0.88
	if sty.Width(s) <= w {
		return s
	}
	// The longest prefix that fits, found by bisection: labels may be long.
	r := []rune(s)
	n := sort.Search(len(r), func(n int) bool { return sty.Width(string(r[:n+1])+"…") > w })
	return string(r[:n]) + "…"
}

// plot returns the axes, grid and data, without title or legend.
func (d *drawing) plot() *plot.Plot {
	p := plot.New()
	p.BackgroundColor = nil
	p.X.Min, p.X.Max = d.x.min, d.x.max
	p.Y.Min, p.Y.Max = d.y.min, d.y.max
	p.X.Label.Text, p.Y.Label.Text = d.xLabel, d.yLabel
	p.X.Label.TextStyle = textStyle(sans, labelSize, black, draw.XCenter, draw.YBottom)
	p.Y.Label.TextStyle = textStyle(sans, labelSize, black, draw.XCenter, draw.YBottom)
	p.X.Tick.Label = textStyle(sans, smallSize, black, draw.XCenter, draw.YTop)
	p.Y.Tick.Label = textStyle(sans, smallSize, black, draw.XRight, draw.YCenter)
	p.X.Tick.Length, p.Y.Tick.Length = 4, 4
	p.X.Tick.Marker = linearTicks{}
	p.Y.Tick.Marker = linearTicks{}
	if d.yLog {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}

	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = gridGrey, gridGrey
	grid.Vertical.Width, grid.Horizontal.Width = 0.5, 0.5
	p.Add(grid)
	for i, b := range d.bands {
		p.Add(bandPlotter{b, bandColor(i)})
	}
	p.Add(markerLines{d.hLines, d.vLines})
	// The points' labels of every series share one list of the places
	// taken: a label that would overlap one written is left out (levels
	// close together, at the knee, would write "n=110" three times over).
	// The markers' labels are drawn last, over everything, and take
	// their places first: a point's label goes elsewhere, or is left out.
	// They keep off the points themselves too.
	var pts []point
	for _, s := range d.series {
		for _, run := range s.runs {
			pts = append(pts, run...)
		}
	}
	taken := &[]vg.Rectangle{}
	p.Add(markerLabels{h: d.hLines, v: d.vLines, points: pts, reserve: taken})
	for i, s := range d.series {
		p.Add(seriesPlotter{s, seriesStyle(i), taken})
	}
	p.Add(markerLabels{h: d.hLines, v: d.vLines, points: pts})
	if !d.hasData {
		p.Add(noData{})
	}
	return p
}

// style is how a series is drawn.
type style struct {
	line  draw.LineStyle
	glyph draw.GlyphStyle
}

func seriesStyle(i int) style {
	clr := palette[i%len(palette)]
	return style{
		line:  draw.LineStyle{Color: clr, Width: lineWidth, Dashes: dashes[i%len(dashes)]},
		glyph: draw.GlyphStyle{Color: clr, Radius: glyphSize, Shape: glyphs[i%len(glyphs)]},
	}
}

func (st style) thumbnail(c *draw.Canvas, points bool) {
	y := c.Center().Y
	c.StrokeLine2(st.line, c.Min.X, y, c.Max.X, y)
	if points {
		c.DrawGlyphNoClip(st.glyph, c.Center())
	}
}

// bandColor is a light, translucent palette colour, so that bands and
// grid stay visible through each other.
func bandColor(i int) color.Color {
	clr := palette[i%len(palette)]
	clr.A = 0x38
	return clr
}

type seriesPlotter struct {
	s     series
	st    style
	taken *[]vg.Rectangle // the labels written so far, of every series
}

func (sp seriesPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	notes := textStyle(sans, noteSize, sp.st.line.Color, draw.XCenter, draw.YBottom)
	for _, run := range sp.s.runs {
		pts := make([]vg.Point, len(run))
		for i, pt := range run {
			pts[i] = vg.Point{X: trX(pt.x), Y: trY(pt.y)}
		}
		if len(pts) > 1 {
			c.StrokeLines(sp.st.line, c.ClipLinesXY(pts)...)
		}
		if sp.s.points || len(pts) == 1 {
			for _, pt := range pts {
				c.DrawGlyph(sp.st.glyph, pt)
			}
		}
		for i, pt := range pts {
			if run[i].label != "" && c.Contains(pt) {
				note(c, notes, pt, run[i].label, sp.taken)
			}
		}
	}
}

// note writes a point's label above it, or where that place is out of
// the chart or taken, below it, left of it or right of it, kept from
// running out at the sides; not at all where each would overlap a label
// in taken (a marker's, or another point's), to which it adds its own.
func note(c draw.Canvas, sty text.Style, pt vg.Point, s string, taken *[]vg.Rectangle) {
	const off = glyphSize + 1
	w, h := sty.Width(s), sty.Height(s)
	// The places tried in turn, each a box's lower left corner: above the
	// point, below it, left of it, right of it.
	for i, at := range []vg.Point{
		{X: pt.X - w/2, Y: pt.Y + off},
		{X: pt.X - w/2, Y: pt.Y - off - h},
		{X: pt.X - off - w, Y: pt.Y - h/2},
		{X: pt.X + off, Y: pt.Y - h/2},
	} {
		// Kept from running out at the sides; beside the point, from
		// running out at the top and bottom too.
		at.X = max(c.Min.X, min(at.X, c.Max.X-w))
		if i >= 2 {
			at.Y = max(c.Min.Y, min(at.Y, c.Max.Y-h))
		}
		box := vg.Rectangle{Min: at, Max: vg.Point{X: at.X + w, Y: at.Y + h}}
		if box.Max.Y > c.Max.Y || box.Min.Y < c.Min.Y || overlaps(box, *taken) {
			continue
		}
		*taken = append(*taken, box)
		sty.XAlign, sty.YAlign = draw.XLeft, draw.YBottom
		c.FillText(sty, at, s)
		return
	}
}

// overlaps reports whether box overlaps any of taken.
func overlaps(box vg.Rectangle, taken []vg.Rectangle) bool {
	for _, r := range taken {
		if box.Min.X < r.Max.X && r.Min.X < box.Max.X && box.Min.Y < r.Max.Y && r.Min.Y < box.Max.Y {
			return true
		}
	}
	return false
}

type bandPlotter struct {
	b   band
	clr color.Color
}

func (bp bandPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, run := range bp.b.runs {
		if len(run) == 1 {
			// A band over one X has no area: draw it as a bar.
			x := trX(run[0].x)
			c.StrokeLines(draw.LineStyle{Color: bp.clr, Width: 6}, c.ClipLinesXY([]vg.Point{{X: x, Y: trY(run[0].lo)}, {X: x, Y: trY(run[0].hi)}})...)
			continue
		}
		poly := make([]vg.Point, 0, 2*len(run))
		for _, pt := range run {
			poly = append(poly, vg.Point{X: trX(pt.x), Y: trY(pt.hi)})
		}
		for i := len(run) - 1; i >= 0; i-- {
			poly = append(poly, vg.Point{X: trX(run[i].x), Y: trY(run[i].lo)})
		}
		c.FillPolygon(bp.clr, c.ClipPolygonXY(poly))
	}
}

// markerLines draws the reference lines under the series; markerLabels
// writes their labels over them, so that no line hides a label.
type markerLines struct{ h, v []marker }

func (m markerLines) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	hs := draw.LineStyle{Color: grey, Width: 1, Dashes: hLineDash}
	for _, l := range m.h {
		y := trY(l.value)
		c.StrokeLine2(hs, c.Min.X, y, c.Max.X, y)
	}
	vs := draw.LineStyle{Color: grey, Width: 1, Dashes: vLineDash}
	for _, l := range m.v {
		x := trX(l.value)
		c.StrokeLine2(vs, x, c.Min.Y, x, c.Max.Y)
	}
}

// markerLabels writes the markers' labels; with reserve set it writes
// nothing and adds the places they take to it.
type markerLabels struct {
	h, v    []marker
	points  []point
	reserve *[]vg.Rectangle
}

// write writes a marker's label, or reserves its place.
func (m markerLabels) write(c draw.Canvas, sty text.Style, pt vg.Point, s string) {
	if m.reserve == nil {
		boxedText(c, sty, pt, s)
		return
	}
	*m.reserve = append(*m.reserve, textBox(sty, pt, s))
}

// textBox is the place text written at pt takes.
func textBox(sty text.Style, pt vg.Point, s string) vg.Rectangle {
	r := sty.Rectangle(s)
	return vg.Rectangle{Min: r.Min.Add(pt), Max: r.Max.Add(pt)}
}

func (m markerLabels) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	const pad = 2
	// placed are the labels written so far: a label goes where it
	// overlaps none of them (an objective's label at the right end and a
	// line's label at its top meet in the top right corner).
	var placed []vg.Rectangle
	// The points are taken as the labels are (a box of their marker's
	// size), but written over: a label is written where it hides no
	// point if there is such a place, else where it was.
	var dots []vg.Rectangle
	for _, pt := range m.points {
		x, y := trX(pt.x), trY(pt.y)
		dots = append(dots, vg.Rectangle{Min: vg.Point{X: x - 3, Y: y - 3}, Max: vg.Point{X: x + 3, Y: y + 3}})
	}
	put := func(sty text.Style, pt vg.Point, s string) {
		placed = append(placed, textBox(sty, pt, s))
		m.write(c, sty, pt, s)
	}
	// A horizontal line's label sits at its right end, above it, or below
	// it when the line runs along the top; at its left end where the
	// right one is taken.
	for _, l := range m.h {
		if l.label == "" {
			continue
		}
		sty := textStyle(sans, smallSize, grey, draw.XRight, draw.YBottom)
		label := fit(sty, l.label, c.Size().X-2*pad)
		y := trY(l.value) + pad
		if y+sty.Height(label) > c.Max.Y {
			sty.YAlign = draw.YTop
			y -= 2 * pad
		}
		pt := vg.Point{X: c.Max.X - pad, Y: y}
		if b := textBox(sty, pt, label); overlaps(b, placed) || overlaps(b, dots) {
			left, lpt := sty, vg.Point{X: c.Min.X + pad, Y: y}
			left.XAlign = draw.XLeft
			if lb := textBox(left, lpt, label); !overlaps(lb, placed) && (overlaps(b, placed) || !overlaps(lb, dots)) {
				sty, pt = left, lpt
			}
		}
		put(sty, pt, label)
	}
	// A vertical line's label sits at its top, right of it unless it would
	// run out of the chart; each a row lower than the one before, so that
	// the labels of close markers do not overwrite each other; the other
	// side of its line, or a row lower, where a label is already.
	y := c.Max.Y - pad
	for _, l := range m.v {
		if l.label == "" {
			continue
		}
		sty := textStyle(sans, smallSize, grey, draw.XLeft, draw.YTop)
		label := fit(sty, l.label, c.Size().X/2)
		h := sty.Height(label) + pad
		candidate := func(y float64, right bool) (text.Style, vg.Point) {
			s, x := sty, trX(l.value)+pad
			if !right || x+sty.Width(label) > c.Max.X {
				s.XAlign, x = draw.XRight, trX(l.value)-pad
			}
			return s, vg.Point{X: x, Y: vg.Length(y)}
		}
		// find tries its row and up to five below, each right of the
		// line then left of it, for the first place free says is free.
		find := func(free func(vg.Rectangle) bool) (text.Style, vg.Point, bool) {
			for row, cy := 0, y; row < 6 && cy >= c.Min.Y+h; row, cy = row+1, cy-h {
				for _, right := range []bool{true, false} {
					if s, pt := candidate(float64(cy), right); free(textBox(s, pt, label)) {
						return s, pt, true
					}
				}
			}
			return text.Style{}, vg.Point{}, false
		}
		bestSty, best, found := find(func(b vg.Rectangle) bool { return !overlaps(b, placed) && !overlaps(b, dots) })
		if !found {
			// No place hides no point: the first that overlaps no label.
			bestSty, best, found = find(func(b vg.Rectangle) bool { return !overlaps(b, placed) })
		}
		if !found {
			bestSty, best = candidate(float64(y), true)
		}
		put(bestSty, best, label)
		y -= h
		if y < c.Min.Y+h {
			y = c.Max.Y - pad
		}
	}
}

// boxedText writes text on a translucent white box, to be read over lines.
func boxedText(c draw.Canvas, sty text.Style, pt vg.Point, s string) {
	r := sty.Rectangle(s)
	r.Min = r.Min.Add(pt).Sub(vg.Point{X: 1, Y: 0.5})
	r.Max = r.Max.Add(pt).Add(vg.Point{X: 1, Y: 0.5})
	fillRect(&c, color.NRGBA{R: 0xff, G: 0xff, B: 0xff, A: 0xcc}, r)
	c.FillText(sty, pt, s)
}

func fillRect(c *draw.Canvas, clr color.Color, r vg.Rectangle) {
	c.SetColor(clr)
	c.Fill(r.Path())
}

// noData says so in an empty chart, which would otherwise look broken.
type noData struct{}

func (noData) Plot(c draw.Canvas, _ *plot.Plot) {
	sty := textStyle(sans, labelSize, grey, draw.XCenter, draw.YCenter)
	c.FillText(sty, c.Center(), "no data")
}

// logTicks labels a logarithmic axis. plot.LogTicks labels only powers of
// ten, so a range within one decade, common for latencies, gets no label
// at all; this labels 1, 2 and 5 times them, or every multiple, as needed
// for at least two labels, and never panics.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) || math.IsInf(max, 0) {
		return nil
	}
	lo, hi := int(math.Floor(math.Log10(min))), int(math.Ceil(math.Log10(max)))
	// Over many decades, label every step-th power of ten only.
	step := 1
	for (hi-lo)/step > 8 {
		step++
	}
	sets := [][]int{{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}
	for _, labelled := range sets {
		var ticks []plot.Tick
		n := 0
		for e := lo; e <= hi; e++ {
			for m := 1; m <= 9; m++ {
				v := pow10(m, e)
				if v < min || v > max || (step > 1 && m > 1) {
					continue
				}
				t := plot.Tick{Value: v}
				if slices.Contains(labelled, m) && (e-lo)%step == 0 {
					t.Label = formatTick(v)
					n++
				}
				ticks = append(ticks, t)
			}
		}
		if n >= 2 {
			return ticks
		}
	}
	// Less than a factor of two: linear ticks place well enough.
	return linearTicks{}.Ticks(min, max)
}

// linearTicks labels a linear axis at about five round values: gonum/plot's
// DefaultTicks aims at three, too few to read a value off the chart.
type linearTicks struct{}

func (linearTicks) Ticks(min, max float64) []plot.Tick {
	r := max - min
	if !(r > 0) || math.IsInf(r, 0) {
		return nil
	}
	step, decimals := linearStep(r)
	var ticks []plot.Tick
	// The tolerance keeps the ends of a range rounded to the step labelled
	// despite the rounding of min/step.
	const tol = 1e-9
	for i := math.Ceil(min/step - tol); i*step <= max+tol*step && len(ticks) < 20; i++ {
		v := i*step + 0 // no -0
		ticks = append(ticks, plot.Tick{Value: v, Label: formatLinear(v, decimals)})
	}
	return ticks
}

// linearStep returns the step between five to seven ticks over a range r,
// m×10^e with m one of 1, 2, 2.5 and 5, and the decimals it needs.
func linearStep(r float64) (step float64, decimals int) {
	e := int(math.Floor(math.Log10(r / 5)))
	var m float64
	for _, m = range []float64{1, 2, 2.5, 5, 10} {
		if m*math.Pow10(e) >= r/7 {
			break
		}
	}
	decimals = -e
	if m == 2.5 {
		decimals++
	}
	return m * math.Pow10(e), decimals
}

// niceLog rounds v > 0 down, or up, to 1, 2 or 5 times a power of ten.
func niceLog(v float64, up bool) float64 {
	e := int(math.Floor(math.Log10(v)))
	if up {
		for _, m := range []int{1, 2, 5, 10} {
			if n := pow10(m, e); n >= v {
				return n
			}
		}
		return pow10(10, e) // not reached
	}
	for _, m := range []int{10, 5, 2, 1} {
		if n := pow10(m, e); n <= v {
			return n
		}
	}
	return pow10(1, e-1) // v rounded below 10^e in Log10
}

// formatLinear writes a tick value with the decimals its step needs, so
// that 0.1×3 is written 0.3, not 0.30000000000000004.
func formatLinear(v float64, decimals int) string {
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e7) {
		// Significant digits: those of the step, up to v's magnitude.
		prec := int(math.Floor(math.Log10(a))) + decimals + 1
		return strconv.FormatFloat(v, 'g', min(max(prec, 1), 15), 64)
	}
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', max(decimals, 0), 64)
}

// pow10 returns m×10^e without the rounding of m*math.Pow10(e) for e < 0,
// so that 3e-3 is labelled 0.003, not 0.0030000000000000005.
func pow10(m, e int) float64 {
	if e < 0 {
		return float64(m) / math.Pow10(-e)
	}
	return float64(m) * math.Pow10(e)
}

func formatTick(v float64) string {
	if a := math.Abs(v); a >= 1e-4 && a < 1e7 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
