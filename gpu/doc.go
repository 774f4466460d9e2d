// Package gpu records the GPU utilisation, memory and power of a target
// during a capacity test's measurement windows (step test levels, soak
// windows), from NVIDIA's dcgm-exporter.
//
// # Sources
//
// A target's gpu section (Config) names exactly one source:
//
//   - prometheus: a Prometheus that scrapes dcgm-exporter, read by one
//     instant query a metric name, NAME{selector}, through client_golang's
//     API client. The selector (e.g. {Hostname="gpu-node-1"} or
//     {pod=~"vllm-.*"}) picks the target's GPUs; it is checked as a
//     label-matcher set (ValidateSelector) and Prometheus parses it.
//     Devices are identified by dcgm-exporter's labels; Prometheus's
//     instance label stands in for the host only where a series has no
//     Hostname/hostname label, and job never does.
//   - exporter: a dcgm-exporter's /metrics read directly by a bounded
//     scrape, as servermetrics reads an engine's.
//
// # Units
//
// Each Device of a Reading carries, where served: Utilization, from
// DCGM_FI_DEV_GPU_UTIL in percent, divided by 100 (0 to 1); EngineActive,
// DCGM_FI_PROF_GR_ENGINE_ACTIVE, a ratio already (0 to 1); memory used
// and free, DCGM_FI_DEV_FB_USED and _FREE in MiB, times 2^20 (bytes); and
// DCGM_FI_DEV_POWER_USAGE in watts. Names can be changed (Names), not
// units.
//
// MIG: dcgm-exporter serves no GPU_UTIL for MIG instances, only profiling
// metrics such as GR_ENGINE_ACTIVE, and FB_* per instance where DCGM
// reports them (DCGM 3.1.3 and later on A100; some H100 setups serve none,
// dcgm-exporter issue #512). A device's utilisation (Device.Busy) is
// therefore its Utilization where served, else its EngineActive. With MIG
// on, the parent GPU's own series (without GPU_I_ID) are a device of
// their own beside its instances.
//
// # Bounds
//
// An exporter scrape reads at most MaxBodyBytes and MaxSamples sample
// lines, takes text/plain (any version), OpenMetrics or no Content-Type
// and refuses any other (an HTML login page), follows redirects only to
// the same scheme, host and port, within the section's timeout, with
// User-Agent sloprober/<version>. A Prometheus read runs its queries
// within the same timeout, each answer at most MaxQueryBytes and
// MaxSeries series; a reading has at most MaxSeries devices.
//
// # Nothing is invented
//
// A value the source does not serve is absent (nil), never 0. A value
// that is NaN, infinite, negative or beyond its bound (utilisation above
// 100%+RatioSlack, an engine ratio above 1+RatioSlack, memory above
// MaxMemoryBytes, power above MaxPowerWatts) is dropped for that reading
// and counted in Reading.Rejected, and so is a series with neither a gpu
// nor a UUID label. Two series of one name for the same device with
// different values fail the read (which one is the device's?); the same
// series twice with the same value (dcgm-exporter repeats a GPU shared by
// several pods) is read once. A failed read is counted in Window.Errors,
// and a window without a successful read has no values at all.
//
// # Windows
//
// Start samples a Reader through a window, at once and then every
// interval; Stop returns the Window summary (see Window for the
// definitions and worked numbers), with the verdicts the report uses:
// MemoryHeadroom, NearFull and Busy.
package gpu
