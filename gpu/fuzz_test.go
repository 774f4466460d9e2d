package gpu

import (
	"math"
	"testing"
)

// FuzzDecode: whatever an exporter answers (the text exposition, or
// protobuf), decoding it ends within the sample bound and every reading
// it keeps is finite, not negative and within its bound.
func FuzzDecode(f *testing.F) {
	f.Add(fixture(f, "h100x8.prom"), textFormat)
	f.Add(fixture(f, "mig_issues.prom"), textFormat)
	f.Add([]byte("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"x\"} NaN\nDCGM_FI_DEV_FB_USED{gpu=\"0\"} 1e309\n"), "")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		r, err := decode(body, contentType, DefaultNames)
		if err != nil {
			return
		}
		for _, d := range r.Devices {
			for _, v := range []*float64{d.Utilization, d.EngineActive, d.MemoryUsedBytes, d.MemoryFreeBytes, d.PowerWatts} {
				if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0) {
					t.Fatalf("device %+v: a value not finite, or negative: %v", d.Identity, *v)
				}
			}
			if u := d.Utilization; u != nil && *u > 1+RatioSlack {
				t.Fatalf("utilization %v", *u)
			}
		}
	})
}
