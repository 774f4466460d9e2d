package gpu

import (
	"context"
	"sync"
	"time"

	"github.com/sloprober/sloprober/internal/sampling"
)

// Thresholds of the report's GPU verdicts.
const (
	// BusyUtilization is the mean utilisation from which a window's GPUs
	// were busy: 0.9. DCGM_FI_DEV_GPU_UTIL is the share of time any
	// kernel ran, so a decoding engine at 90% or more leaves the GPU
	// little idle time to take more load: a knee found there is the
	// GPU's, where a knee at low utilisation points at the engine's
	// settings (max_num_seqs, KV cache) or the network instead.
	BusyUtilization = 0.9
	// NearFullShare is the used share of a GPU's memory from which it is
	// near full: 0.95, memory within 5% of full. vLLM reserves 90% of
	// the GPU's memory by default (gpu_memory_utilization) and grows no
	// further, so 95% is another process beside it, or a setting close
	// to the limit where one more graph capture or batch can fail.
	NearFullShare = 0.95
)

// Window summarises the GPU readings of one measurement window (a step
// test level, a soak window). A pointer is nil when no successful reading
// had the value: never 0 for absent.
//
// Worked numbers: 2 GPUs read 3 times at 80% and 100% utilisation give
// UtilizationMean 0.9 (each reading's mean over devices is 0.9, and the
// mean of the three readings is 0.9) and UtilizationMax 1.0. A GPU with
// FB_USED 72000 MiB and FB_FREE 9000 MiB gives MemoryUsedMaxBytes
// 75,497,472,000 (72000 MiB), MemoryTotalBytes 84,934,656,000 (81000
// MiB), MemoryFreeMinBytes 9,437,184,000 and MemoryUsedShareMax
// 72000/81000 = 0.889: a headroom of 0.111, neither NearFull nor Busy
// below 0.9.
type Window struct {
	// Samples and Errors count the reads that succeeded and failed (a
	// read cut by the end of the window is neither).
	Samples int `json:"samples"`
	Errors  int `json:"errors"`
	// Devices is the most devices seen in one reading.
	Devices int `json:"devices"`
	// MissingDevices counts the devices (by Identity.Key) present in at
	// least one successful reading and absent from at least one other: a
	// GPU that dropped out (an Xid error, the exporter losing it) or
	// appeared late. 0 when every reading saw the same devices.
	MissingDevices int `json:"missing_devices,omitempty"`
	// MIG: a reading had a MIG instance.
	MIG bool `json:"mig,omitempty"`
	// UtilizationMean is the mean over readings of the mean over devices
	// of Device.Busy (GPU_UTIL, else GR_ENGINE_ACTIVE), 0 to 1; readings
	// where no device had one do not count. UtilizationMax is the
	// largest of any device in any reading.
	UtilizationMean *float64 `json:"utilization_mean,omitempty"`
	UtilizationMax  *float64 `json:"utilization_max,omitempty"`
	// MemoryUsedMaxBytes is the most memory any one device used in any
	// reading: per device, not summed, because a model replica's weights
	// and KV cache live on each GPU, and the fullest one runs out first.
	// MemoryTotalBytes is used+free of that device in that reading (nil
	// when its free memory was not served).
	MemoryUsedMaxBytes *float64 `json:"memory_used_max_bytes,omitempty"`
	MemoryTotalBytes   *float64 `json:"memory_total_bytes,omitempty"`
	// MemoryFreeMinBytes is the least free memory of any device in any
	// reading.
	MemoryFreeMinBytes *float64 `json:"memory_free_min_bytes,omitempty"`
	// MemoryUsedShareMax is the largest used/(used+free) of any device in
	// any reading where both were served, 0 to 1.
	MemoryUsedShareMax *float64 `json:"memory_used_share_max,omitempty"`
	// PowerMeanWatts is the mean over readings of the mean power over
	// devices; PowerMaxWatts the largest of any device: per GPU, like
	// utilisation (multiply by Devices for a host's GPU draw).
	PowerMeanWatts *float64 `json:"power_mean_watts,omitempty"`
	PowerMaxWatts  *float64 `json:"power_max_watts,omitempty"`
	// Rejected counts the values dropped over all readings (see
	// Reading.Rejected).
	Rejected int `json:"rejected,omitempty"`
	// LastError is the last failed read's error, bounded, with URL
	// passwords redacted.
	LastError string `json:"last_error,omitempty"`
}

// MemoryHeadroom is the share of the fullest device's memory left free
// at its fullest: 1 - MemoryUsedShareMax; ok is false without it.
func (w *Window) MemoryHeadroom() (share float64, ok bool) {
	if w == nil || w.MemoryUsedShareMax == nil {
		return 0, false
	}
	return 1 - *w.MemoryUsedShareMax, true
}

// NearFull reports whether a device's memory came within 5% of full
// (MemoryUsedShareMax >= NearFullShare); false without memory readings.
func (w *Window) NearFull() bool {
	return w != nil && w.MemoryUsedShareMax != nil && *w.MemoryUsedShareMax >= NearFullShare
}

// Busy reports whether the GPUs were busy over the window
// (UtilizationMean >= BusyUtilization); false without utilisation.
func (w *Window) Busy() bool {
	return w != nil && w.UtilizationMean != nil && *w.UtilizationMean >= BusyUtilization
}

// summary accumulates readings into a Window.
type summary struct {
	w                 Window
	utilSum, powerSum float64
	utilN, powerN     int
	present           map[string]int
}

func (s *summary) addError(err error) {
	s.w.Errors++
	s.w.LastError = boundError(err.Error())
}

func (s *summary) add(r Reading) {
	w := &s.w
	w.Samples++
	w.Rejected += r.Rejected
	w.Devices = max(w.Devices, len(r.Devices))
	if s.present == nil {
		s.present = map[string]int{}
	}
	var uSum, pSum float64
	var uN, pN int
	for i := range r.Devices {
		d := &r.Devices[i]
		s.present[d.Key()]++
		w.MIG = w.MIG || d.MIG
		if u := d.Busy(); u != nil {
			uSum += *u
			uN++
			w.UtilizationMax = maxOf(w.UtilizationMax, *u)
		}
		if p := d.PowerWatts; p != nil {
			pSum += *p
			pN++
			w.PowerMaxWatts = maxOf(w.PowerMaxWatts, *p)
		}
		used, free := d.MemoryUsedBytes, d.MemoryFreeBytes
		if free != nil && (w.MemoryFreeMinBytes == nil || *free < *w.MemoryFreeMinBytes) {
			w.MemoryFreeMinBytes = ptr(*free)
		}
		if used != nil && (w.MemoryUsedMaxBytes == nil || *used > *w.MemoryUsedMaxBytes) {
			w.MemoryUsedMaxBytes = ptr(*used)
			w.MemoryTotalBytes = nil
			if free != nil {
				w.MemoryTotalBytes = ptr(*used + *free)
			}
		}
		if used != nil && free != nil && *used+*free > 0 {
			w.MemoryUsedShareMax = maxOf(w.MemoryUsedShareMax, *used/(*used+*free))
		}
	}
	if uN > 0 {
		s.utilSum += uSum / float64(uN)
		s.utilN++
	}
	if pN > 0 {
		s.powerSum += pSum / float64(pN)
		s.powerN++
	}
}

// window returns the summary, nil when nothing was read.
func (s *summary) window() *Window {
	if s.w.Samples == 0 && s.w.Errors == 0 {
		return nil
	}
	w := s.w
	if s.utilN > 0 {
		w.UtilizationMean = ptr(s.utilSum / float64(s.utilN))
	}
	if s.powerN > 0 {
		w.PowerMeanWatts = ptr(s.powerSum / float64(s.powerN))
	}
	w.MissingDevices = 0
	for _, n := range s.present {
		if n < w.Samples {
			w.MissingDevices++
		}
	}
	return &w
}

func ptr(v float64) *float64 { return &v }

func maxOf(cur *float64, v float64) *float64 {
	if cur == nil || v > *cur {
		return ptr(v)
	}
	return cur
}

// Summarize is the Window of readings taken outside a Sampler (errs are
// failed reads); nil when both are empty.
func Summarize(readings []Reading, errs []error) *Window {
	var s summary
	for _, r := range readings {
		s.add(r)
	}
	for _, err := range errs {
		s.addError(err)
	}
	return s.window()
}

// Sampler reads a target's GPUs through one measurement window.
type Sampler struct {
	mu   sync.Mutex
	s    summary
	loop *sampling.Loop
}

// Start reads r at once and then every interval (DefaultInterval when
// not positive) until Stop or ctx's end. A nil r gives a nil Sampler,
// whose Stop returns nil. A read is never started while the previous one
// runs: a read longer than the interval delays the next.
func Start(ctx context.Context, r Reader, interval time.Duration) *Sampler {
	if r == nil {
		return nil
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	s := &Sampler{}
	s.loop = sampling.Start(ctx, interval, r.Read, func(rd Reading, err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.s.addError(err)
		} else {
			s.s.add(rd)
		}
	})
	return s
}

// Stop ends the sampling, waiting for a read under way to be cut, and
// returns the window's summary: nil when no read ended at all (or s is
// nil). Stop may be called again and returns the same numbers.
func (s *Sampler) Stop() *Window {
	if s == nil {
		return nil
	}
	s.loop.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s.window()
}
