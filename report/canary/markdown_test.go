package canary

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenReport is a report of three shards over an hour, one of which
// stopped 20 minutes before its end, and one restarted; two loads.
func goldenReport(t *testing.T) *Report {
	t.Helper()
	stopped := healthy("10.0.0.3:9477", 2, 3)
	stopped.last, stopped.samples, stopped.up, stopped.notReportingEnd, stopped.sent = 2400, 160, 160, true, 800
	restarted := healthy("10.0.0.2:9477", 1, 3)
	restarted.restarts = 1
	res := results(healthy("10.0.0.1:9477", 0, 3), restarted, stopped)
	addLoad(res, "vllm", "chat", chatLoad())
	rag := chatLoad()
	rag[qGood] = one(3560)
	rag[qMissed] = []labeled{{0, []string{"slo", "ttft"}}, {4, []string{"slo", "e2e"}}}
	addLoad(res, "vllm", "rag|<b>", rag) // a label value that is markup
	o := hourOptions()
	r, err := Assemble(o, &Results{Vectors: res, Warnings: []string{"ttft_p99: some warning"}})
	require.NoError(t, err)
	return r
}

func TestGolden(t *testing.T) {
	r := goldenReport(t)
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, Write(&b, r, format))
			path := filepath.Join("testdata", "canary."+format)
			if *update {
				require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(want), b.String(), "run go test ./report/canary/ -update after a deliberate change")
		})
	}
}

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteMarkdown(&b, goldenReport(t)))
	md := b.String()
	for _, want := range []string{
		"# Canary SLO report\n",
		"From Prometheus `http://u:xxxxx@127.0.0.1:9090`, selector `{job=\"sloprober\"}`",
		"**Incomplete**: 3 of 3 shards reported in the window, 2 at its end, from 3 processes.",
		"| 10.0.0.3:9477 | sloprober | 2/3 | start to 2026-05-01T12:40:00Z | 80 of 240 | 0 | 800 |",
		"- Shard 2 of 3 (10.0.0.3:9477) reported nothing after 2026-05-01T12:40:00Z",
		"- 10.0.0.2:9477 (shard 1) restarted 1 time in the window",
		"- Prometheus warned: ttft_p99: some warning",
		"## vllm / chat\n",
		"**Attainment 98.20%** (3,500 good of 3,564 counted) against an objective of 99.00%: **missed**. Error budget: 64 bad requests of 35.6 allowed, **179.57% consumed**.",
		"| ended, counted (not cancelled or shutdown) | 3,564 | 0.990 |",
		"Outcomes: ok 3,500, http_5xx 50, cancelled 30, timeout 14, shutdown 6. Drops: max_in_flight 10. Missed SLOs: ttft 64.",
		"| TTFT | ttft ≤ 500 ms | 3,550 | 170 ms (100-250 ms) | 450 ms (250-500 ms) | above the highest finite bucket |",
		"| TPOT | - | 0 | no samples | no samples | no samples |",
		"| ITL | max_itl ≤ 200 ms | 1,000 | 10.0 ms | 20.0 ms | 30.0 ms |",
		"## vllm / rag\\|&lt;b>\n",
		"Missed SLOs: e2e 4.",
		"**met**",
	} {
		require.Contains(t, md, want)
	}
	require.NotContains(t, md, "<b>")
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Write(&b, goldenReport(t), "json"))
	var back Report
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	require.Equal(t, SchemaVersion, back.SchemaVersion)
	require.Equal(t, "canary", back.Kind)
	require.Len(t, back.Loads, 2)
	require.Len(t, back.Completeness.Instances, 3)
	require.NotEmpty(t, back.Queries)

	require.EqualError(t, Write(&b, goldenReport(t), "html"), "a canary report is written as md or json, not html")
}

func TestFormat(t *testing.T) {
	for v, want := range map[float64]string{0: "0.00 ms", 0.0053: "5.30 ms", 0.25: "250 ms", 0.0125: "12.5 ms", 1: "1.00 s", 12.5: "12.5 s", 1500: "1500 s"} {
		require.Equal(t, want, formatSeconds(v), v)
	}
	for v, want := range map[float64]string{0: "0", 0.4: "0", 999.5: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		require.Equal(t, want, formatCount(v), v)
	}
	for b, want := range map[[2]float64]string{{0, 0.01}: "0-10 ms", {0.0025, 0.005}: "2.5-5 ms", {0.75, 1}: "0.75-1 s", {1, 1.5}: "1-1.5 s", {0.5, 0.75}: "500-750 ms"} {
		require.Equal(t, want, formatBucket(b[0], b[1]), b)
	}
}
