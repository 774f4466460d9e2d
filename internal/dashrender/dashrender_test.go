package dashrender

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// TestQuery: the dashboards' variables are replaced as Grafana does with
// "All" selected; an unknown one is an error naming it.
func TestQuery(t *testing.T) {
	o := Options{RateInterval: 30 * time.Second}
	q, err := o.Query(`rate(x{target=~"$target",test=~"${test}"}[$__rate_interval])`)
	require.NoError(t, err)
	require.Equal(t, `rate(x{target=~".+",test=~".+"}[30s])`, q)
	_, err = o.Query(`x{a="$nope"}`)
	require.ErrorContains(t, err, "unknown template variables [$nope]")
}

func TestLegend(t *testing.T) {
	m := model.Metric{"target": "sim", "scenario": "chat"}
	require.Equal(t, "sim/chat p99", legend("{{target}}/{{ scenario }} p99", m))
	require.Equal(t, "sim/ x", legend("{{target}}/{{missing}} x", m), "a label the series lacks is empty, as in Grafana")
	require.Equal(t, m.String(), legend("", m))
}

func TestFormat(t *testing.T) {
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{-12.8, "percentunit", "-1280 %"},
		{0.953, "percentunit", "95.3 %"},
		{4, "reqps", "4 req/s"},
		{0.0123, "", "0.0123"},
		{246, "s", "4m6s"},
		{1, "bool_yes_no", "yes"},
		{float64(now.Add(-3 * time.Minute).UnixMilli()), "dateTimeFromNow", "3m ago"},
		{float64(now.Add(90 * time.Minute).UnixMilli()), "dateTimeFromNow", "in 1h30m"},
	} {
		require.Equal(t, tc.want, format(tc.v, tc.unit, now), "%g %s", tc.v, tc.unit)
	}
}

// TestColours: a value's colour is its mapping's, else its threshold
// step's; a state timeline and a stat draw with it.
func TestColours(t *testing.T) {
	d := &Dashboard{}
	require.NoError(t, jsonUnmarshal(`{"panels": [{"type": "stat", "title": "Last verdict", "fieldConfig": {"defaults": {
		"mappings": [{"type": "value", "options": {"1": {"text": "pass", "color": "green"}}},
		             {"type": "special", "options": {"match": "null+nan", "result": {"text": "never"}}}],
		"thresholds": {"steps": [{"color": "text", "value": null}, {"color": "red", "value": 2}]}}}}]}`, d))
	p := &d.Panels[0]
	require.Equal(t, "green", p.colourOf(1))
	require.Equal(t, "red", p.colourOf(3))
	require.Equal(t, "text", p.colourOf(0))
	html := string(stat([]series{{name: "sim/knee", v: []float64{1}}}, p, time.Now()))
	require.Contains(t, html, `style="background:#56a64b;color:#fff"><b>pass</b><span style="color:#fff">sim/knee</span>`)
	html = string(stat([]series{{name: "sim/<x>", v: []float64{nan()}}}, p, time.Now()))
	require.Contains(t, html, "<b>never</b><span>sim/&lt;x&gt;</span>", "mapped and escaped")
	tl := string(timeline([]series{{name: "sim", t: []float64{-2, -1}, v: []float64{1, 3}}}, p, 2*time.Minute))
	require.Equal(t, 2, strings.Count(tl, "<rect"))
	require.Contains(t, tl, `fill="#56a64b"`)
	require.Contains(t, tl, `fill="#e02f44"`)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func nan() float64 { return math.NaN() }
