package gpu

// Bounds on what a GPU source can make sloprober read, keep or log. Both
// sources are outside input: an endless body, a million series or a hung
// connection must end in bounded time and memory, and a value no GPU can
// mean is dropped, never passed on.
const (
	// MaxBodyBytes bounds the body of one exporter scrape: 4 MiB, as for
	// an engine's /metrics. dcgm-exporter serves about 40 series a GPU
	// with its default counters (some 250 bytes each with Kubernetes
	// labels), about 80 KiB for 8 GPUs; 4 MiB holds 8 GPUs of 7 MIG
	// instances each with every profiling counter enabled.
	MaxBodyBytes = 4 << 20
	// MaxSamples bounds the sample lines of one exporter scrape, counted
	// before anything is parsed: 30,000 (the parser's memory is bounded
	// by the count, not the bytes: 4 MiB of "a 1" lines are a million
	// series).
	MaxSamples = 30_000
	// MaxQueryBytes bounds the body of one Prometheus query answer: 8 MiB.
	// A series of the answer is 500-700 bytes of JSON with Kubernetes
	// labels, so MaxSeries of them are under 1 MiB.
	MaxQueryBytes = 8 << 20
	// MaxSeries bounds the series of one Prometheus query, and the
	// devices of one reading: 1,024, a selector that matched a
	// 128-node, 8-GPU fleet. A selector matching more (none, on a fleet
	// of thousands of GPUs) is a mistake to report, not a reading.
	MaxSeries = 1024
	// RatioSlack is how far above its full scale a utilisation may be and
	// still be taken (as full): 1%, i.e. 101 for a percentage and 1.01 for
	// a ratio. 150 is no utilisation and is rejected, not rescaled.
	RatioSlack = 0.01
	// MaxMemoryBytes bounds the used and the free memory of one device:
	// 1 TiB. The largest GPUs of 2025 have 288 GB (B300); a value above
	// 1 TiB is a broken exporter or a unit mistake (bytes sent as MiB).
	MaxMemoryBytes = 1 << 40
	// MaxPowerWatts bounds the power draw of one device: 10 kW. A GB200
	// superchip draws 2.7 kW at most; 10 kW is no GPU's.
	MaxPowerWatts = 10_000
	// maxErrorBytes bounds an error message kept (Window.LastError): a
	// parse error quotes the server's text.
	maxErrorBytes = 256
)

// mib is the unit of DCGM_FI_DEV_FB_USED and _FREE.
const mib = 1 << 20
