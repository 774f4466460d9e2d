package exporter

import (
	"fmt"
	"html/template"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sloprober/sloprober/prober"
)

// The landing page's trends: per load, one bucket a minute over the last
// hour, so that a user without Grafana sees where goodput, attainment and
// TTFT P99 are going. Memory is bounded: 60 buckets a load, each keeping
// at most trendSamples TTFTs (a P99 over them is exact up to 600 requests
// a minute, 10 req/s, and a uniform sample's P99 above that).
const (
	trendMinutes = 60
	trendSamples = 600
)

// minuteBucket is one minute of a load's results.
type minuteBucket struct {
	minute  int64 // Unix minutes; 0: unused
	counted int   // requests in the attainment's denominator
	good    int
	ttfts   []time.Duration // a uniform sample of the minute's TTFTs
	seen    int             // TTFTs offered to the sample
}

// trend is a load's last hour, one bucket a minute, in a ring.
type trend struct {
	buckets [trendMinutes]minuteBucket
	rnd     *rand.Rand // for the sample
}

func newTrend() trend { return trend{rnd: rand.New(rand.NewPCG(1, 2))} }

// add records a finished request. Cancelled and shutdown requests leave the
// attainment's denominator, as in the metrics.
func (t *trend) add(at time.Time, o prober.Outcome, good bool, ttft time.Duration, hasTTFT bool) {
	if o == prober.OutcomeCancelled || o == prober.OutcomeShutdown {
		return
	}
	m := at.Unix() / 60
	b := &t.buckets[m%trendMinutes]
	switch {
	case b.minute > m:
		return // older than the hour the ring holds
	case b.minute < m:
		*b = minuteBucket{minute: m, ttfts: b.ttfts[:0]}
	}
	b.counted++
	if good {
		b.good++
	}
	if !hasTTFT {
		return
	}
	b.seen++
	switch {
	case len(b.ttfts) < trendSamples:
		b.ttfts = append(b.ttfts, ttft)
	default:
		// Reservoir sampling: each TTFT stays with probability
		// trendSamples/seen.
		if i := t.rnd.IntN(b.seen); i < trendSamples {
			b.ttfts[i] = ttft
		}
	}
}

// TrendPoint is one minute of a load's trend; a minute without results
// has NaN attainment and no TTFT.
type TrendPoint struct {
	Start      time.Time
	Goodput    float64 // good requests a second over the minute
	Attainment float64 // good / counted; NaN with none counted
	TTFTP99    time.Duration
	HasTTFT    bool
}

// snapshot copies the buckets, for points to compute from without the
// lock that add takes.
func (t *trend) snapshot() []minuteBucket {
	out := make([]minuteBucket, len(t.buckets))
	for i, b := range t.buckets {
		b.ttfts = slices.Clone(b.ttfts)
		out[i] = b
	}
	return out
}

// points returns the hour before now, a point a minute, oldest first, from
// a snapshot; the minute under way is left out (it is not over). A request
// counts in the minute it finished, as a counter's increase does.
func points(buckets []minuteBucket, now time.Time) []TrendPoint {
	cur := now.Unix() / 60
	out := make([]TrendPoint, 0, trendMinutes-1)
	for m := cur - trendMinutes + 1; m < cur; m++ {
		p := TrendPoint{Start: time.Unix(m*60, 0).UTC(), Attainment: math.NaN()}
		if b := &buckets[m%trendMinutes]; b.minute == m {
			p.Goodput = float64(b.good) / 60
			if b.counted > 0 {
				p.Attainment = float64(b.good) / float64(b.counted)
			}
			if n := len(b.ttfts); n > 0 {
				slices.Sort(b.ttfts)
				p.TTFTP99, p.HasTTFT = b.ttfts[int(math.Ceil(0.99*float64(n)))-1], true // nearest rank
			}
		}
		out = append(out, p)
	}
	return out
}

// sparkline draws values (NaN: no value) as an inline SVG polyline of
// w x h pixels, its title saying what it shows and its last value; the
// page's policy allows inline SVG and no script.
func sparkline(title string, values []float64, last string) template.HTML {
	const w, h = 180.0, 28.0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if !math.IsNaN(v) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" width="%g" height="%g" viewBox="0 0 %g %g" role="img"><title>%s</title>`,
		w, h, w, h, template.HTMLEscapeString(title+": "+last))
	if !math.IsInf(lo, 1) {
		span := hi - lo
		if span == 0 {
			span = 1
		}
		var seg []string
		flush := func() {
			if len(seg) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="#0072B2" stroke-width="1.5" points="%s"/>`, strings.Join(seg, " "))
			}
			seg = seg[:0]
		}
		for i, v := range values {
			if math.IsNaN(v) {
				flush()
				continue
			}
			x := w * float64(i) / float64(max(1, len(values)-1))
			y := h - 2 - (h-4)*(v-lo)/span
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		flush()
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and an escaped title only
}

// Sparklines are a load's three trends over the last hour, for the page.
type Sparklines struct {
	Goodput, Attainment, TTFTP99 template.HTML
	// Last are the last full minute's values, as text.
	LastGoodput, LastAttainment, LastTTFTP99 string
}

// sparklines draws a load's trend points.
func sparklines(ps []TrendPoint) Sparklines {
	gp, att, ttft := make([]float64, len(ps)), make([]float64, len(ps)), make([]float64, len(ps))
	for i, p := range ps {
		gp[i], att[i] = p.Goodput, 100*p.Attainment
		if math.IsNaN(p.Attainment) {
			gp[i] = math.NaN() // nothing sent that minute (before the load began): no line, not a 0
		}
		ttft[i] = math.NaN()
		if p.HasTTFT {
			ttft[i] = float64(p.TTFTP99) / float64(time.Millisecond)
		}
	}
	var s Sparklines
	s.LastGoodput, s.LastAttainment, s.LastTTFTP99 = "-", "-", "-"
	if n := len(ps); n > 0 {
		p := ps[n-1]
		s.LastGoodput = fmt.Sprintf("%.3g good req/s", p.Goodput)
		if !math.IsNaN(p.Attainment) {
			s.LastAttainment = fmt.Sprintf("%.1f%%", 100*p.Attainment)
		}
		if p.HasTTFT {
			s.LastTTFTP99 = ms(p.TTFTP99)
		}
	}
	s.Goodput = sparkline("goodput, the last hour a minute a point", gp, s.LastGoodput)
	s.Attainment = sparkline("attainment, the last hour a minute a point", att, s.LastAttainment)
	s.TTFTP99 = sparkline("TTFT P99, the last hour a minute a point", ttft, s.LastTTFTP99)
	return s
}
