package exporter

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestParseDesc: the name, help and unit of a family are read from its
// Desc's String, quotes and newlines included; anything else is not read
// (and the scrape falls back to Registry.Gather).
func TestParseDesc(t *testing.T) {
	d := prometheus.V2.NewDesc("sloprober_x_seconds", "Help with \"quotes\", a\nnewline, a \\ and unit: \"no\".",
		prometheus.UnconstrainedLabels{"a"}, prometheus.Labels{"k": `v"}`}, prometheus.WithUnit("seconds"))
	require.Equal(t, descNames{name: "sloprober_x_seconds", help: "Help with \"quotes\", a\nnewline, a \\ and unit: \"no\".", unit: "seconds", ok: true},
		parseDesc(d.String()))
	for _, s := range []string{
		"",
		`Desc{fqName: "x"}`,
		`Desc{fqName: "x", help: "h", constLabels: {}, variableLabels: {}}`, // no unit
		`Desc{name: "x", help: "h", unit: "", constLabels: {}, variableLabels: {}}`,
		`Desc{fqName: "x, help: "h", unit: "", constLabels: {}, variableLabels: {}}`,
		`Desc{fqName: "", help: "h", unit: "", constLabels: {}, variableLabels: {}}`,
		`Desc{fqName: "x", help: "h", unit: "", type: "gauge", constLabels: {}}`,
	} {
		require.False(t, parseDesc(s).ok, s)
	}
}

// TestGatherFallback: a Desc whose String cannot be read makes the
// gatherer use Registry.Gather, with the same result.
func TestGatherFallback(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"l"})
	c.WithLabelValues("b").Inc()
	c.WithLabelValues("a").Add(2)
	reg.MustRegister(c)
	want, err := reg.Gather()
	require.NoError(t, err)

	g := &serialGatherer{reg: reg}
	got, err := g.Gather()
	require.NoError(t, err)
	require.Equal(t, want[0].String(), got[0].String())
	require.False(t, g.fallback)

	g.descs = map[*prometheus.Desc]descNames{c.WithLabelValues("a").Desc(): {}} // as if unreadable
	got, err = g.Gather()
	require.NoError(t, err)
	require.True(t, g.fallback)
	require.Len(t, got, 1)
	require.Equal(t, want[0].String(), got[0].String())
}
