package report

import (
	"fmt"
	"strings"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/gpu"
)

// The GPU readings are a diagnostic of the capacity, not a goal: a full
// GPU whose level met its objectives is fine. What they tell a reader is
// how much memory is left at the capacity (one more replica's worth of
// KV cache, or none), and whether a level that missed was the GPU's (busy
// while the engine's queue grew) or the engine's settings'.

// queueGrowth is how much an engine queue's mean must rise from the level
// before for it to have grown: one request more waiting, on average.
const queueGrowth = 1.0

// gpuObject summarises what the run read of its target's GPUs, over
// every level (the cold pass's too).
func gpuObject(r *Report) GPUObject {
	var o GPUObject
	for _, l := range allLevels(r) {
		w := l.GPU
		if w == nil {
			continue
		}
		o.Measured = o.Measured || w.Samples > 0
		o.Devices = max(o.Devices, w.Devices)
		o.MissingDevices = max(o.MissingDevices, w.MissingDevices)
		o.MIG = o.MIG || w.MIG
		o.Errors += w.Errors
		if w.LastError != "" {
			o.LastError = w.LastError
		}
	}
	return o
}

// allLevels is the report's levels and its cold pass's.
func allLevels(r *Report) []Level {
	out := r.Levels
	if r.Cache != nil {
		out = append(append([]Level(nil), out...), r.Cache.ColdLevels...)
	}
	return out
}

// gpuText says what the test object's GPUs were: "up to 8 GPUs read at
// every level; 1 GPU dropped out of the readings; MIG instances" or
// "not measured (the target has no gpu source)".
func (o GPUObject) text() string {
	if !o.Measured {
		if o.Errors > 0 {
			return fmt.Sprintf("not measured: every read of the target's gpu source failed (%d errors; the last: %s)", o.Errors, o.LastError)
		}
		return "not measured (the target has no gpu source)"
	}
	parts := []string{fmt.Sprintf("up to %s read in each reading", plural(o.Devices, "GPU"))}
	if o.MissingDevices > 0 {
		parts = append(parts, missingText(o.MissingDevices))
	}
	if o.MIG {
		parts = append(parts, "MIG instances: utilisation and memory are each instance's")
	}
	if o.Errors > 0 {
		parts = append(parts, fmt.Sprintf("%d reads failed (the last: %s)", o.Errors, o.LastError))
	}
	return strings.Join(parts, "; ")
}

func missingText(n int) string {
	if n == 1 {
		return "1 GPU dropped out of the readings"
	}
	return fmt.Sprintf("%d GPUs dropped out of the readings", n)
}

// gib writes bytes in GiB: "71.2", "80".
func gib(b float64) string { return fmt.Sprintf("%.3g", b/(1<<30)) }

// gpuUtil is a level's GPU utilisation cell: "71% / 98%" (mean / max).
func gpuUtil(w *gpu.Window) string {
	switch {
	case w == nil || w.Samples == 0:
		return "-"
	case w.UtilizationMean == nil:
		return "not read"
	}
	s := fmt.Sprintf("%.0f%%", 100**w.UtilizationMean)
	if w.UtilizationMax != nil {
		s += fmt.Sprintf(" / %.0f%%", 100**w.UtilizationMax)
	}
	return s
}

// gpuMem is a level's GPU memory cell: the fullest GPU's use, of its
// total: "71.2 / 80 GiB (89%)".
func gpuMem(w *gpu.Window) string {
	switch {
	case w == nil || w.Samples == 0:
		return "-"
	case w.MemoryUsedMaxBytes == nil:
		return "not read"
	case w.MemoryTotalBytes == nil:
		return gib(*w.MemoryUsedMaxBytes) + " GiB (total not read)"
	}
	s := fmt.Sprintf("%s / %s GiB", gib(*w.MemoryUsedMaxBytes), gib(*w.MemoryTotalBytes))
	if w.MemoryUsedShareMax != nil {
		s += fmt.Sprintf(" (%.0f%%)", 100**w.MemoryUsedShareMax)
	}
	return s
}

// memoryUse says the fullest GPU's memory: "the fullest GPU used 71.2 of
// 80 GiB: 11% headroom".
func memoryUse(w *gpu.Window) string {
	if w == nil || w.Samples == 0 || w.MemoryUsedMaxBytes == nil {
		return "the GPUs' memory was not read"
	}
	if w.MemoryTotalBytes == nil {
		return fmt.Sprintf("the fullest GPU used %s GiB (its total not read)", gib(*w.MemoryUsedMaxBytes))
	}
	s := fmt.Sprintf("the fullest GPU used %s of %s GiB", gib(*w.MemoryUsedMaxBytes), gib(*w.MemoryTotalBytes))
	if h, ok := w.MemoryHeadroom(); ok {
		s += fmt.Sprintf(": %.0f%% headroom", 100*h)
	}
	return s
}

// gpuFindings is what the GPU readings say of the risk: the memory
// headroom at the capacity (the closed-loop capacity's level and the
// verified open-loop level; of a soak its fullest window), and per level
// memory near full and a busy GPU with what its engine queue did.
func gpuFindings(r *Report) []GPUFinding {
	if !r.TestObject.GPU.Measured {
		return nil
	}
	var out []GPUFinding
	headroom := func(name, at string, l *Level) {
		out = append(out, GPUFinding{Kind: GPUMemoryHeadroom, Level: name, Text: at + " " + memoryUse(l.GPU)})
	}
	pass := func(prefix string, levels []Level, c *CapacitySummary, verified *float64) {
		if c != nil && c.Concurrency > 0 {
			for i := range levels {
				if l := &levels[i]; (l.Stage == "sweep" || l.Stage == "refine") && l.Concurrency == c.Concurrency {
					headroom(prefix+where(l.Stage, l.Concurrency, 0), fmt.Sprintf("at the %sclosed-loop capacity of %s", prefix, plural(c.Concurrency, "client")), l)
					break
				}
			}
		}
		if verified != nil && *verified > 0 {
			if l := verifiedLevelOf(levels, *verified); l != nil {
				headroom(prefix+where(l.Stage, 0, *verified), fmt.Sprintf("at the %sverified %.3g req/s", prefix, *verified), l)
			}
		}
	}
	var rate *float64
	if c := r.Capacity; c != nil && c.VerifiedRate > 0 {
		rate = &c.VerifiedRate
	}
	pass("", r.Levels, r.Capacity, rate)
	if cc := r.Cache; cc != nil {
		pass("cold ", cc.ColdLevels, nil, cc.Cold.VerifiedRate)
	}
	if s := r.Soak; s != nil {
		full, at := -1, 0.0
		for i, w := range s.Windows {
			if g := w.GPU; g != nil && g.MemoryUsedMaxBytes != nil && *g.MemoryUsedMaxBytes > at {
				full, at = i, *g.MemoryUsedMaxBytes
			}
		}
		if full >= 0 {
			headroom(fmt.Sprintf("soak window %d", full+1), fmt.Sprintf("over the soak at %.3g req/s (window %d, the fullest)", s.Rate, full+1), &s.Windows[full].Level)
		}
	}
	out = append(out, levelFindings("", r.Levels)...)
	if cc := r.Cache; cc != nil {
		out = append(out, levelFindings("cold ", cc.ColdLevels)...)
	}
	if n := r.TestObject.GPU.MissingDevices; n > 0 {
		out = append(out, GPUFinding{Kind: "missing_devices", Level: "run",
			Text: missingText(n) + " in a level: an Xid error or the exporter losing it; that level's utilisation and memory are of the GPUs still read"})
	}
	return out
}

// verifiedLevelOf is the open-loop verification level at rate: stated
// at its offered rate, or in a schema-1 run at its intended one.
func verifiedLevelOf(levels []Level, rate float64) *Level {
	var out *Level
	for i := range levels {
		l := &levels[i]
		if l.Stage == "verify" && l.Met && (l.Decision == "" && l.IntendedRate == rate || l.Decision != "" && l.OfferedRate == rate) {
			out = l
		}
	}
	return out
}

// levelName names a level in a finding: "sweep 16 clients", "soak window
// 3".
func levelName(prefix string, l *Level, soakWindow int) string {
	if l.Stage == "soak" {
		return fmt.Sprintf("%ssoak window %d", prefix, soakWindow)
	}
	return prefix + where(l.Stage, l.Concurrency, l.IntendedRate)
}

// levelFindings flags each level's GPU memory near full, and a busy GPU
// by what the engine's queue did against the level before: growing (the
// GPU is the limit), not read, or steady (fine when the level met). The
// burst, overload by design, is left out.
func levelFindings(prefix string, levels []Level) []GPUFinding {
	var out []GPUFinding
	var prev *Level
	soak := 0
	for i := range levels {
		l := &levels[i]
		if l.Stage == "soak" {
			soak++
		}
		if l.Stage == "burst" {
			continue
		}
		name := levelName(prefix, l, soak)
		w := l.GPU
		if w.NearFull() {
			out = append(out, GPUFinding{Kind: GPUNearFull, Level: name,
				Text: fmt.Sprintf("%s (%.0f%% used)", memoryUse(w), 100**w.MemoryUsedShareMax)})
		}
		if w.Busy() {
			util := fmt.Sprintf("utilisation %.0f%% mean", 100**w.UtilizationMean)
			// A level's own decision: "missed" only when it missed,
			// not when it was too short to decide (or implied).
			var slos string
			switch {
			case l.Met:
				slos = "SLOs held: fine"
			case l.Decision == "" || l.Decision == capacity.DecisionMissed:
				slos = "objectives missed"
			default:
				slos = "objectives not decided (" + l.Decision + ")"
			}
			q := l.EngineQueue
			var pq *capacity.EngineQueue
			if prev != nil {
				pq = prev.EngineQueue
			}
			switch {
			case q == nil || q.Samples == 0:
				out = append(out, GPUFinding{Kind: GPUBusyQueueNotRead, Level: name, Text: util + "; " + slos})
			case pq != nil && pq.Samples > 0 && q.Mean >= pq.Mean+queueGrowth:
				out = append(out, GPUFinding{Kind: GPUBusyQueueGrowing, Level: name,
					Text: fmt.Sprintf("%s, engine queue mean %.1f against %.1f at %s; %s", util, q.Mean, pq.Mean, levelName(prefix, prev, soak-1), strings.TrimSuffix(slos, ": fine"))})
			case l.Met:
				out = append(out, GPUFinding{Kind: GPUBusySLOsHeld, Level: name, Text: fmt.Sprintf("%s, engine queue mean %.1f, not growing", util, q.Mean)})
			default:
				out = append(out, GPUFinding{Kind: GPUBusySLOsMissed, Level: name,
					Text: fmt.Sprintf("%s, engine queue mean %.1f, not growing: the misses are not the GPU's queue", util, q.Mean)})
			}
		}
		prev = l
	}
	return out
}

// text says the hot-tenant level's result: "tenant-1 at 10x its share
// (16.9% of requests, expected 16.9%, long prompts) during 1m0s at 11.8
// req/s: other tenants 98.9% good [96.1, 99.7] of 412 — met (objective
// 95%); tenant-1 itself 91.0% good [85.2, 95.1] of 85; TTFT P99 of the
// others 312 ms, of tenant-1 1.2 s".
func (h *HotTenant) text() string {
	rate := h.OfferedRate
	if rate <= 0 {
		rate = h.IntendedRate
	}
	long := ""
	if h.LongPrompts {
		long = ", long prompts"
	}
	o, t := h.Others, h.Hot
	return fmt.Sprintf("%s at %gx its share (%.1f%% of requests, expected %.1f%%%s) during %s at %.3g req/s: other tenants %s — %s (objective %g%%); %s itself %s; TTFT P99 of the others %s, of %s %s",
		h.Tenant, h.Factor, 100*h.MeasuredShare, 100*h.Share, long, fmtSeconds(h.WindowSeconds), rate,
		groupText(o), orUndecided(o.Decision), 100*o.Objective, h.Tenant, groupText(t), p99(o.TTFT), h.Tenant, p99(t.TTFT))
}

func orUndecided(d string) string {
	if d == "" {
		return "not decided"
	}
	return d
}

// groupText is a tenant group's attainment: "98.9% good [96.1, 99.7] of
// 412".
func groupText(g capacity.TenantGroup) string {
	if g.Counted == 0 {
		return "no request counted"
	}
	iv := ""
	if g.Interval != nil {
		iv = fmt.Sprintf(" [%.1f, %.1f]", lower(g.Interval), upper(g.Interval))
	}
	return fmt.Sprintf("%.1f%% good%s of %d", 100*g.Attainment, iv, g.Counted)
}
