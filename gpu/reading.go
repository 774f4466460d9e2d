package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Reader reads the GPUs of one target once.
type Reader interface {
	Read(ctx context.Context) (Reading, error)
}

// NewReader builds the reader of a target's gpu section (validated, with
// its defaults set): an exporter scrape or Prometheus queries, through
// prometheus/common's HTTP client (auth, TLS, proxy), sending User-Agent
// sloprober/<version>.
func NewReader(target string, c *Config) (Reader, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("target %q: gpu: no configuration", target)
	case c.Exporter != nil && c.Prometheus == nil:
		return newExporterReader(target, c)
	case c.Prometheus != nil && c.Exporter == nil:
		return newPrometheusReader(target, c)
	}
	return nil, fmt.Errorf("target %q: gpu: set exactly one of prometheus and exporter", target)
}

// Identity is a device as dcgm-exporter labels it. A full GPU has GPU
// and UUID; a MIG instance has its parent GPU's and GPUInstanceID and
// GPUInstanceProfile besides.
type Identity struct {
	// GPU is the GPU's index on its host (label gpu).
	GPU string `json:"gpu,omitempty"`
	// UUID is the GPU's UUID (label UUID), the parent's for a MIG
	// instance.
	UUID string `json:"uuid,omitempty"`
	// ModelName is e.g. "NVIDIA H100 80GB HBM3" (label modelName).
	ModelName string `json:"model_name,omitempty"`
	// Hostname is the host (label Hostname, or hostname since
	// dcgm-exporter renamed it); read through Prometheus without either,
	// the target's instance label.
	Hostname string `json:"hostname,omitempty"`
	// GPUInstanceID and GPUInstanceProfile are a MIG instance's (labels
	// GPU_I_ID and GPU_I_PROFILE, e.g. "13" and "1g.5gb").
	GPUInstanceID      string `json:"gpu_instance_id,omitempty"`
	GPUInstanceProfile string `json:"gpu_instance_profile,omitempty"`
}

// Key identifies the device among the devices of all readings: its
// host, index, UUID and MIG instance. modelName and the profile describe
// the device and are not part of it.
func (id Identity) Key() string {
	return strings.Join([]string{id.Hostname, id.GPU, id.UUID, id.GPUInstanceID}, "\x00")
}

func (id Identity) String() string {
	s := "gpu " + id.GPU
	if id.GPUInstanceID != "" {
		s += " instance " + id.GPUInstanceID
	}
	if id.UUID != "" {
		s += " (" + id.UUID + ")"
	}
	if id.Hostname != "" {
		s += " on " + id.Hostname
	}
	return s
}

// Device is what one reading says of one GPU or MIG instance. A value is
// nil when the source does not serve it, or served one that was rejected
// (see Reading.Rejected): sloprober never invents one, and never takes an
// absent value as 0.
type Device struct {
	Identity
	// MIG: the device is a MIG instance (it has GPU_I_ID or
	// GPU_I_PROFILE).
	MIG bool `json:"mig,omitempty"`
	// Utilization is DCGM_FI_DEV_GPU_UTIL divided by 100: the share of
	// time a kernel ran, 0 to 1. dcgm-exporter does not serve it for MIG
	// instances.
	Utilization *float64 `json:"utilization,omitempty"`
	// EngineActive is DCGM_FI_PROF_GR_ENGINE_ACTIVE, the ratio of time
	// the graphics engine was active, 0 to 1 (a profiling metric: served
	// only where dcp-metrics are enabled, and for MIG instances).
	EngineActive *float64 `json:"engine_active,omitempty"`
	// MemoryUsedBytes and MemoryFreeBytes are DCGM_FI_DEV_FB_USED and
	// _FREE, MiB in DCGM, in bytes.
	MemoryUsedBytes *float64 `json:"memory_used_bytes,omitempty"`
	MemoryFreeBytes *float64 `json:"memory_free_bytes,omitempty"`
	// PowerWatts is DCGM_FI_DEV_POWER_USAGE, in watts.
	PowerWatts *float64 `json:"power_watts,omitempty"`
}

// Busy is the device's utilisation as the window summary takes it:
// Utilization where served, else EngineActive (the only utilisation of a
// MIG instance, and of a GPU whose exporter serves profiling metrics
// only); nil without either. The two are not the same measure (GPU_UTIL
// counts time with any kernel running, GR_ENGINE_ACTIVE time the
// graphics/compute engine was busy, which is close for LLM serving), so
// a device never mixes them within one reading.
func (d *Device) Busy() *float64 {
	if d.Utilization != nil {
		return d.Utilization
	}
	return d.EngineActive
}

// Reading is one read of a target's GPUs.
type Reading struct {
	// Devices are sorted by host, GPU index and MIG instance.
	Devices []Device
	// Rejected counts the values dropped: NaN, infinite, negative, above
	// their bound (a utilisation above 100%+RatioSlack, an engine ratio
	// above 1+RatioSlack, memory above MaxMemoryBytes, power above
	// MaxPowerWatts), a histogram under a mapped name, or a series with
	// neither a gpu nor a UUID label (no device to put it on).
	Rejected int
}

// kind is one of the five values a device has.
type kind int

const (
	kindUtil kind = iota
	kindEngine
	kindUsed
	kindFree
	kindPower
	numKinds
)

func (n *Names) byKind() [numKinds]string {
	return [numKinds]string{n.Utilization, n.EngineActive, n.MemoryUsed, n.MemoryFree, n.Power}
}

// builder gathers the series of one reading into devices.
type builder struct {
	names   [numKinds]string
	devices map[string]*Device
	set     map[string]*[numKinds]bool
	// raw keeps each value as served, to tell a repeated series (the
	// same value twice) from a duplicate.
	raw      map[string]*[numKinds]float64
	rejected int
	// instanceFallback: the host of a series without Hostname is its
	// instance label (Prometheus's target).
	instanceFallback bool
}

func newBuilder(names Names, instanceFallback bool) *builder {
	return &builder{
		names: names.byKind(), devices: map[string]*Device{},
		set: map[string]*[numKinds]bool{}, raw: map[string]*[numKinds]float64{},
		instanceFallback: instanceFallback,
	}
}

// errDuplicate marks two series of one name for one device with
// different values: which one is the device's is unknowable.
var errDuplicate = errors.New("duplicate series")

// add puts one series's value on its device. label returns a label's
// value, "" when absent.
func (b *builder) add(k kind, label func(string) string, v float64) error {
	id := Identity{
		GPU:                label("gpu"),
		UUID:               firstOf(label, "UUID", "uuid"),
		ModelName:          firstOf(label, "modelName", "model_name"),
		Hostname:           firstOf(label, "Hostname", "hostname"),
		GPUInstanceID:      label("GPU_I_ID"),
		GPUInstanceProfile: label("GPU_I_PROFILE"),
	}
	if id.Hostname == "" && b.instanceFallback {
		id.Hostname = label("instance")
	}
	if id.GPU == "" && id.UUID == "" {
		b.rejected++
		return nil
	}
	key := id.Key()
	d := b.devices[key]
	if d == nil {
		if len(b.devices) >= MaxSeries {
			return fmt.Errorf("more than %d devices", MaxSeries)
		}
		d = &Device{Identity: id, MIG: id.GPUInstanceID != "" || id.GPUInstanceProfile != ""}
		b.devices[key] = d
		b.set[key] = &[numKinds]bool{}
		b.raw[key] = &[numKinds]float64{}
	}
	if b.set[key][k] {
		prev := b.raw[key][k]
		if prev == v || (prev != prev && v != v) { // the same value again (NaN too)
			return nil
		}
		return fmt.Errorf("%w: %s for %s: %g and %g", errDuplicate, b.names[k], id, prev, v)
	}
	b.set[key][k] = true
	b.raw[key][k] = v
	if d.ModelName == "" {
		d.ModelName = id.ModelName
	}
	val, ok := check(k, v)
	if !ok {
		b.rejected++
		return nil
	}
	switch k {
	case kindUtil:
		d.Utilization = &val
	case kindEngine:
		d.EngineActive = &val
	case kindUsed:
		d.MemoryUsedBytes = &val
	case kindFree:
		d.MemoryFreeBytes = &val
	case kindPower:
		d.PowerWatts = &val
	}
	return nil
}

// check converts a served value to sloprober's unit and bounds it. NaN
// fails every comparison, so !(v >= 0 && ...) rejects it.
func check(k kind, v float64) (float64, bool) {
	switch k {
	case kindUtil: // percent
		if !(v >= 0 && v <= 100*(1+RatioSlack)) {
			return 0, false
		}
		return min(v, 100) / 100, true
	case kindEngine:
		if !(v >= 0 && v <= 1+RatioSlack) {
			return 0, false
		}
		return min(v, 1), true
	case kindUsed, kindFree: // MiB
		if !(v >= 0 && v*mib <= MaxMemoryBytes) {
			return 0, false
		}
		return v * mib, true
	case kindPower:
		if !(v >= 0 && v <= MaxPowerWatts) {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

func firstOf(label func(string) string, names ...string) string {
	for _, n := range names {
		if v := label(n); v != "" {
			return v
		}
	}
	return ""
}

// reading returns the devices, sorted.
func (b *builder) reading() Reading {
	r := Reading{Devices: make([]Device, 0, len(b.devices)), Rejected: b.rejected}
	for _, d := range b.devices {
		r.Devices = append(r.Devices, *d)
	}
	slices.SortFunc(r.Devices, func(a, b Device) int {
		return cmp.Or(
			cmp.Compare(a.Hostname, b.Hostname),
			compareNumeric(a.GPU, b.GPU),
			compareNumeric(a.GPUInstanceID, b.GPUInstanceID),
			cmp.Compare(a.UUID, b.UUID),
		)
	})
	return r
}

// compareNumeric orders "" first (a full GPU before its MIG instances),
// "2" before "10", and strings that are no numbers after numbers, by text.
func compareNumeric(a, b string) int {
	if a == "" || b == "" {
		return cmp.Compare(a, b)
	}
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(x, y)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return cmp.Compare(a, b)
}

// boundError bounds an error message kept or logged, and redacts URL
// passwords in it.
func boundError(s string) string {
	s = redactURL(s)
	if len(s) > maxErrorBytes {
		s = strings.ToValidUTF8(s[:maxErrorBytes], "") + "..."
	}
	return s
}
