package gpu

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func decodeFixture(t *testing.T, name string) Reading {
	t.Helper()
	r, err := decode(fixture(t, name), textFormat, DefaultNames)
	require.NoError(t, err)
	return r
}

func TestDecodeRecordedH100(t *testing.T) {
	r := decodeFixture(t, "h100x8.prom")
	require.Len(t, r.Devices, 8)
	assert.Zero(t, r.Rejected)
	d0 := r.Devices[0]
	assert.Equal(t, Identity{GPU: "0", UUID: "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005", ModelName: "NVIDIA H100 80GB HBM3", Hostname: "gpu-node-1"}, d0.Identity)
	assert.False(t, d0.MIG)
	assert.Equal(t, f(0), d0.Utilization)
	assert.Equal(t, f(113.611), d0.PowerWatts)
	// The recording sampled no FB_* lines and GPU_UTIL only: absent, not 0.
	assert.Nil(t, d0.MemoryUsedBytes)
	assert.Nil(t, d0.MemoryFreeBytes)
	assert.Nil(t, d0.EngineActive)
	for i, d := range r.Devices {
		assert.Equal(t, fmt.Sprint(i), d.GPU, "sorted by index")
	}
}

func TestDecodeRecordedGB200(t *testing.T) {
	r := decodeFixture(t, "gb200x4.prom")
	require.Len(t, r.Devices, 4)
	d := r.Devices[3]
	assert.Equal(t, "GPU-63c10f33-73a6-e0b7-06c8-1454c80ab6fd", d.UUID)
	assert.Equal(t, "ip-100-64-135-20.ec2.internal", d.Hostname)
	assert.Equal(t, f(0), d.MemoryUsedBytes)
	assert.Equal(t, f(188729*mib), d.MemoryFreeBytes)
	assert.Equal(t, f(174.197), d.PowerWatts)
	w := Summarize([]Reading{r}, nil)
	assert.Equal(t, f(0), w.MemoryUsedShareMax)
	assert.Equal(t, f(188729*mib), w.MemoryTotalBytes)
	assert.InDelta(t, (165.926+168.570+156.479+174.197)/4, *w.PowerMeanWatts, 1e-9)
}

func TestDecodeRecordedMIG(t *testing.T) {
	r := decodeFixture(t, "a100_mig.prom")
	require.Len(t, r.Devices, 2)
	gpu, inst := r.Devices[0], r.Devices[1]
	assert.False(t, gpu.MIG)
	assert.Equal(t, f(4845*mib), gpu.MemoryUsedBytes)
	assert.Equal(t, f(35690*mib), gpu.MemoryFreeBytes)
	assert.Equal(t, f(409.692), gpu.PowerWatts)
	assert.Nil(t, gpu.Utilization, "dcp-metrics-included.csv has no GPU_UTIL")
	assert.Equal(t, f(0.995630), gpu.Busy(), "the engine ratio stands in")
	assert.True(t, inst.MIG)
	assert.Equal(t, "13", inst.GPUInstanceID)
	assert.Equal(t, "1g.5gb", inst.GPUInstanceProfile)
	assert.Nil(t, inst.Utilization)
	assert.Nil(t, inst.MemoryUsedBytes)
	assert.Equal(t, f(0.995687), inst.Busy())

	r = decodeFixture(t, "mig_issues.prom")
	require.Len(t, r.Devices, 5)
	var hosts []string
	for _, d := range r.Devices {
		hosts = append(hosts, d.Hostname)
	}
	assert.Equal(t, []string{"dcgm-exporter-wwwjh", "dcgm-exporter-wwwjh", "gsrh100-074", "gsrh100-074", "gsrh100-074"}, hosts,
		"the lowercase hostname label of newer exporters is read too")
	a30 := r.Devices[1]
	assert.True(t, a30.MIG)
	assert.Equal(t, f(2207*mib), a30.MemoryFreeBytes)
	assert.Nil(t, a30.MemoryUsedBytes)
	w := Summarize([]Reading{r}, nil)
	assert.True(t, w.MIG)
	assert.Nil(t, w.MemoryUsedShareMax, "no device had both used and free")
	assert.Equal(t, f(0), w.UtilizationMean)
}

// line is a recorded GB200 sample line with its value replaced.
func gb200Line(t *testing.T, name string, gpu int, value string) string {
	t.Helper()
	for _, l := range strings.Split(string(fixture(t, "gb200x4.prom")), "\n") {
		if strings.HasPrefix(l, name+`{gpu="`+fmt.Sprint(gpu)+`"`) {
			return l[:strings.LastIndexByte(l, ' ')+1] + value
		}
	}
	t.Fatalf("no %s of gpu %d", name, gpu)
	return ""
}

func TestDecodeHostileValues(t *testing.T) {
	for _, tc := range []struct {
		name, metric, value string
		check               func(*testing.T, Device)
	}{
		{"NaN utilisation", "DCGM_FI_DEV_GPU_UTIL", "NaN", func(t *testing.T, d Device) { assert.Nil(t, d.Utilization) }},
		{"150% utilisation", "DCGM_FI_DEV_GPU_UTIL", "150", func(t *testing.T, d Device) { assert.Nil(t, d.Utilization) }},
		{"negative memory", "DCGM_FI_DEV_FB_USED", "-1", func(t *testing.T, d Device) { assert.Nil(t, d.MemoryUsedBytes) }},
		{"+Inf power", "DCGM_FI_DEV_POWER_USAGE", "+Inf", func(t *testing.T, d Device) { assert.Nil(t, d.PowerWatts) }},
		{"2 TiB free", "DCGM_FI_DEV_FB_FREE", "2097152", func(t *testing.T, d Device) { assert.Nil(t, d.MemoryFreeBytes) }},
		{"engine 1.5", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "1.5", func(t *testing.T, d Device) { assert.Nil(t, d.EngineActive) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The recorded body with the value of GPU 2 replaced: GPU 2's
			// value is absent, the others' are kept.
			var b strings.Builder
			for _, l := range strings.Split(strings.TrimSpace(string(fixture(t, "gb200x4.prom"))), "\n") {
				if strings.HasPrefix(l, tc.metric+`{gpu="2"`) {
					l = l[:strings.LastIndexByte(l, ' ')+1] + tc.value
				}
				b.WriteString(l + "\n")
			}
			if tc.metric == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" { // not in the recording: add one
				b.WriteString(strings.Replace(gb200Line(t, "DCGM_FI_DEV_GPU_UTIL", 2, tc.value), "DCGM_FI_DEV_GPU_UTIL", tc.metric, 1) + "\n")
			}
			r, err := decode([]byte(b.String()), textFormat, DefaultNames)
			require.NoError(t, err)
			assert.Equal(t, 1, r.Rejected)
			require.Len(t, r.Devices, 4)
			tc.check(t, r.Devices[2])
			assert.NotNil(t, r.Devices[1].Utilization)
			assert.NotNil(t, r.Devices[1].MemoryUsedBytes)
		})
	}
	t.Run("slack", func(t *testing.T) {
		body := gb200Line(t, "DCGM_FI_DEV_GPU_UTIL", 0, "100.5") + "\n"
		r, err := decode([]byte(body), "", DefaultNames)
		require.NoError(t, err)
		assert.Equal(t, f(1), r.Devices[0].Utilization, "100.5% is rounding: read as 100%")
	})
}

func TestDecodeDuplicates(t *testing.T) {
	line := gb200Line(t, "DCGM_FI_DEV_FB_USED", 1, "1000")
	// Another series of the same device (a pod label added) with another value.
	other := strings.Replace(gb200Line(t, "DCGM_FI_DEV_FB_USED", 1, "2000"), `DCGM_FI_DRIVER_VERSION="580.126.20"`, `DCGM_FI_DRIVER_VERSION="580.126.20",pod="x"`, 1)
	_, err := decode([]byte(line+"\n"+other+"\n"), textFormat, DefaultNames)
	require.ErrorIs(t, err, errDuplicate)
	assert.Contains(t, err.Error(), "DCGM_FI_DEV_FB_USED for gpu 1")

	// The same value for two pods sharing the GPU: one reading.
	same := strings.Replace(line, `DCGM_FI_DRIVER_VERSION="580.126.20"`, `DCGM_FI_DRIVER_VERSION="580.126.20",pod="x"`, 1)
	r, err := decode([]byte(line+"\n"+same+"\n"), textFormat, DefaultNames)
	require.NoError(t, err)
	require.Len(t, r.Devices, 1)
	assert.Equal(t, f(1000*mib), r.Devices[0].MemoryUsedBytes)
}

func TestDecodeUnattributed(t *testing.T) {
	// dcgm-exporter's own test fixture style: a series without gpu/UUID.
	r, err := decode([]byte("DCGM_FI_DEV_GPU_UTIL 50\n"+gb200Line(t, "DCGM_FI_DEV_GPU_UTIL", 0, "40")+"\n"), "", DefaultNames)
	require.NoError(t, err)
	assert.Equal(t, 1, r.Rejected)
	require.Len(t, r.Devices, 1)
	assert.Equal(t, f(0.4), r.Devices[0].Utilization)
}

func TestDecodeRefused(t *testing.T) {
	rec := fixture(t, "gb200x4.prom")
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		want              string
	}{
		{"HTML", "text/html; charset=utf-8", []byte("<html><body>Sign in</body></html>"), `Content-Type "text/html"`},
		{"JSON", "application/json", []byte(`{"status":"error"}`), "not a Prometheus exposition format"},
		{"HTML as text/plain", "text/plain", []byte("<html><body>Sign in</body></html>\n"), "not a Prometheus text exposition"},
		{"too many samples", textFormat, bytes.Repeat([]byte("a 1\n"), MaxSamples+1), "more than 30000 samples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode(tc.body, tc.contentType, DefaultNames)
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("OpenMetrics", func(t *testing.T) {
		om := "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + string(rec) + "# EOF\n"
		r, err := decode([]byte(om), "application/openmetrics-text; version=1.0.0; charset=utf-8", DefaultNames)
		require.NoError(t, err)
		assert.Len(t, r.Devices, 4)
	})
}

func TestExporterSequence(t *testing.T) {
	full := fixture(t, "h100x8.prom")
	// GPU 3 drops out of the second scrape (as in dcgm-exporter issue
	// #250, "does not report metrics for all GPUs"), and is back in the
	// third.
	var without bytes.Buffer
	for _, l := range bytes.SplitAfter(full, []byte("\n")) {
		if !bytes.Contains(l, []byte(`{gpu="3",`)) {
			without.Write(l)
		}
	}
	srv, agents := serveBodies(t, body{textFormat, full}, body{textFormat, without.Bytes()}, body{"", full})
	r := newExporter(t, srv.URL+"/metrics")
	var readings []Reading
	for range 3 {
		rd, err := r.Read(context.Background())
		require.NoError(t, err)
		readings = append(readings, rd)
	}
	assert.Equal(t, []int{8, 7, 8}, []int{len(readings[0].Devices), len(readings[1].Devices), len(readings[2].Devices)})
	assert.Equal(t, "sloprober/dev", <-agents)
	w := Summarize(readings, nil)
	assert.Equal(t, 3, w.Samples)
	assert.Equal(t, 8, w.Devices)
	assert.Equal(t, 1, w.MissingDevices)
	assert.Equal(t, f(0), w.UtilizationMax)
}

func TestExporterFailures(t *testing.T) {
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", textFormat)
		line := []byte(strings.Repeat("#", 1023) + "\n")
		for range MaxBodyBytes/len(line) + 2 {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}))
	defer huge.Close()
	_, err := newExporter(t, huge.URL).Read(context.Background())
	require.ErrorContains(t, err, "body of more than 4194304 bytes")

	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer status.Close()
	_, err = newExporter(t, status.URL).Read(context.Background())
	require.ErrorContains(t, err, "HTTP status 503")

	// A redirect to another host (port) is not followed: the credentials
	// would go along.
	target, _ := serveBodies(t, body{textFormat, fixture(t, "gb200x4.prom")})
	redirect := httptest.NewServer(http.RedirectHandler(target.URL+"/metrics", http.StatusFound))
	defer redirect.Close()
	_, err = newExporter(t, redirect.URL).Read(context.Background())
	require.ErrorContains(t, err, "HTTP status 302")

	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	c := exporterConfig(t, hung.URL)
	c.Timeout = 1 // 1 ns: bounded by the timeout, not by the server
	rd, err := NewReader("t", c)
	require.NoError(t, err)
	_, err = rd.Read(context.Background())
	require.ErrorContains(t, err, "no complete answer within 1ns")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = newExporter(t, hung.URL).Read(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestExporterErrorRedacted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer srv.Close()
	r := newExporter(t, srv.URL)
	r.url = strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1)
	_, err := r.Read(context.Background())
	require.Error(t, err)
	w := Summarize(nil, []error{err})
	require.Equal(t, 1, w.Errors)
	assert.NotContains(t, w.LastError, "s3cret")
	assert.Contains(t, w.LastError, "HTTP status 403")
}
