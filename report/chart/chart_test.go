package chart_test

import (
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/report/chart"
	"github.com/sloprober/sloprober/report/chart/charttest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// latency is the representative chart of a step test: TTFT percentiles
// against throughput, the P50..P99 band, the SLO and the knee.
func latency() *chart.Chart {
	x := []float64{0.9, 1.8, 3.5, 6.8, 12.9, 22.1, 27.5, 28.3}
	p50 := []float64{0.21, 0.22, 0.24, 0.27, 0.35, 0.62, 1.4, 2.9}
	p95 := []float64{0.30, 0.31, 0.35, 0.42, 0.58, 1.10, 2.6, 5.1}
	p99 := []float64{0.36, 0.39, 0.44, 0.55, 0.80, 1.60, 3.9, 7.3}
	n := []string{"", "", "n=210", "n=408", "n=774", "n=1326", "n=1650", "n=1698"}
	return &chart.Chart{
		ID:     "ttft",
		Title:  "TTFT against throughput, closed loop",
		XLabel: "throughput (req/s)",
		YLabel: "TTFT (s)",
		Series: []chart.Series{
			{Name: "P50", X: x, Y: p50, Points: true},
			{Name: "P95", X: x, Y: p95, Points: true},
			{Name: "P99", X: x, Y: p99, Labels: n, Points: true},
		},
		Bands:  []chart.Band{{Name: "P50–P99", X: x, Low: p50, High: p99}},
		HLines: []chart.Marker{{Value: 2, Label: "SLO: P99 ≤ 2 s"}},
		VLines: []chart.Marker{{Value: 22.1, Label: "knee: 32 clients"}},
		YZero:  true,
	}
}

// soak is a soak test's chart: 2,000 windows with a gap, a burst and a
// logarithmic axis.
func soak() *chart.Chart {
	const n = 2000
	x := make([]float64, n)
	p50, p99 := make([]float64, n), make([]float64, n)
	for i := range n {
		h := float64(i) * 12 / n
		x[i] = h
		p50[i] = 0.25 + 0.03*math.Sin(float64(i)/17)
		p99[i] = 0.6 + 0.2*math.Sin(float64(i)/29) + 0.05*h
		if i >= 900 && i < 960 { // burst
			p99[i] *= 4
		}
		if i >= 1400 && i < 1420 { // windows without a request
			p50[i], p99[i] = math.NaN(), math.NaN()
		}
	}
	return &chart.Chart{
		Title:  "Soak: TTFT per 20 s window",
		XLabel: "time since start (h)",
		YLabel: "TTFT (s)",
		Series: []chart.Series{{Name: "P50", X: x, Y: p50}, {Name: "P99", X: x, Y: p99}},
		HLines: []chart.Marker{{Value: 2, Label: "SLO: P99 ≤ 2 s"}},
		VLines: []chart.Marker{{Value: x[900], Label: "burst"}, {Value: x[960], Label: "burst end"}},
		YLog:   true,
	}
}

// svgInfo is what the tests look at in a chart.
type svgInfo struct {
	id    string   // the root's
	ids   []string // all, the root's included
	texts []string // content of <text> and <title>
}

var urlRE = regexp.MustCompile(`url\(([^)]*)\)`)

// checkSVG checks that svg is an inline-ready, self-contained <svg> element
// and returns what it holds.
func checkSVG(t *testing.T, svg string) svgInfo {
	t.Helper()
	require.True(t, strings.HasPrefix(svg, "<svg "), "no XML prolog, doctype or comment before <svg>")

	var info svgInfo
	dec := xml.NewDecoder(strings.NewReader(svg))
	depth, roots := 0, 0
	var inText bool
	elements := map[string]bool{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			require.NoError(t, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			name := tok.Name.Local
			elements[name] = true
			attrs := map[string]string{}
			for _, a := range tok.Attr {
				attrs[a.Name.Local] = a.Value
				if a.Name.Local == "id" {
					info.ids = append(info.ids, a.Value)
				}
			}
			if depth == 0 {
				roots++
				require.Equal(t, "svg", name)
				require.Regexp(t, `^0 0 [0-9.]+ [0-9.]+$`, attrs["viewBox"])
				require.Equal(t, "100%", attrs["width"])
				require.NotContains(t, attrs, "height", "the height follows from the width")
				info.id = attrs["id"]
			}
			inText = name == "text" || name == "title"
			depth++
		case xml.EndElement:
			inText = false
			depth--
		case xml.CharData:
			if inText {
				info.texts = append(info.texts, string(tok))
			}
		case xml.ProcInst, xml.Directive, xml.Comment:
			t.Fatalf("unexpected %T in the SVG", tok)
		}
	}
	require.Equal(t, 1, roots)
	for _, name := range []string{"script", "image", "foreignObject", "style", "a", "use"} {
		require.False(t, elements[name], "<%s> in the SVG", name)
	}

	noNS := strings.ReplaceAll(svg, `xmlns="http://www.w3.org/2000/svg"`, "")
	require.NotContains(t, noNS, "http://")
	require.NotContains(t, noNS, "https://")
	require.NotContains(t, svg, "@font-face")
	require.NotContains(t, svg, "Liberation Serif")
	for _, m := range urlRE.FindAllStringSubmatch(svg, -1) {
		require.True(t, strings.HasPrefix(m[1], "#"), "url(%s) refers outside the SVG", m[1])
		require.Contains(t, info.ids, m[1][1:], "url(%s) refers to no id", m[1])
	}
	require.NotContains(t, svg, "NaN")
	require.NotContains(t, svg, "Inf")
	require.NotEmpty(t, info.id)
	for _, id := range info.ids {
		require.True(t, id == info.id || strings.HasPrefix(id, info.id+"-"), "id %q lacks the chart's prefix %q", id, info.id)
	}
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(info.ids))), len(info.ids), "duplicate ids")
	return info
}

func render(t *testing.T, c *chart.Chart) (string, svgInfo) {
	t.Helper()
	svg, err := c.SVG()
	require.NoError(t, err)
	return svg, checkSVG(t, svg)
}

func TestSVGText(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chart *chart.Chart
		want  []string
	}{
		{"latency", latency(), []string{
			"TTFT against throughput, closed loop", "throughput (req/s)", "TTFT (s)",
			"P50", "P95", "P99", "P50–P99", "SLO: P99 ≤ 2 s", "knee: 32 clients", "n=1326",
		}},
		{"soak", soak(), []string{"Soak: TTFT per 20 s window", "time since start (h)", "burst", "burst end", "P99"}},
		{"escaped", &chart.Chart{
			Title:  `<script>alert("x")</script> & 'y'`,
			Series: []chart.Series{{Name: "a<b>&c", X: []float64{1, 2}, Y: []float64{1, 2}, Labels: []string{"]]>", "&amp;"}}},
		}, []string{`<script>alert("x")</script> & 'y'`, "a<b>&c", "]]>", "&amp;"}},
		// Within one decade plot.LogTicks labels nothing; these must be.
		{"log ticks in one decade", &chart.Chart{
			Series: []chart.Series{{Name: "p", X: []float64{1, 2, 3}, Y: []float64{0.21, 0.35, 0.78}}},
			YLog:   true,
		}, []string{"0.2", "0.5", "1"}},
		{"log ticks over decades", &chart.Chart{
			Series: []chart.Series{{Name: "p", X: []float64{1, 2, 3}, Y: []float64{0.004, 3, 2000}}},
			YLog:   true,
		}, []string{"0.01", "1", "100", "1000"}},
		{"tick labels without float noise", &chart.Chart{
			Series: []chart.Series{{Name: "p", X: []float64{0, 0.7}, Y: []float64{0.1, 0.4}}},
		}, []string{"0.1", "0.3", "0.6"}},
		{"empty", &chart.Chart{Title: "nothing measured"}, []string{"nothing measured", "no data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, info := render(t, tc.chart)
			for _, w := range tc.want {
				require.Contains(t, info.texts, w)
			}
			for _, text := range info.texts {
				require.NotContains(t, text, "0000000", "float noise in a tick label")
			}
		})
	}
}

// TestBadData checks that bad data never panics nor fails, and gives a
// valid chart.
func TestBadData(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	xs := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(i)
		}
		return x
	}
	for _, tc := range []struct {
		name  string
		chart chart.Chart
	}{
		{"nothing", chart.Chart{}},
		{"empty series and band", chart.Chart{Series: []chart.Series{{Name: "s"}}, Bands: []chart.Band{{Name: "b"}}}},
		{"nil and empty slices", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{}, Y: nil}}}},
		{"single point", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{3}, Y: []float64{0.5}}}}},
		{"single point band", chart.Chart{Bands: []chart.Band{{Name: "b", X: []float64{3}, Low: []float64{1}, High: []float64{2}}}}},
		{"all NaN", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{nan, 1, nan}, Y: []float64{1, nan, nan}}}}},
		{"NaN and Inf among points", chart.Chart{
			Series: []chart.Series{{Name: "s", X: []float64{0, 1, 2, 3, 4, inf, 6}, Y: []float64{1, nan, 3, -inf, 5, 6, 7}, Labels: []string{"a", "b", "c", "d", "e", "f", "g"}, Points: true}},
			Bands:  []chart.Band{{Name: "b", X: []float64{0, 1, 2, 3}, Low: []float64{0, nan, 1, 1}, High: []float64{1, 2, inf, 2}}},
		}},
		{"all equal", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{5, 5, 5}, Y: []float64{2, 2, 2}}}}},
		{"all zero", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{0, 0}, Y: []float64{0, 0}}}, YZero: true}},
		{"all equal log", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{1, 2}, Y: []float64{3, 3}}}, YLog: true}},
		{"zero and negative log", chart.Chart{
			Series: []chart.Series{{Name: "s", X: []float64{1, 2, 3, 4}, Y: []float64{0, -1, 2, 4}}},
			Bands:  []chart.Band{{Name: "b", X: []float64{1, 2, 3}, Low: []float64{0, 1, 1}, High: []float64{1, 2, 3}}},
			HLines: []chart.Marker{{Value: 0, Label: "zero"}, {Value: -5, Label: "negative"}},
			YLog:   true,
		}},
		{"only non-positive log", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{1, 2}, Y: []float64{0, -3}}}, YLog: true}},
		{"band low above high", chart.Chart{Bands: []chart.Band{{Name: "b", X: []float64{1, 2, 3}, Low: []float64{3, 2, 1}, High: []float64{1, 2, 3}}}}},
		{"markers only", chart.Chart{HLines: []chart.Marker{{Value: 2, Label: "h"}}, VLines: []chart.Marker{{Value: 7, Label: "v"}}}},
		{"bad markers", chart.Chart{HLines: []chart.Marker{{Value: nan, Label: "h"}}, VLines: []chart.Marker{{Value: -inf, Label: "v"}}}},
		{"many close markers", chart.Chart{
			Series: []chart.Series{{Name: "s", X: []float64{0, 10}, Y: []float64{0, 1}}},
			VLines: []chart.Marker{{9.9, "a marker with a long label"}, {10, "b"}, {10, "c"}, {0, "d"}, {5, "e"}, {5.1, "f"}, {5.2, "g"}, {5.3, "h"}, {5.4, "i"}, {5.5, "j"}, {5.6, "k"}},
			HLines: []chart.Marker{{1, "top"}, {0, "bottom"}},
		}},
		{"huge values", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{-1e300, 1e300, math.MaxFloat64}, Y: []float64{1e300, -1e300, 1}}}}},
		{"tiny values", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{0, 5e-324, 1e-310}, Y: []float64{5e-324, 0, 1e-320}}}}},
		{"tiny values log", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{1, 2, 3}, Y: []float64{5e-324, 1e-300, 1e300}}}, YLog: true}},
		{"narrow range far from zero", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{1.7e9, 1.7e9 + 1e-6}, Y: []float64{1e15, 1e15 + 1}}}}},
		{"large range", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{0, 3e12}, Y: []float64{-2e9, 4e9}}}}},
		{"negative values", chart.Chart{Series: []chart.Series{{Name: "s", X: []float64{-3, -2, -1}, Y: []float64{-0.5, -0.2, -0.1}}}, YZero: true}},
		{"many series", chart.Chart{Series: func() []chart.Series {
			var s []chart.Series
			for i := range 24 {
				s = append(s, chart.Series{Name: fmt.Sprintf("series %d", i), X: xs(5), Y: []float64{float64(i), 1, 2, 3, 4}, Points: true})
			}
			return s
		}()}},
		{"many points", chart.Chart{Series: []chart.Series{{Name: "s", X: xs(20000), Y: xs(20000)}}}},
		{"many glyphs", chart.Chart{Series: []chart.Series{{Name: "s", X: xs(3000), Y: xs(3000), Points: true}}}},
		{"hostile text", chart.Chart{
			Title:  "a\x00b\x1b[31mc\ufffe\xff\xfe\ue000\ue001\n\r\td",
			XLabel: strings.Repeat("very long axis label ", 40),
			Series: []chart.Series{{Name: strings.Repeat("a long series name ", 30), X: []float64{1, 2}, Y: []float64{1, 2}, Labels: []string{"\x01", "\u2028"}}},
			VLines: []chart.Marker{{Value: 1, Label: strings.Repeat("x", 500)}},
		}},
		{"smallest size", chart.Chart{Width: 120, Height: 80, Title: "small", Series: []chart.Series{{Name: "s", X: xs(3), Y: xs(3)}}}},
		{"large size", chart.Chart{Width: 5000, Height: 3000, Series: []chart.Series{{Name: "s", X: xs(3), Y: xs(3)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			render(t, &tc.chart)
		})
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chart chart.Chart
		is    error  // wrapped, if not nil
		msg   string // in the error
	}{
		{"series X and Y", chart.Chart{Series: []chart.Series{{Name: "ok", X: []float64{1}, Y: []float64{1}}, {Name: "p99", X: []float64{1, 2}, Y: []float64{1}}}}, chart.ErrLength, `series 1 "p99"`},
		{"series labels", chart.Chart{Series: []chart.Series{{Name: "p50", X: []float64{1, 2}, Y: []float64{1, 2}, Labels: []string{"a"}}}}, chart.ErrLength, `series 0 "p50"`},
		{"band", chart.Chart{Bands: []chart.Band{{Name: "p50-p99", X: []float64{1, 2}, Low: []float64{1, 2}, High: []float64{1}}}}, chart.ErrLength, `band 0 "p50-p99"`},
		{"id", chart.Chart{ID: `a" onload="x`}, chart.ErrID, "id"},
		{"id starting with a digit", chart.Chart{ID: "1a"}, chart.ErrID, "id"},
		{"negative size", chart.Chart{Width: -1}, nil, "size"},
		{"NaN size", chart.Chart{Height: math.NaN()}, nil, "size"},
		{"small size", chart.Chart{Width: 50}, nil, "size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.chart.Title = "the chart"
			svg, err := tc.chart.SVG()
			require.Error(t, err)
			require.Empty(t, svg)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			require.ErrorContains(t, err, tc.msg)
			require.ErrorContains(t, err, `chart "the chart"`)
		})
	}
}

func TestIDsDisjoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b *chart.Chart
	}{
		{"explicit", latency(), func() *chart.Chart { c := latency(); c.ID = "ttft-open"; return c }()},
		{"derived", func() *chart.Chart { c := latency(); c.ID = ""; return c }(), soak()},
		{"derived, charts differing in the title only", &chart.Chart{Title: "a"}, &chart.Chart{Title: "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a := render(t, tc.a)
			_, b := render(t, tc.b)
			require.NotEmpty(t, a.ids)
			for _, id := range a.ids {
				require.NotContains(t, b.ids, id)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	for _, c := range []*chart.Chart{latency(), soak()} {
		want, _ := render(t, c)
		// Concurrently too: the font cache is shared.
		var wg sync.WaitGroup
		got := make([]string, 4)
		errs := make([]error, len(got))
		for i := range got {
			wg.Go(func() { got[i], errs[i] = c.SVG() })
		}
		wg.Wait()
		for i := range got {
			require.NoError(t, errs[i])
			require.Equal(t, want, got[i])
		}
	}
}

// TestGolden compares the representative chart, and a page holding two
// charts under the report's Content-Security-Policy, with testdata/;
// `go test ./report/chart -run TestGolden -update` rewrites them. Open
// example.html in a browser to see the charts.
func TestGolden(t *testing.T) {
	svg, _ := render(t, latency())
	soakSVG, _ := render(t, soak())
	page := `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>report/chart example</title>
<style>body { max-width: 48rem; margin: 2rem auto; font-family: sans-serif; } figure { margin: 0 0 2rem; }</style>
</head>
<body>
<h1>report/chart example</h1>
<figure>
` + svg + `</figure>
<figure>
` + soakSVG + `</figure>
</body>
</html>
`
	for _, f := range []struct{ name, content string }{
		{"latency.svg", svg},
		{"example.html", page},
	} {
		path := filepath.Join("testdata", f.name)
		if *update {
			require.NoError(t, os.MkdirAll("testdata", 0o755))
			require.NoError(t, os.WriteFile(path, []byte(f.content), 0o644))
			continue
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err, "run go test ./report/chart -run TestGolden -update to create it")
		require.Equal(t, string(want), f.content, "%s differs; if the change is intended, run go test ./report/chart -run TestGolden -update", path)
	}
}

// TestHostileValues draws charts of values picked at random, with a fixed
// seed, among the worst there are: what a fuzz target would do, in a fixed
// time. (A fuzz target ran 70,000 executions clean, but at about 1.5 ms an
// execution it would make the Makefile's fuzz step half a minute longer.)
func TestHostileValues(t *testing.T) {
	pool := []float64{
		math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 5e-324, 1e-300, 1e-9,
		-1e300, 1e300, math.MaxFloat64, -math.MaxFloat64, 1, 1 + 1e-15, -1, 2, 1e9, 1.7e9,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) []float64 {
		vs := make([]float64, n)
		for i := range vs {
			if rng.IntN(3) == 0 {
				vs[i] = rng.NormFloat64() * math.Pow10(rng.IntN(20)-10)
			} else {
				vs[i] = pool[rng.IntN(len(pool))]
			}
		}
		return vs
	}
	for i := range 60 {
		n := rng.IntN(12)
		c := &chart.Chart{
			Title:  fmt.Sprintf("chart %d", i),
			Series: []chart.Series{{Name: "s", X: pick(n), Y: pick(n), Points: rng.IntN(2) == 0}},
			Bands:  []chart.Band{{Name: "b", X: pick(n), Low: pick(n), High: pick(n)}},
			HLines: []chart.Marker{{Value: pick(1)[0], Label: "h"}},
			VLines: []chart.Marker{{Value: pick(1)[0], Label: "v"}},
			YLog:   rng.IntN(2) == 0,
			YZero:  rng.IntN(2) == 0,
		}
		svg, err := c.SVG()
		require.NoError(t, err, "%+v", c)
		checkSVG(t, svg)
	}
}

// TestLabelsDoNotOverlap: points of a series close together (levels at
// the knee) get one label, since labels around them could not be told
// apart; points apart keep theirs, and another series' point its own
// where there is room; no label overlaps another, a marker's or a
// point.
func TestLabelsDoNotOverlap(t *testing.T) {
	c := &chart.Chart{ID: "labels", Title: "labels", Series: []chart.Series{
		{Name: "P99", X: []float64{1, 2, 10, 10.01, 10.02}, Y: []float64{10, 20, 600, 605, 610},
			Labels: []string{"n=27", "n=46", "n=110", "n=111", "n=112"}},
		{Name: "P95", X: []float64{10.03}, Y: []float64{602}, Labels: []string{"n=113"}},
	}}
	svg, d := layout(t, c)
	for _, l := range []string{"n=27", "n=46", "n=110", "n=113"} {
		require.Contains(t, svg, ">"+l+"<", "a label apart from the others")
	}
	for _, l := range []string{"n=111", "n=112"} {
		require.NotContains(t, svg, ">"+l+"<", "a label of a point on n=110's")
	}
	apart(t, d)

	// A marker's label takes its place first: the label of a point at
	// the top of the chart, on the marker's line, goes left of it (above
	// is out of the chart, below and right the marker's label).
	c = &chart.Chart{ID: "marker", Title: "marker", Series: []chart.Series{
		{Name: "met", X: []float64{1, 2, 3}, Y: []float64{50, 100, 60}, Labels: []string{"n=20", "n=138", "n=30"}, Points: true}},
		VLines: []chart.Marker{{Value: 2, Label: "verified"}}}
	svg, d = layout(t, c)
	require.Contains(t, svg, ">n=138<")
	require.Contains(t, svg, ">verified<")
	apart(t, d)
}

// evidence is the open-loop evidence chart of a real run (sloprober test
// run capacity, 2026-12-06): four levels at 7.8-10.1 req/s, three at
// 100%, each with its interval and sample, the verified rate, the
// undecided rate above it and the closed loop's peak marked.
func evidence() *chart.Chart {
	nan := math.NaN()
	return &chart.Chart{
		ID: "evidence", Title: "Open-loop evidence", XLabel: "offered req/s (Poisson)", YLabel: "attainment, % (95% interval)", YCeil: 100,
		Series: []chart.Series{
			{Name: "met", Points: true, X: []float64{8.17, nan, 8.92, nan}, Y: []float64{100, nan, 100, nan},
				Low: []float64{95.98, nan, 96.31, nan}, High: []float64{100, nan, 100, nan}, Labels: []string{"n=196", "", "n=214", ""}},
			{},
			{},
			{Name: "undecided", Points: true, X: []float64{7.83, nan, 10.13, nan}, Y: []float64{100, nan, 99.51, nan},
				Low: []float64{85.13, nan, 73.63, nan}, High: []float64{100, nan, 99.99, nan}, Labels: []string{"n=47", "", "n=608", ""}},
		},
		HLines: []chart.Marker{{Value: 95, Label: "objective 95%"}},
		VLines: []chart.Marker{{Value: 8.92, Label: "verified"}, {Value: 11.67, Label: "closed loop's peak"}, {Value: 10.13, Label: "10.1 undecided"}},
	}
}

// layout renders c and reads back its geometry.
func layout(t *testing.T, c *chart.Chart) (string, *charttest.Drawing) {
	t.Helper()
	svg, _ := render(t, c)
	d, err := charttest.Read(svg)
	require.NoError(t, err)
	return svg, d
}

// apart checks that no two texts overlap and that no point's label
// (7 px) hides a point or an interval's bar.
func apart(t *testing.T, d *charttest.Drawing) {
	t.Helper()
	for _, h := range d.Hidden() {
		t.Error(h)
	}
}

// TestYCeil: points and intervals at a ceiling (100%) are drawn whole,
// below the top of the plot, and no tick is labelled above it.
func TestYCeil(t *testing.T) {
	for name, c := range map[string]*chart.Chart{
		"evidence":   evidence(),
		"all at 100": {Series: []chart.Series{{Name: "a", X: []float64{1, 2}, Y: []float64{100, 100}, Points: true}}, YCeil: 100},
		"0 to 100":   {Series: []chart.Series{{Name: "a", X: []float64{1, 2, 3}, Y: []float64{0, 50, 100}, Points: true}}, YCeil: 100},
	} {
		t.Run(name, func(t *testing.T) {
			_, d := layout(t, c)
			top := d.PlotTop()
			n := 0
			for _, g := range d.Glyphs {
				if g.Y > top+3 {
					continue // the legend's
				}
				n++
				require.Less(t, g.Box.MaxY, top, "a point's glyph at (%.1f, %.1f) crosses the plot's top %.1f", g.X, g.Y, top)
			}
			for _, l := range d.Lines {
				if l.Horizontal() && l.Width == 1.5 && l.X2-l.X1 < 8 && l.Y1 < top+3 { // an interval's cap, not the legend's
					require.Less(t, l.Y1+0.75, top, "a cap on the plot's top")
				}
			}
			require.NotZero(t, n)
			hundred := false
			for _, tx := range d.Texts {
				if v, err := strconv.ParseFloat(tx.S, 64); err == nil && tx.Box.MinX < 40 {
					require.LessOrEqual(t, v, 100.0, "a tick above the ceiling")
					hundred = hundred || v == 100
				}
			}
			require.True(t, hundred, "the ceiling labelled")
		})
	}
	// Above the ceiling, or on a logarithmic axis, it is no ceiling.
	for _, c := range []*chart.Chart{
		{Series: []chart.Series{{Name: "a", X: []float64{1, 2}, Y: []float64{90, 120}}}, YCeil: 100},
		{Series: []chart.Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1, 100}}}, YCeil: 100, YLog: true},
	} {
		render(t, c)
	}
}

// TestIntervals: each point's interval is a vertical bar with caps in its
// series' colour and dash, and the legend shows one as well.
func TestIntervals(t *testing.T) {
	_, d := layout(t, evidence())
	apart(t, d)
	bars := map[string][]charttest.Line{}
	for _, l := range d.Lines {
		if l.Vertical() && l.Width == 1.5 && l.Y1 < 200 {
			bars[l.Stroke] = append(bars[l.Stroke], l)
		}
	}
	// Met (the first series) blue and solid; undecided (the fourth)
	// reddish purple and dash-dotted: each with its two levels' bars and
	// its legend's.
	require.Len(t, bars["#0072B2"], 2)
	for _, b := range bars["#0072B2"] {
		require.Empty(t, b.Dashes)
	}
	require.Len(t, bars["#CC79A7"], 2)
	for _, b := range bars["#CC79A7"] {
		require.Equal(t, "8,2,1.5,2", b.Dashes)
	}
	for clr, bs := range bars {
		require.Contains(t, []string{"#0072B2", "#CC79A7"}, clr, "a bar in no series' colour")
		for _, b := range bs {
			// Its point on it, in its colour.
			require.True(t, slices.ContainsFunc(d.Glyphs, func(g charttest.Glyph) bool { return g.Color == clr && math.Abs(g.X-b.X1) < 0.1 }),
				"the bar at x=%.1f has no point of its colour", b.X1)
		}
	}
	legend := 0
	for _, l := range d.Lines {
		if l.Vertical() && l.Y1 > 200 && (l.Stroke == "#0072B2" || l.Stroke == "#CC79A7") {
			legend++
		}
	}
	require.Equal(t, 2, legend, "the legend's samples show an interval")
	for _, l := range []string{"n=47", "n=196", "n=214", "n=608", "verified", "closed loop's peak", "10.1 undecided", "objective 95%"} {
		require.Len(t, d.Find(l), 1, l)
	}
}

// TestMarkedPointKeepsItsLabel: a point at a vertical marker is labelled
// first, and keeps its label where every place beside it is taken: its
// neighbours' go.
func TestMarkedPointKeepsItsLabel(t *testing.T) {
	c := evidence()
	// Levels crowded about the verified one.
	c.Series[0].X = []float64{8.87, math.NaN(), 8.92, math.NaN()}
	c.Series[3].X = []float64{8.97, math.NaN(), 9.02, math.NaN()}
	c.VLines = []chart.Marker{{Value: 8.92, Label: "verified"}, {Value: 9.02, Label: "9.02 undecided"}}
	_, d := layout(t, c)
	apart(t, d)
	require.Len(t, d.Find("n=214"), 1, "the verified level's sample")
	require.Len(t, d.Find("n=608"), 1, "the undecided level at a marker")
}
