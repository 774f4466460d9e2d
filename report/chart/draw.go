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
	capHalf    = 3   // half the width of an interval's caps
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
	yTicksMax             float64 // no Y tick above it (Chart.YCeil)
	series                []series
	bands                 []band
	hLines, vLines        []marker
	hasData               bool
}

type point struct {
	x, y   float64
	label  string
	lo, hi float64 // the point's interval, if bar
	bar    bool
}

type series struct {
	name      string
	points    bool
	intervals bool      // the series has intervals (Series.Low, High)
	runs      [][]point // runs of drawable points, between gaps
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
			entries = append(entries, legendEntry{s.name, func(c *draw.Canvas) { st.thumbnail(c, s.points, s.intervals) }})
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
	p.Y.Tick.Marker = upTo{linearTicks{}, d.yTicksMax}
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
	// Both keep off the points and the intervals too.
	taken := &[]vg.Rectangle{}
	p.Add(markerLabels{d: d, reserve: taken})
	for i, s := range d.series {
		p.Add(seriesPlotter{s, seriesStyle(i)})
	}
	p.Add(pointLabels{d: d, taken: taken})
	p.Add(markerLabels{d: d})
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

// thumbnail is the series' sample in the legend: its line, with its
// glyph if it marks its points, and an interval's bar and caps if it has
// intervals (the thumbnail's height: the legend's row).
func (st style) thumbnail(c *draw.Canvas, points, intervals bool) {
	y := c.Center().Y
	c.StrokeLine2(st.line, c.Min.X, y, c.Max.X, y)
	if intervals {
		ctr := c.Center()
		interval(c, st.line, ctr.X, c.Min.Y-1, c.Max.Y+1)
	}
	if points {
		c.DrawGlyphNoClip(st.glyph, c.Center())
	}
}

// interval draws an interval's vertical bar at x from lo to hi in the
// line's colour and dash, with caps, solid, at its ends.
func interval(c *draw.Canvas, line draw.LineStyle, x, lo, hi vg.Length) {
	c.StrokeLine2(line, x, lo, x, hi)
	line.Dashes = nil
	for _, y := range []vg.Length{lo, hi} {
		c.StrokeLine2(line, x-capHalf, y, x+capHalf, y)
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
	s  series
	st style
}

// Plot draws the series' lines, then its intervals, then its glyphs; the
// points' labels are pointLabels'.
func (sp seriesPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, run := range sp.s.runs {
		pts := make([]vg.Point, len(run))
		for i, pt := range run {
			pts[i] = vg.Point{X: trX(pt.x), Y: trY(pt.y)}
		}
		if len(pts) > 1 {
			c.StrokeLines(sp.st.line, c.ClipLinesXY(pts)...)
		}
		for i, pt := range run {
			if pt.bar && c.ContainsX(pts[i].X) {
				lo, hi := max(trY(pt.lo), c.Min.Y), min(trY(pt.hi), c.Max.Y)
				interval(&c, sp.st.line, pts[i].X, lo, hi)
			}
		}
		if sp.s.points || len(pts) == 1 {
			for _, pt := range pts {
				c.DrawGlyph(sp.st.glyph, pt)
			}
		}
	}
}

// obstacles are the places of the points (a box of their glyph's size)
// and of the intervals' bars, which a label should not hide.
func (d *drawing) obstacles(c draw.Canvas, p *plot.Plot) []vg.Rectangle {
	trX, trY := p.Transforms(&c)
	const r = glyphSize + 0.5
	var out []vg.Rectangle
	for _, s := range d.series {
		for _, run := range s.runs {
			for _, pt := range run {
				x, y := trX(pt.x), trY(pt.y)
				out = append(out, vg.Rectangle{Min: vg.Point{X: x - r, Y: y - r}, Max: vg.Point{X: x + r, Y: y + r}})
				if pt.bar {
					out = append(out, vg.Rectangle{Min: vg.Point{X: x - capHalf, Y: trY(pt.lo) - 0.5}, Max: vg.Point{X: x + capHalf, Y: trY(pt.hi) + 0.5}})
				}
			}
		}
	}
	return out
}

// pointLabels writes the points' labels, of every series, in the
// series' colours: those of points at a vertical marker (the level it
// marks) first, then the others in order, each where it overlaps no
// label written (taken: the markers' labels to start with), no point,
// no interval and no reference line, or not at all; nor at all for a
// point on a labelled one of its series (levels close together at the
// knee), whose label could not be told from the other's. A point at a
// marker keeps its label:
// where no place beside it is free, it goes at a corner of it, or where
// it hides no other label.
type pointLabels struct {
	d     *drawing
	taken *[]vg.Rectangle
}

func (pl pointLabels) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	type labelled struct {
		pt     vg.Point
		s      string
		clr    color.Color
		series int
	}
	var first, rest []labelled
	for i, s := range pl.d.series {
		clr := seriesStyle(i).line.Color
		for _, run := range s.runs {
			for _, pt := range run {
				at := vg.Point{X: trX(pt.x), Y: trY(pt.y)}
				if pt.label == "" || !c.Contains(at) {
					continue
				}
				l := labelled{at, pt.label, clr, i}
				if slices.ContainsFunc(pl.d.vLines, func(m marker) bool { return m.value == pt.x }) {
					first = append(first, l)
				} else {
					rest = append(rest, l)
				}
			}
		}
	}
	// The reference lines too: a label is not struck through.
	obstacles := pl.d.obstacles(c, p)
	for _, m := range pl.d.vLines {
		x := trX(m.value)
		obstacles = append(obstacles, vg.Rectangle{Min: vg.Point{X: x - 0.5, Y: c.Min.Y}, Max: vg.Point{X: x + 0.5, Y: c.Max.Y}})
	}
	for _, m := range pl.d.hLines {
		y := trY(m.value)
		obstacles = append(obstacles, vg.Rectangle{Min: vg.Point{X: c.Min.X, Y: y - 0.5}, Max: vg.Point{X: c.Max.X, Y: y + 0.5}})
	}
	var written []labelled
	for i, l := range append(first, rest...) {
		keep := i < len(first)
		if !keep && slices.ContainsFunc(written, func(o labelled) bool {
			return o.series == l.series && math.Hypot(float64(o.pt.X-l.pt.X), float64(o.pt.Y-l.pt.Y)) < 2*glyphSize+1
		}) {
			continue
		}
		sty := textStyle(sans, noteSize, l.clr, draw.XLeft, draw.YBottom)
		if note(c, sty, l.pt, l.s, pl.taken, obstacles, keep) {
			written = append(written, l)
		}
	}
}

// note writes a point's label above it, or where that place is out of
// the chart, taken or hides a point or an interval (obstacles), below
// it, left of it or right of it, kept from running out at the sides; not
// at all where each would, unless keep: then at a corner of it, or, of
// the places that overlap no label, where it hides least. It adds its
// place to taken, and reports whether it wrote the label.
func note(c draw.Canvas, sty text.Style, pt vg.Point, s string, taken *[]vg.Rectangle, obstacles []vg.Rectangle, keep bool) bool {
	// off is the room between the point and its label: above and below
	// it, its glyph's; beside it, an interval's caps' too.
	const off, side = glyphSize + 1, capHalf + 1.5
	// Its box 10% wider than Liberation Sans writes it, on the side away
	// from the point: room for a wider fallback font (see fit).
	w, h := 1.1*sty.Width(s), sty.Height(s)
	type place struct {
		box   vg.Rectangle
		align draw.XAlignment
	}
	// The places tried in turn, each a box's lower left corner and the
	// side its text is anchored at (the side nearer the point, so that a
	// font wider than the one measured runs away from it): above the
	// point, below it, left of it, right of it, then above left, above
	// right, below left and below right.
	left, centre, right := draw.XRight, draw.XCenter, draw.XLeft
	aligns := []draw.XAlignment{centre, centre, left, right, left, right, left, right}
	var places []place
	for i, at := range []vg.Point{
		{X: pt.X - w/2, Y: pt.Y + off},
		{X: pt.X - w/2, Y: pt.Y - off - h},
		{X: pt.X - side - w, Y: pt.Y - h/2},
		{X: pt.X + side, Y: pt.Y - h/2},
		{X: pt.X - side - w, Y: pt.Y + off},
		{X: pt.X + side, Y: pt.Y + off},
		{X: pt.X - side - w, Y: pt.Y - off - h},
		{X: pt.X + side, Y: pt.Y - off - h},
	} {
		if i >= 4 && !keep {
			break
		}
		// Kept from running out at the sides; beside the point, from
		// running out at the top and bottom too.
		at.X = max(c.Min.X, min(at.X, c.Max.X-w))
		if i == 2 || i == 3 {
			at.Y = max(c.Min.Y, min(at.Y, c.Max.Y-h))
		}
		box := vg.Rectangle{Min: at, Max: vg.Point{X: at.X + w, Y: at.Y + h}}
		if box.Max.Y <= c.Max.Y && box.Min.Y >= c.Min.Y && !overlaps(box, *taken) {
			places = append(places, place{box, aligns[i]})
		}
	}
	i := slices.IndexFunc(places, func(p place) bool { return !overlaps(p.box, obstacles) })
	if i < 0 && keep && len(places) > 0 {
		// The place that hides the least.
		i = 0
		for j, p := range places {
			if hidden(p.box, obstacles) < hidden(places[i].box, obstacles) {
				i = j
			}
		}
	}
	if i < 0 {
		return false
	}
	b := places[i].box
	*taken = append(*taken, b)
	// Written where textBox puts it at b.
	ext := sty.FontExtents()
	at := vg.Point{X: b.Min.X, Y: b.Min.Y + ext.Descent + ext.Ascent - sty.Font.Size}
	switch sty.XAlign, sty.YAlign = places[i].align, draw.YBottom; sty.XAlign {
	case draw.XCenter:
		at.X = (b.Min.X + b.Max.X) / 2
	case draw.XRight:
		at.X = b.Max.X
	}
	c.FillText(sty, at, s)
	return true
}

// hidden is the area of box over each of obstacles.
func hidden(box vg.Rectangle, obstacles []vg.Rectangle) vg.Length {
	var a vg.Length
	for _, r := range obstacles {
		w := min(box.Max.X, r.Max.X) - max(box.Min.X, r.Min.X)
		h := min(box.Max.Y, r.Max.Y) - max(box.Min.Y, r.Min.Y)
		if w > 0 && h > 0 {
			a += w * h
		}
	}
	return a
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

// markerLabels writes the markers' labels of d; with reserve set it
// writes nothing and adds the places they take to it.
type markerLabels struct {
	d       *drawing
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

// textBox is the place one line of text written at pt takes: from its
// font's descent below its baseline to its ascent above, where
// text.Plain draws it (text.Style.Rectangle places the line's gap below
// the descent instead, and the box a point too low for what is drawn).
func textBox(sty text.Style, pt vg.Point, s string) vg.Rectangle {
	ext := sty.FontExtents()
	w := sty.Width(s)
	x := pt.X + vg.Length(sty.XAlign)*w
	base := pt.Y + sty.Height(s)*vg.Length(sty.YAlign) - ext.Ascent + sty.Font.Size
	return vg.Rectangle{Min: vg.Point{X: x, Y: base - ext.Descent}, Max: vg.Point{X: x + w, Y: base + ext.Ascent}}
}

func (m markerLabels) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	const pad = 2
	// placed are the labels written so far: a label goes where it
	// overlaps none of them (an objective's label at the right end and a
	// line's label at its top meet in the top right corner).
	var placed []vg.Rectangle
	// The points and intervals are taken as the labels are, but written
	// over: a label is written where it hides no point or interval if
	// there is such a place, else where it was.
	dots := m.d.obstacles(c, p)
	put := func(sty text.Style, pt vg.Point, s string) {
		placed = append(placed, textBox(sty, pt, s))
		m.write(c, sty, pt, s)
	}
	// A horizontal line's label sits at its right end, above it, or below
	// it when the line runs along the top; at its left end where the
	// right one is taken.
	for _, l := range m.d.hLines {
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
	for _, l := range m.d.vLines {
		if l.label == "" {
			continue
		}
		sty := textStyle(sans, smallSize, grey, draw.XLeft, draw.YTop)
		label := fit(sty, l.label, c.Size().X/2)
		h := sty.Height(label) + pad
		// Clear of a point's glyph or an interval's caps on the line.
		const side = capHalf + 1
		candidate := func(y float64, right bool) (text.Style, vg.Point) {
			s, x := sty, trX(l.value)+side
			if !right || x+sty.Width(label) > c.Max.X {
				s.XAlign, x = draw.XRight, trX(l.value)-side
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
	r := textBox(sty, pt, s)
	r.Min = r.Min.Sub(vg.Point{X: 1, Y: 0.5})
	r.Max = r.Max.Add(vg.Point{X: 1, Y: 0.5})
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

// upTo is a Ticker's ticks up to max.
type upTo struct {
	plot.Ticker
	max float64
}

func (u upTo) Ticks(min, max float64) []plot.Tick {
	ts := u.Ticker.Ticks(min, max)
	return slices.DeleteFunc(ts, func(t plot.Tick) bool { return t.Value > u.max+1e-9*math.Abs(u.max) })
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
