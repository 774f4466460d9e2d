package capacity

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/sloprober/sloprober/internal/proc"
	"github.com/sloprober/sloprober/validity"
)

// A level measured while the prober was the limit says nothing of the
// target. Two causes look alike from inside the process and call for
// opposite advice. A busy host: other processes hold the CPUs, so
// sloprober's goroutines wait to run (scheduler latency, send lag) while
// sloprober itself uses little CPU, 2% of its two CPUs at a send lag of
// 800 ms; adding shards there adds waiting. A saturated prober: sloprober
// uses its CPUs up (90% of GOMAXPROCS or more); shards or CPUs help. A
// busy host is often passing (a build, a backup), so the level is
// measured again once the prober is valid again, up to the test's
// retries; a run whose levels stay prober-bound concludes nothing.

// Diagnoses of a window the prober limited.
const (
	diagnosisSaturated = "saturated prober"
	diagnosisBusyHost  = "busy host"
	diagnosisGC        = "GC pauses"
)

// diagnose tells why the prober was late over a window whose health h
// broke the thresholds of v for reasons, with what to do.
func diagnose(h *ProberHealth, reasons []string, v *validity.Config) string {
	has := func(reason string) bool {
		for _, r := range reasons {
			if r == reason {
				return true
			}
		}
		return false
	}
	cpu := fmt.Sprintf("sloprober used %.0f%% of its %d CPUs", 100*h.CPUShare, h.GOMAXPROCS)
	switch {
	case has(validity.ReasonCPU):
		return fmt.Sprintf("%s: %s: add shards or CPU", diagnosisSaturated, cpu)
	case has(validity.ReasonGCPause) && !has(validity.ReasonSchedulerLatency) && !has(validity.ReasonSendLag):
		return fmt.Sprintf("%s: GC pause P99 %.0f ms (%s): give sloprober more memory headroom or CPU", diagnosisGC, 1e3*h.GCPauseP99, cpu)
	}
	return fmt.Sprintf("%s: %s while it was late to run (scheduler latency P99 %.0f ms, send lag P99 %.0f ms): other processes hold the CPUs; run it on a quieter host or give it dedicated CPUs",
		diagnosisBusyHost, cpu, 1e3*h.SchedulerP99, 1e3*h.LagP99)
}

// minSendsForLag is the fewest sends whose lag P99 judges a window: the
// P99 of 45 sends is the largest of them, and one send 13 ms late (a GC,
// a timer) would throw a level away. Over fewer, the median is judged: a
// prober late to send is late on most sends.
const minSendsForLag = 100

// judgeProber judges the prober's health over a level by v (nil: none)
// and marks the level, with a diagnosis, when the prober was the limit;
// use says what becomes of such a level.
func judgeProber(l *Level, v *validity.Config, use string) {
	p := l.Prober
	if p == nil || v == nil {
		return
	}
	p.Invalid = overThresholds(p, v)
	if len(p.Invalid) > 0 {
		p.Diagnosis = diagnose(p, p.Invalid, v)
		if use == notUsed {
			l.Note = addNote(l.Note, notUsed+": prober-bound ("+boundBy(p, p.Invalid, "")+")")
			return
		}
		l.Note = addNote(l.Note, "prober-bound ("+strings.Join(p.Invalid, ", ")+"): measured while the prober was the limit, "+use)
	}
}

// boundBy says what held the prober over a window, measured, for a note:
// each threshold it was over by its measure, then how late it read (late,
// if any), then the diagnosis's cause: "send lag P99 49 ms, reads up to 12
// ms late, busy host", not the thresholds' keys ("send_lag").
func boundBy(p *ProberHealth, over []string, late string) string {
	var parts []string
	for _, r := range over {
		switch r {
		case validity.ReasonSendLag:
			if late == "" { // late says it, as measured
				parts = append(parts, fmt.Sprintf("send lag P99 %.0f ms", 1e3*p.LagP99))
			}
		case validity.ReasonSchedulerLatency:
			if late == "" {
				parts = append(parts, fmt.Sprintf("scheduler latency P99 %.0f ms", 1e3*p.SchedulerP99))
			}
		case validity.ReasonCPU:
			parts = append(parts, fmt.Sprintf("CPU %.0f%% of %d cores", 100*p.CPUShare, p.GOMAXPROCS))
		case validity.ReasonGCPause:
			parts = append(parts, fmt.Sprintf("GC pause P99 %.0f ms", 1e3*p.GCPauseP99))
		default:
			parts = append(parts, strings.ReplaceAll(r, "_", " ")) // pool_wait: a target's, not the prober's
		}
	}
	if late != "" {
		parts = append(parts, late)
	}
	if cause := strings.TrimSuffix(proberCause(p.Diagnosis), ": "); cause != "" {
		parts = append(parts, cause)
	}
	return strings.Join(parts, ", ")
}

// notUsed leads the note of a level the prober limited, which the
// conclusion leaves out: the note says so first.
const notUsed = "not used"

// proberCause is the cause a diagnosis names, to put first in a verdict
// the prober decided ("busy host: ", "saturated prober: ", "GC pauses:
// "); empty for none.
func proberCause(diagnosis string) string {
	for _, d := range []string{diagnosisBusyHost, diagnosisSaturated, diagnosisGC} {
		if strings.Contains(diagnosis, d) {
			return d + ": "
		}
	}
	return ""
}

// proberBoundReason names a level the prober limited, why and what to do.
func proberBoundReason(l *Level) string {
	why := l.Prober.Diagnosis
	if why == "" {
		why = "add shards or CPU" // a run judged before diagnoses
	}
	return fmt.Sprintf("prober-bound at %s (%s): %s", l.RateName(), strings.Join(l.Prober.Invalid, ", "), why)
}

// Waiting for the prober to be valid again before a level is measured
// again: its health is sampled over validWindow at a time, idle, for at
// most validWait, and no longer than a steady window.
const (
	validWindow = time.Second
	validWait   = 30 * time.Second
)

// waitValid waits, the test's load stopped, until the process would pass
// the validity thresholds again: its CPU share and scheduler latency over
// a second (the send lag needs requests, which the next measurement
// judges). It returns after validWait (or a steady window, if shorter)
// whatever the process shows (the next measurement judges it), or when
// ctx is done.
func (s *Step) waitValid(ctx context.Context) error {
	if s.Validity == nil {
		return nil
	}
	deadline := time.NewTimer(proberWait(time.Duration(s.Test.Window.Steady)))
	defer deadline.Stop()
	for {
		snap, cpu0, t0 := validity.TakeRuntimeSnapshot(), proc.CPU(), time.Now()
		tick := time.NewTimer(validWindow)
		select {
		case <-ctx.Done():
			tick.Stop()
			return context.Cause(ctx)
		case <-deadline.C:
			tick.Stop()
			return nil
		case <-tick.C:
		}
		sched, gc := snap.P99s()
		share := (proc.CPU() - cpu0).Seconds() / time.Since(t0).Seconds() / float64(runtime.GOMAXPROCS(0))
		if len(s.Validity.Judge(share, sched, gc, 0, 0)) == 0 {
			return nil
		}
	}
}
