package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dev is a device with index i and the given values (nil: absent).
func dev(i string, util, usedMiB, freeMiB, watts *float64) Device {
	d := Device{Identity: Identity{GPU: i, UUID: "GPU-" + i, Hostname: "h"}, Utilization: util, PowerWatts: watts}
	if usedMiB != nil {
		d.MemoryUsedBytes = f(*usedMiB * mib)
	}
	if freeMiB != nil {
		d.MemoryFreeBytes = f(*freeMiB * mib)
	}
	return d
}

func TestSummarize(t *testing.T) {
	two := Reading{Devices: []Device{dev("0", f(0.8), f(72000), f(9000), f(300)), dev("1", f(1), f(40000), f(41000), f(500))}}
	for _, tc := range []struct {
		name     string
		readings []Reading
		errs     []error
		check    func(*testing.T, *Window)
	}{
		{"2 GPUs at 80% and 100% over 3 samples", []Reading{two, two, two}, nil, func(t *testing.T, w *Window) {
			assert.Equal(t, 3, w.Samples)
			assert.Equal(t, 2, w.Devices)
			assert.InDelta(t, 0.9, *w.UtilizationMean, 1e-12)
			assert.Equal(t, f(1), w.UtilizationMax)
			assert.True(t, w.Busy())
			// FB_USED 72000 MiB + FB_FREE 9000 MiB: share 0.889.
			assert.Equal(t, f(72000*mib), w.MemoryUsedMaxBytes)
			assert.Equal(t, f(81000*mib), w.MemoryTotalBytes)
			assert.Equal(t, f(9000*mib), w.MemoryFreeMinBytes)
			assert.InDelta(t, 0.8889, *w.MemoryUsedShareMax, 1e-4)
			h, ok := w.MemoryHeadroom()
			assert.True(t, ok)
			assert.InDelta(t, 0.1111, h, 1e-4)
			assert.False(t, w.NearFull())
			assert.Equal(t, f(400), w.PowerMeanWatts)
			assert.Equal(t, f(500), w.PowerMaxWatts)
			assert.Zero(t, w.MissingDevices)
		}},
		{"mean of per-reading means", []Reading{
			{Devices: []Device{dev("0", f(0.2), nil, nil, nil), dev("1", f(0.4), nil, nil, nil)}}, // mean 0.3
			{Devices: []Device{dev("0", f(0.9), nil, nil, nil)}},                                  // mean 0.9, GPU 1 missing
			{Devices: []Device{dev("0", nil, nil, nil, nil)}},                                     // no utilisation: not counted
		}, nil, func(t *testing.T, w *Window) {
			assert.InDelta(t, 0.6, *w.UtilizationMean, 1e-12)
			assert.Equal(t, f(0.9), w.UtilizationMax)
			assert.Equal(t, 1, w.MissingDevices)
			assert.Equal(t, 2, w.Devices)
			assert.False(t, w.Busy())
			assert.Nil(t, w.MemoryUsedMaxBytes)
			_, ok := w.MemoryHeadroom()
			assert.False(t, ok)
			assert.Nil(t, w.PowerMeanWatts)
		}},
		{"near full, used without free", []Reading{
			{Devices: []Device{dev("0", nil, f(77000), f(3000), nil), dev("1", nil, f(79000), nil, nil)}, Rejected: 2},
		}, nil, func(t *testing.T, w *Window) {
			assert.InDelta(t, 77000.0/80000, *w.MemoryUsedShareMax, 1e-12)
			assert.True(t, w.NearFull())
			assert.Equal(t, f(79000*mib), w.MemoryUsedMaxBytes)
			assert.Nil(t, w.MemoryTotalBytes, "the fullest device's free memory was not served")
			assert.Equal(t, 2, w.Rejected)
			assert.Nil(t, w.UtilizationMean)
		}},
		{"MIG falls back to the engine ratio", []Reading{
			{Devices: []Device{{Identity: Identity{GPU: "0", GPUInstanceID: "13"}, MIG: true, EngineActive: f(0.5)}}},
		}, nil, func(t *testing.T, w *Window) {
			assert.True(t, w.MIG)
			assert.Equal(t, f(0.5), w.UtilizationMean)
		}},
		{"every read failing", nil, []error{errors.New("a"), errors.New("connection refused")}, func(t *testing.T, w *Window) {
			assert.Equal(t, 0, w.Samples)
			assert.Equal(t, 2, w.Errors)
			assert.Equal(t, "connection refused", w.LastError)
			assert.Nil(t, w.UtilizationMean)
			assert.Nil(t, w.MemoryUsedShareMax)
			assert.False(t, w.Busy())
			assert.False(t, w.NearFull())
			b, err := json.Marshal(w)
			require.NoError(t, err)
			assert.JSONEq(t, `{"samples":0,"errors":2,"devices":0,"last_error":"connection refused"}`, string(b))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Summarize(tc.readings, tc.errs)
			require.NotNil(t, w)
			tc.check(t, w)
		})
	}
	assert.Nil(t, Summarize(nil, nil))
	var nilW *Window
	assert.False(t, nilW.Busy())
}

func TestWindowJSON(t *testing.T) {
	w := Summarize([]Reading{{Devices: []Device{dev("0", f(0.5), f(1), f(3), nil)}}}, nil)
	b, err := json.Marshal(w)
	require.NoError(t, err)
	assert.JSONEq(t, `{"samples":1,"errors":0,"devices":1,"utilization_mean":0.5,"utilization_max":0.5,
		"memory_used_max_bytes":1048576,"memory_total_bytes":4194304,"memory_free_min_bytes":3145728,
		"memory_used_share_max":0.25}`, string(b))
}

// scripted is a Reader answering from a channel: each Read takes the
// next answer, or blocks until ctx ends.
type scripted struct {
	answers chan answer
	reads   chan struct{}
}

type answer struct {
	r   Reading
	err error
}

func (s *scripted) Read(ctx context.Context) (Reading, error) {
	s.reads <- struct{}{}
	select {
	case a := <-s.answers:
		return a.r, a.err
	case <-ctx.Done():
		return Reading{}, ctx.Err()
	}
}

func TestSampler(t *testing.T) {
	t.Run("nil reader", func(t *testing.T) {
		s := Start(context.Background(), nil, time.Second)
		assert.Nil(t, s)
		assert.Nil(t, s.Stop())
	})
	t.Run("reads at once, then every interval; Stop cuts a read", func(t *testing.T) {
		r := &scripted{answers: make(chan answer), reads: make(chan struct{}, 10)}
		s := Start(context.Background(), r, time.Millisecond)
		<-r.reads
		r.answers <- answer{r: Reading{Devices: []Device{dev("0", f(0.8), nil, nil, nil)}}}
		<-r.reads
		r.answers <- answer{err: errors.New("HTTP status 503")}
		<-r.reads // the third read hangs until Stop: not a sample
		w := s.Stop()
		require.NotNil(t, w)
		assert.Equal(t, 1, w.Samples)
		assert.Equal(t, 1, w.Errors)
		assert.Equal(t, "HTTP status 503", w.LastError)
		assert.Equal(t, f(0.8), w.UtilizationMean)
		assert.Equal(t, w, s.Stop(), "Stop again gives the same")
	})
	t.Run("no read ended", func(t *testing.T) {
		r := &scripted{answers: make(chan answer), reads: make(chan struct{}, 10)}
		s := Start(context.Background(), r, time.Hour)
		<-r.reads
		assert.Nil(t, s.Stop())
	})
	t.Run("all reads failing", func(t *testing.T) {
		r := &scripted{answers: make(chan answer, 3), reads: make(chan struct{}, 10)}
		for range 3 {
			r.answers <- answer{err: errors.New("connection refused")}
		}
		s := Start(context.Background(), r, time.Millisecond)
		for range 4 {
			<-r.reads // the fourth read hangs: three have ended
		}
		w := s.Stop()
		assert.Equal(t, 3, w.Errors)
		assert.Zero(t, w.Samples)
		assert.Nil(t, w.UtilizationMean)
		assert.Nil(t, w.MemoryUsedMaxBytes)
	})
	t.Run("parent context ends the sampling", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		r := &scripted{answers: make(chan answer, 1), reads: make(chan struct{}, 10)}
		r.answers <- answer{r: Reading{}}
		s := Start(ctx, r, time.Hour)
		<-r.reads
		cancel()
		w := s.Stop()
		// The first read may have ended before the cancel or been cut.
		if w != nil {
			assert.Equal(t, 1, w.Samples)
		}
	})
}
