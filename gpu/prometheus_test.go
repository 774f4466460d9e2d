package gpu

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/testkit/freeport"
)

func prometheusConfig(t testing.TB, url, selector string) *Config {
	t.Helper()
	c := &Config{Prometheus: &PrometheusSource{URL: url, Selector: selector}}
	c.Prometheus.HTTPClientConfig.FollowRedirects = true
	c.SetDefaults()
	require.NoError(t, c.Validate())
	return c
}

func newPrometheus(t testing.TB, url, selector string) *prometheusReader {
	t.Helper()
	r, err := NewReader("t", prometheusConfig(t, url, selector))
	require.NoError(t, err)
	pr := r.(*prometheusReader)
	t.Cleanup(pr.Close)
	return pr
}

// TestPrometheusReal runs a real Prometheus (Debian's, as the rules
// end-to-end tests do) scraping two fake dcgm-exporters serving the
// recorded H100 and GB200 expositions, and reads them back through its
// query API: the labels Prometheus adds (instance, job) and keeps
// (Hostname, pod, ...) are those of production. Prometheus starts in
// 2-6 s; the test skips without the binary or with -short.
func TestPrometheusReal(t *testing.T) {
	prom := os.Getenv("PROMETHEUS")
	if prom == "" {
		prom, _ = exec.LookPath("prometheus")
	}
	if testing.Short() || prom == "" {
		t.Skip("no prometheus binary (set $PROMETHEUS), or -short")
	}
	h100, _ := serveBodies(t, body{textFormat, fixture(t, "h100x8.prom")})
	gb200, _ := serveBodies(t, body{textFormat, fixture(t, "gb200x4.prom")})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
global: {scrape_interval: 1s}
scrape_configs:
  - job_name: dcgm
    static_configs: [{targets: [%q, %q]}]
`, strings.TrimPrefix(h100.URL, "http://"), strings.TrimPrefix(gb200.URL, "http://"))), 0o600))
	addr := freeport.Addr(t)
	startProcess(t, prom, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")

	all := newPrometheus(t, "http://"+addr, "")
	var rd Reading
	require.Eventually(t, func() bool {
		var err error
		rd, err = all.Read(context.Background())
		return err == nil && len(rd.Devices) == 12
	}, 15*time.Second, 50*time.Millisecond, "Prometheus never served the 12 GPUs")
	assert.Zero(t, rd.Rejected)

	node1 := newPrometheus(t, "http://"+addr, `{Hostname="gpu-node-1"}`)
	rd, err := node1.Read(context.Background())
	require.NoError(t, err)
	require.Len(t, rd.Devices, 8)
	assert.Equal(t, Identity{GPU: "0", UUID: "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005", ModelName: "NVIDIA H100 80GB HBM3", Hostname: "gpu-node-1"}, rd.Devices[0].Identity,
		"instance and job are not part of the identity")
	assert.Equal(t, f(113.611), rd.Devices[0].PowerWatts)
	assert.Nil(t, rd.Devices[0].MemoryUsedBytes)

	gb := newPrometheus(t, "http://"+addr, `{modelName=~"NVIDIA GB2.*", gpu!="0"}`)
	rd, err = gb.Read(context.Background())
	require.NoError(t, err)
	require.Len(t, rd.Devices, 3)
	assert.Equal(t, f(188729*mib), rd.Devices[0].MemoryFreeBytes)
	w := Summarize([]Reading{rd}, nil)
	assert.Equal(t, f(0), w.MemoryUsedShareMax)

	none := newPrometheus(t, "http://"+addr, `{Hostname=~"x"}`)
	rd, err = none.Read(context.Background())
	require.NoError(t, err)
	assert.Empty(t, rd.Devices, "no series: nothing served, not an error")
}

// startProcess runs a process for the rest of the test, and shows its
// output if the test fails.
func startProcess(t *testing.T, bin string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	var mu sync.Mutex
	var log strings.Builder
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		pw.Close()
		<-done
		if t.Failed() {
			t.Logf("prometheus output:\n%s", log.String())
		}
	})
}

// fakePrometheus answers /api/v1/query as Prometheus documents it
// (https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries)
// with answer(query), and records the queries. It tests what a real
// Prometheus cannot be made to do: wrong result types, too many series,
// hostile values, huge answers.
func fakePrometheus(t *testing.T, answer func(query string) string) (url string, queries chan string, agents chan string) {
	t.Helper()
	queries, agents = make(chan string, 100), make(chan string, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		q := r.Form.Get("query")
		queries <- q
		agents <- r.UserAgent()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer(q))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, queries, agents
}

func vector(samples ...string) string {
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`
}

func sample(name, labels, value string) string {
	return fmt.Sprintf(`{"metric":{"__name__":%q,%s,"instance":"10.0.0.1:9400","job":"dcgm"},"value":[1773114089.184,%q]}`, name, labels, value)
}

func TestPrometheusQueries(t *testing.T) {
	url, queries, agents := fakePrometheus(t, func(q string) string {
		switch {
		case strings.HasPrefix(q, "DCGM_FI_DEV_GPU_UTIL"):
			return vector(
				sample("DCGM_FI_DEV_GPU_UTIL", `"gpu":"0","UUID":"GPU-a"`, "80"),
				sample("DCGM_FI_DEV_GPU_UTIL", `"gpu":"1","UUID":"GPU-b"`, "150"),
				sample("DCGM_FI_DEV_GPU_UTIL", `"gpu":"2","UUID":"GPU-c"`, "NaN"))
		case strings.HasPrefix(q, "DCGM_FI_DEV_FB_USED"):
			return vector(sample("DCGM_FI_DEV_FB_USED", `"gpu":"0","UUID":"GPU-a"`, "72000"))
		case strings.HasPrefix(q, "DCGM_FI_DEV_FB_FREE"):
			return vector(sample("DCGM_FI_DEV_FB_FREE", `"gpu":"0","UUID":"GPU-a"`, "9000"))
		}
		return vector()
	})
	r := newPrometheus(t, url, `{pod=~"vllm-.*"}`)
	rd, err := r.Read(context.Background())
	require.NoError(t, err)
	close(queries)
	var qs []string
	for q := range queries {
		qs = append(qs, q)
	}
	assert.Equal(t, []string{
		`DCGM_FI_DEV_GPU_UTIL{pod=~"vllm-.*"}`, `DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod=~"vllm-.*"}`,
		`DCGM_FI_DEV_FB_USED{pod=~"vllm-.*"}`, `DCGM_FI_DEV_FB_FREE{pod=~"vllm-.*"}`, `DCGM_FI_DEV_POWER_USAGE{pod=~"vllm-.*"}`,
	}, qs)
	assert.Equal(t, "sloprober/dev", <-agents)
	require.Len(t, rd.Devices, 3)
	assert.Equal(t, 2, rd.Rejected, "150% and NaN")
	assert.Equal(t, "10.0.0.1:9400", rd.Devices[0].Hostname, "no Hostname label: the instance stands in")
	assert.Equal(t, f(0.8), rd.Devices[0].Utilization)
	assert.Nil(t, rd.Devices[1].Utilization)
	w := Summarize([]Reading{rd}, nil)
	assert.InDelta(t, 0.889, *w.MemoryUsedShareMax, 1e-3)
}

func TestPrometheusFailures(t *testing.T) {
	many := make([]string, MaxSeries+1)
	for i := range many {
		many[i] = sample("DCGM_FI_DEV_GPU_UTIL", fmt.Sprintf(`"gpu":"%d","UUID":"GPU-%d"`, i, i), "1")
	}
	for _, tc := range []struct {
		name, answer, want string
	}{
		{"scalar", `{"status":"success","data":{"resultType":"scalar","result":[1773114089.184,"1"]}}`, "a scalar, not an instant vector"},
		{"too many series", vector(many...), "more than 1024 series; narrow the selector"},
		{"duplicate", vector(
			sample("DCGM_FI_DEV_GPU_UTIL", `"gpu":"0","UUID":"GPU-a","Hostname":"n"`, "10"),
			sample("DCGM_FI_DEV_GPU_UTIL", `"gpu":"0","UUID":"GPU-a","Hostname":"n","pod":"p"`, "20")), "duplicate series"},
		{"bad query", `{"status":"error","errorType":"bad_data","error":"parse error: unexpected character"}`, "parse error: unexpected character"},
		{"huge", vector(strings.Repeat(sample("x", `"gpu":"0","big":"`+strings.Repeat("a", 1<<16)+`"`, "1")+",", MaxQueryBytes>>16) + sample("x", `"gpu":"0"`, "1")), "answer of more than 8388608 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _, _ := fakePrometheus(t, func(string) string { return tc.answer })
			r := newPrometheus(t, url, "")
			r.timeout = 30 * time.Second // bounded by the body, not the clock (8 MiB under -race on a busy machine)
			_, err := r.Read(context.Background())
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("HTML", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>login</html>")
		}))
		defer srv.Close()
		_, err := newPrometheus(t, srv.URL, "").Read(context.Background())
		require.Error(t, err)
	})
}
