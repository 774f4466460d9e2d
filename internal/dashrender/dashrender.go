// Package dashrender draws a Grafana dashboard's panels from a real
// Prometheus's data with sloprober's own charts (report/chart), for the
// documentation's pictures of the dashboards: Grafana cannot run where
// they are made. The queries, the legends, the units and the layout are
// the dashboard's; the look is sloprober's, and every page says so.
//
// Timeseries panels are line charts; heatmaps and state timelines are
// grids of cells; stat panels are their values (value mappings applied);
// tables are their instant queries' labels and values. Template variables
// are replaced as Grafana does with "All" selected.
package dashrender

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Dashboard is the part of a Grafana dashboard's JSON model that is drawn.
type Dashboard struct {
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is a dashboard panel: a row heading, or a visualisation of its
// targets' queries.
type Panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	} `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
		Instant      bool   `json:"instant"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit       string    `json:"unit"`
			Mappings   []Mapping `json:"mappings"`
			Thresholds struct {
				Steps []struct {
					Color string   `json:"color"`
					Value *float64 `json:"value"` // null: from minus infinity
				} `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// Mapping is a value mapping: "1" is "pass" in green; a special one
// matches null and NaN.
type Mapping struct {
	Type    string `json:"type"`
	Options json.RawMessage
}

// Load reads a dashboard's JSON model.
func Load(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", path, err)
	}
	return &d, nil
}

// Options are the time range drawn and the Prometheus it is read from.
type Options struct {
	API v1.API
	// End and Range: the range drawn, [End - Range, End]; Step the
	// resolution of range queries, and RateInterval what
	// $__rate_interval stands for (four scrape intervals in Grafana).
	End          time.Time
	Range, Step  time.Duration
	RateInterval time.Duration
}

// PanelData is what a panel drew: its series (or values, or rows).
type PanelData struct {
	Title  string
	Type   string
	Series int
}

var vars = regexp.MustCompile(`\$(\{[a-z_]+\}|[a-z_]+)`)

// Query is a target's expression with the template variables replaced:
// a dashboard variable by ".+" (All), $__rate_interval by the options'.
func (o Options) Query(expr string) (string, error) {
	var bad []string
	q := vars.ReplaceAllStringFunc(expr, func(v string) string {
		switch name := strings.Trim(v, "${}"); name {
		case "__rate_interval", "__interval":
			return model.Duration(o.RateInterval).String()
		case "target", "scenario", "test", "instance", "phase":
			return ".+"
		default:
			bad = append(bad, v)
			return v
		}
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("unknown template variables %v in %q", bad, expr)
	}
	return q, nil
}

// series is one drawn series: its legend and samples.
type series struct {
	name   string
	labels model.Metric
	t, v   []float64 // minutes relative to End (at most 0); values
}

// query runs a panel's targets: over the range, or as instant queries
// at End (sorted by legend, as stats and tables show them).
func (o Options) query(ctx context.Context, p *Panel, instant bool) ([]series, error) {
	var out []series
	for _, tg := range p.Targets {
		q, err := o.Query(tg.Expr)
		if err != nil {
			return nil, err
		}
		var v model.Value
		if instant {
			v, _, _, err = o.API.Query(ctx, q, o.End)
		} else {
			v, _, _, err = o.API.QueryRange(ctx, q, v1.Range{Start: o.End.Add(-o.Range), End: o.End, Step: o.Step})
		}
		if err != nil {
			return nil, fmt.Errorf("panel %q: %s: %w", p.Title, q, err)
		}
		switch v := v.(type) {
		case model.Vector:
			for _, s := range v {
				out = append(out, series{name: legend(tg.LegendFormat, s.Metric), labels: s.Metric, v: []float64{float64(s.Value)}})
			}
		case model.Matrix:
			for _, s := range v {
				sr := series{name: legend(tg.LegendFormat, s.Metric), labels: s.Metric}
				for _, pt := range s.Values {
					// At most 0: Prometheus's timestamps are
					// milliseconds, and a last one a fraction over
					// the end would widen the axis by a tick step.
					sr.t = append(sr.t, min(pt.Timestamp.Time().Sub(o.End).Minutes(), 0))
					sr.v = append(sr.v, float64(pt.Value))
				}
				out = append(out, sr)
			}
		}
	}
	if instant {
		slices.SortStableFunc(out, func(a, b series) int { return cmp.Compare(a.name, b.name) })
	}
	return out, nil
}

var legendVar = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// legend is Grafana's legend format with a series' labels.
func legend(format string, m model.Metric) string {
	if format == "" {
		return m.String()
	}
	return strings.TrimSpace(legendVar.ReplaceAllStringFunc(format, func(v string) string {
		return string(m[model.LabelName(legendVar.FindStringSubmatch(v)[1])])
	}))
}

// Render draws the dashboard as one self-contained HTML page.
func Render(ctx context.Context, d *Dashboard, o Options) (string, []PanelData, error) {
	var cells []cell
	var drawn []PanelData
	for i := range d.Panels {
		p := &d.Panels[i]
		// A title naming a variable (a panel repeated per target) is
		// drawn once, for every value.
		title := vars.ReplaceAllString(p.Title, "all")
		c := cell{X: p.GridPos.X + 1, Y: p.GridPos.Y + 1, W: p.GridPos.W, H: p.GridPos.H, Title: title, Row: p.Type == "row"}
		if !c.Row {
			body, n, err := o.panel(ctx, p, i)
			if err != nil {
				return "", nil, err
			}
			c.Body = body
			drawn = append(drawn, PanelData{Title: p.Title, Type: p.Type, Series: n})
		}
		cells = append(cells, c)
	}
	var b strings.Builder
	err := page.Execute(&b, map[string]any{
		"Title": d.Title, "Cells": cells,
		"From": o.End.Add(-o.Range).UTC().Format("2006-01-02 15:04"), "To": o.End.UTC().Format("15:04 MST"),
	})
	return b.String(), drawn, err
}

type cell struct {
	X, Y, W, H int
	Title      string
	Row        bool
	Body       template.HTML
}

// panel draws one panel and says how many series (values, rows) it drew.
func (o Options) panel(ctx context.Context, p *Panel, i int) (template.HTML, int, error) {
	unit := p.FieldConfig.Defaults.Unit
	switch p.Type {
	case "stat", "table":
		ss, err := o.query(ctx, p, true)
		if err != nil {
			return "", 0, err
		}
		if p.Type == "table" {
			return table(ss), len(ss), nil
		}
		return stat(ss, p, o.End), len(ss), nil
	}
	ss, err := o.query(ctx, p, false)
	if err != nil {
		return "", 0, err
	}
	var body template.HTML
	switch p.Type {
	case "heatmap":
		body = heatmap(ss, o.Range)
	case "state-timeline":
		body = timeline(ss, p, o.Range)
	default:
		body, err = lines(ss, unit, fmt.Sprintf("panel%d", i), p.GridPos.W, p.GridPos.H)
	}
	return body, len(ss), err
}

// scale is a unit's factor and label: percentunit is drawn in percent.
func scale(unit string) (float64, string) {
	switch unit {
	case "percentunit":
		return 100, "%"
	case "reqps":
		return 1, "req/s"
	case "s":
		return 1, "s"
	case "bytes":
		return 1.0 / (1 << 20), "MiB"
	case "currencyUSD":
		return 1, "USD"
	case "", "none", "short":
		return 1, ""
	}
	return 1, strings.TrimPrefix(unit, "suffix:")
}

// format is a stat's value in its unit.
func format(v float64, unit string, now time.Time) string {
	switch unit {
	case "dateTimeFromNow":
		d := time.UnixMilli(int64(v)).Sub(now).Round(time.Minute)
		if d < 0 {
			return fmtDur(-d) + " ago"
		}
		return "in " + fmtDur(d)
	case "bool_yes_no":
		if v != 0 {
			return "yes"
		}
		return "no"
	case "s":
		return fmtDur(time.Duration(v * float64(time.Second)).Round(time.Second))
	}
	f, label := scale(unit)
	s := number(v * f)
	if label != "" {
		s += " " + label
	}
	return s
}

// number is v with three significant digits, never in exponent form,
// without trailing zeros: -1280, 95.3, 4, 0.0123.
func number(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	decimals := max(0, 2-int(math.Floor(math.Log10(math.Abs(v)))))
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// fmtDur is d without zero units at its end: 3m, 1h30m, 4m6s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// colourOf is a value's colour in a panel: its mapping's, else its
// threshold step's ("" for none).
func (p *Panel) colourOf(v float64) string {
	if _, c, ok := mapped(v, p.FieldConfig.Defaults.Mappings); ok && c != "" {
		return c
	}
	c := ""
	for _, st := range p.FieldConfig.Defaults.Thresholds.Steps {
		if st.Value == nil || v >= *st.Value {
			c = st.Color
		}
	}
	if c == "" && p.FieldConfig.Defaults.Unit == "bool_yes_no" && !math.IsNaN(v) {
		c = "red"
		if v != 0 {
			c = "green"
		}
	}
	return c
}

// mapped is a value's mapping, if one applies: its text and colour.
func mapped(v float64, ms []Mapping) (text, colour string, ok bool) {
	for _, m := range ms {
		switch m.Type {
		case "value":
			var opts map[string]struct{ Text, Color string }
			if json.Unmarshal(m.Options, &opts) != nil {
				continue
			}
			if r, found := opts[strconv.FormatFloat(v, 'f', -1, 64)]; found {
				return r.Text, r.Color, true
			}
		case "special":
			var opt struct {
				Match  string
				Result struct{ Text, Color string }
			}
			if json.Unmarshal(m.Options, &opt) == nil && strings.Contains(opt.Match, "nan") && math.IsNaN(v) {
				return opt.Result.Text, opt.Result.Color, true
			}
		}
	}
	return "", "", false
}

var page = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:12px;background:#f4f5f5;color:#24292e}
h1{font-size:18px;margin:0 0 2px}
p.note{margin:0 0 10px;font-size:12px;color:#555}
.grid{display:grid;grid-template-columns:repeat(24,1fr);grid-auto-rows:30px;gap:6px}
.panel{background:#fff;border:1px solid #d8d9da;border-radius:3px;padding:4px 6px;overflow:hidden;display:flex;flex-direction:column}
.panel h2{font-size:12px;margin:0 0 2px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.panel .body{flex:1;min-height:0;display:flex;align-items:center;justify-content:center}
.panel .body svg{max-width:100%;max-height:100%}
.row{font-size:14px;font-weight:600;align-self:end;border-bottom:1px solid #c7d0d9}
.stat{display:flex;flex-wrap:wrap;gap:6px;justify-content:center;align-items:center}
.stat div{text-align:center;padding:4px 8px;border-radius:3px}
.stat b{display:block;font-size:20px}
.stat span{font-size:11px;color:#555}
table{font-size:11px;border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #eee;padding:2px 4px;text-align:left}
</style></head><body>
<h1>{{.Title}}</h1>
<p class="note">Drawn by sloprober's own charts from a real Prometheus's data, {{.From}} to {{.To}}: the dashboard's queries, legends and layout, not Grafana's rendering.</p>
<div class="grid">
{{range .Cells}}{{if .Row}}<div class="row" style="grid-column:{{.X}} / span {{.W}};grid-row:{{.Y}} / span {{.H}}">{{.Title}}</div>
{{else}}<div class="panel" style="grid-column:{{.X}} / span {{.W}};grid-row:{{.Y}} / span {{.H}}"><h2>{{.Title}}</h2><div class="body">{{.Body}}</div></div>
{{end}}{{end}}</div></body></html>
`))
