package prober

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sloprober/sloprober/config"
)

// ReportedPhase is a phase time a server (or a gateway in front of it)
// reported about one request, as a timing source found it: a field of the
// last chunk's "timings" object, a Server-Timing metric, or a mapped
// response header.
type ReportedPhase struct {
	Source string // config.SourceTimings, SourceServerTiming or SourceHeaders
	Phase  string // gateway, queue, prefill or decode
	Dur    time.Duration
}

// SourceClient marks a phase that only the client's own clock measured
// (network, and decode when no server reports it).
const SourceClient = "client"

// Bounds on what a server's timing reports may make the prober do: a
// Server-Timing header is a list the server chooses the length of.
const (
	// maxServerTimingEntries bounds the Server-Timing metrics read of one
	// reply; a gateway chain adds one or two each.
	maxServerTimingEntries = 32
	// maxServerTimingBytes bounds what is read of the Server-Timing
	// header: 32 entries of 100 bytes; the rest of a longer header is not
	// looked at.
	maxServerTimingBytes = 4 << 10
	// maxTimingValueBytes bounds a mapped header's value: a number of
	// milliseconds is short.
	maxTimingValueBytes = 64
	// maxReportedPerSource bounds the reported phases kept of one source
	// of one reply: four phases with room for a few duplicates (two
	// gateways).
	maxReportedPerSource = 8
	// maxReported bounds them over the three sources.
	maxReported = 3 * maxReportedPerSource
)

// headersHeld is how close before the first token the response headers
// may come and still count as held: a server that sends its headers with
// its first token has them parsed microseconds apart, and the time before
// them is its own, not the network's. One millisecond tells the two apart
// on loopback and on any network where a server flushes its headers first.
const headersHeld = time.Millisecond

// plausibilitySlack is how much the phases a server reports may exceed
// what the client saw before they are taken as wrong: timers on both sides
// round, and a loopback request's whole network time is tens of
// microseconds. A server whose queue + prefill is 1.2 s for a TTFT of 1 s
// is not believed, and the split falls back to the client's view.
const plausibilitySlack = time.Millisecond

// PhaseSpan is one phase of a request on its timeline, as offsets from
// Sent, with the source it came from.
type PhaseSpan struct {
	Phase      string
	Start, End time.Duration
	Source     string
}

// Duration is the phase's length.
func (p PhaseSpan) Duration() time.Duration { return p.End - p.Start }

// Split is a request's time divided into phases (config.Phases).
type Split struct {
	// Phases are in timeline order, each at most once. The phases before
	// the first token (network, gateway, queue, prefill, unattributed)
	// tile [0, TTFT] exactly; decode runs from the first token.
	Phases []PhaseSpan
	// Rejected lists the sources whose reports the client's clock
	// contradicts (their phases add up to more than it saw): not used.
	Rejected []string
}

// Phase returns the span of a phase and whether the split has it.
func (s *Split) Phase(name string) (PhaseSpan, bool) {
	for _, p := range s.Phases {
		if p.Phase == name {
			return p, true
		}
	}
	return PhaseSpan{}, false
}

// ClientOnly reports whether no server source contributed: the split is
// the client's own view (network to first byte, the server's time to
// first token unattributed).
func (s *Split) ClientOnly() bool {
	for _, p := range s.Phases {
		if p.Source != SourceClient {
			return false
		}
	}
	return true
}

// SplitPhases divides a finished request's time into phases, from the
// reports of the sources in order (for each phase the first source that
// reports it) and the client's own clock. It invents nothing:
//
//   - The reported phases before the first token are laid end to end,
//     ending at the first token, in the order they happen: gateway, queue,
//     prefill. A missing one takes no room (without queue time, a gateway's
//     place is approximate; its length is not).
//   - Before them is network (the client's connect, TLS and write, to the
//     first response byte) when the server reported its queue time, so that
//     its whole time from the request's arrival is known, and its headers
//     came first; everything else there is unattributed (llama.cpp's wait
//     for a slot, which it does not report, with the network).
//   - With no server report, the split is the client's: network to the
//     first byte, the server's time to first token unattributed. A server
//     that holds its headers until its first token (headersHeld) leaves all
//     of it unattributed.
//   - decode runs from the first token for the reported decode time (ending
//     no later than the response), else to the last token as the client saw
//     it.
//
// Worked example, the simulator under load: TTFT 412 ms, first byte at
// 0.3 ms, timings queue_ms 371.8, prompt_ms 40.1: prefill [371.9, 412],
// queue [0.1, 371.9], network [0, 0.1] (the first byte came after the
// queue started: the simulator sends its headers on arrival).
//
// A request without a token (an error, a timeout before the first token)
// is network to its first byte and unattributed to its end.
func SplitPhases(r *Result, sources []string) Split {
	var s Split
	if len(r.Chunks) == 0 {
		end := max(r.Ended, 0)
		fb := r.Trace.FirstByte
		if fb > 0 && fb <= end {
			s.add(config.PhaseNetwork, 0, fb, SourceClient)
			s.add(config.PhaseUnattributed, fb, end, SourceClient)
		} else {
			s.add(config.PhaseUnattributed, 0, end, SourceClient)
		}
		return s
	}
	ttft := r.Chunks[0]
	last := r.Chunks[len(r.Chunks)-1]

	// The phases before the first token must fit before it, and decode
	// after them: a source the client's clock contradicts is not used at
	// all (its other numbers are no better). Each source is checked on its
	// own, then together: while the picks still do not fit, the source
	// last in the order that gave one is dropped.
	pre := []string{config.PhaseGateway, config.PhaseQueue, config.PhasePrefill}
	fits := func(picks map[string]pick) (bool, time.Duration) {
		var sum time.Duration
		for _, ph := range pre {
			sum += picks[ph].dur
		}
		d, hasDecode := picks[config.PhaseDecode]
		// The server's decode starts when its first token exists, which
		// its chunk reaches the client after: it must fit after the
		// phases before it, not after the client's first token.
		return sum <= ttft+plausibilitySlack && (!hasDecode || sum+d.dur <= r.Ended+plausibilitySlack), sum
	}
	for _, src := range sources {
		if ok, _ := fits(pickReports(r.Reported, []string{src}, nil)); !ok {
			s.reject(src)
		}
	}
	picks := pickReports(r.Reported, sources, s.Rejected)
	ok, sum := fits(picks)
	for !ok {
		lastSource := ""
		for _, p := range picks {
			if lastSource == "" || slices.Index(sources, p.source) > slices.Index(sources, lastSource) {
				lastSource = p.source
			}
		}
		s.reject(lastSource)
		picks = pickReports(r.Reported, sources, s.Rejected)
		ok, sum = fits(picks)
	}

	start := max(ttft-sum, 0) // where the reported phases begin
	_, queueKnown := picks[config.PhaseQueue]
	fb := r.Trace.FirstByte
	reported := slices.ContainsFunc(pre, func(ph string) bool { _, ok := picks[ph]; return ok })
	switch {
	case !reported:
		// The client's view only.
		if fb > 0 && ttft-fb >= headersHeld {
			s.add(config.PhaseNetwork, 0, fb, SourceClient)
			s.add(config.PhaseUnattributed, fb, ttft, SourceClient)
		} else {
			s.add(config.PhaseUnattributed, 0, ttft, SourceClient)
		}
	case queueKnown && fb > 0 && ttft-fb >= headersHeld:
		net := min(fb, start)
		s.add(config.PhaseNetwork, 0, net, SourceClient)
		s.add(config.PhaseUnattributed, net, start, SourceClient)
	default:
		s.add(config.PhaseUnattributed, 0, start, SourceClient)
	}
	at := start
	for _, ph := range pre {
		if p, ok := picks[ph]; ok {
			end := min(at+p.dur, ttft)
			s.add(ph, at, end, p.source)
			at = end
		}
	}
	if d, ok := picks[config.PhaseDecode]; ok {
		// From the first token, unless that would end after the response
		// did: then it ends with the response (and began before the first
		// token reached the client).
		from := min(ttft, max(r.Ended-d.dur, 0))
		s.add(config.PhaseDecode, from, from+d.dur, d.source)
	} else if len(r.Chunks) >= 2 {
		s.add(config.PhaseDecode, ttft, last, SourceClient)
	}
	return s
}

// pick is the time a source reported for a phase.
type pick struct {
	source string
	dur    time.Duration
}

// pickReports returns, for each phase, the first source in order that
// reports it, leaving out rejected ones, with its time: the sum of its
// reports of that phase (two gateways are two hops).
func pickReports(reported []ReportedPhase, sources, rejected []string) map[string]pick {
	picks := map[string]pick{}
	for _, src := range sources {
		if slices.Contains(rejected, src) {
			continue
		}
		got := map[string]time.Duration{}
		for _, rp := range reported {
			if rp.Source == src {
				got[rp.Phase] += rp.Dur
			}
		}
		for phase, d := range got {
			if _, ok := picks[phase]; !ok {
				picks[phase] = pick{src, d}
			}
		}
	}
	return picks
}

// add appends a phase unless it is empty. A zero-length reported phase
// (a prefix-cache hit's prefill of 0 ms) is kept: the server said so.
func (s *Split) add(phase string, start, end time.Duration, source string) {
	if end < start || (end == start && source == SourceClient) {
		return
	}
	s.Phases = append(s.Phases, PhaseSpan{Phase: phase, Start: start, End: end, Source: source})
}

func (s *Split) reject(source string) {
	if !slices.Contains(s.Rejected, source) {
		s.Rejected = append(s.Rejected, source)
	}
}

// timingMap is a target's timing configuration compiled for its client.
type timingMap struct {
	sources      []string
	timings      map[string]string // timings field → phase
	serverTiming map[string]string // Server-Timing metric name (lower case) → phase
	headers      map[string]string // canonical header name → phase
}

func newTimingMap(t *config.TimingConfig) *timingMap {
	m := &timingMap{
		sources:      t.Sources,
		timings:      t.Timings,
		serverTiming: map[string]string{},
		headers:      map[string]string{},
	}
	for k, v := range t.ServerTiming {
		m.serverTiming[strings.ToLower(k)] = v
	}
	for k, v := range t.Headers {
		m.headers[http.CanonicalHeaderKey(k)] = v
	}
	return m
}

// fromHeaders appends the phases the response's headers report, from
// the sources the target uses.
func (m *timingMap) fromHeaders(h http.Header, r *Result) {
	if len(m.serverTiming) > 0 && slices.Contains(m.sources, config.SourceServerTiming) {
		for name, dur := range serverTimings(h.Values("Server-Timing")) {
			if phase, ok := m.serverTiming[strings.ToLower(name)]; ok {
				r.report(config.SourceServerTiming, phase, dur)
			}
		}
	}
	if slices.Contains(m.sources, config.SourceHeaders) {
		for name, phase := range m.headers {
			if v := h.Get(name); v != "" && len(v) <= maxTimingValueBytes {
				if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					r.report(config.SourceHeaders, phase, ms)
				}
			}
		}
	}
}

// fromTimings appends the phases the last chunk's "timings" object
// reports, by the configured field names.
func (m *timingMap) fromTimings(raw []byte, r *Result) {
	if len(m.timings) == 0 || !slices.Contains(m.sources, config.SourceTimings) {
		return
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return
	}
	for name, phase := range m.timings {
		if v, ok := fields[name]; ok {
			if ms, err := strconv.ParseFloat(string(v), 64); err == nil {
				r.report(config.SourceTimings, phase, ms)
			}
		}
	}
}

// report keeps a reported phase time in milliseconds, if it is a time at
// all (negative, NaN or beyond a day, maxTimingMS, is not), within the
// source's quota: a header read first cannot crowd out the timings object
// read last.
func (r *Result) report(source, phase string, ms float64) {
	if !(ms >= 0 && ms <= maxTimingMS) {
		return
	}
	n := 0
	for _, rp := range r.Reported {
		if rp.Source == source {
			n++
		}
	}
	if n >= maxReportedPerSource {
		return
	}
	r.Reported = append(r.Reported, ReportedPhase{Source: source, Phase: phase, Dur: time.Duration(math.Round(ms * float64(time.Millisecond)))})
}

// serverTimings yields the metrics of Server-Timing header values with a
// dur parameter (milliseconds), in order: `gateway;dur=12.5,
// queue;desc="waiting, long";dur=300`. It reads at most
// maxServerTimingBytes of the header and maxServerTimingEntries entries, and
// allocates nothing per parameter: a 10 MiB header of semicolons costs a
// bounded scan, not 16 bytes a semicolon.
func serverTimings(values []string) func(yield func(string, float64) bool) {
	return func(yield func(string, float64) bool) {
		budget, entries := maxServerTimingBytes, 0
		for _, v := range values {
			if budget <= 0 {
				return
			}
			if len(v) > budget {
				v = v[:budget]
			}
			budget -= len(v)
			for v != "" {
				var entry string
				entry, v = cutUnquoted(v, ',')
				if entries++; entries > maxServerTimingEntries {
					return
				}
				name, params := cutUnquoted(entry, ';')
				name = strings.TrimSpace(name)
				for name != "" && params != "" {
					var param string
					param, params = cutUnquoted(params, ';')
					k, val, ok := strings.Cut(param, "=")
					if !ok || !strings.EqualFold(strings.TrimSpace(k), "dur") {
						continue
					}
					if ms, err := strconv.ParseFloat(strings.Trim(strings.TrimSpace(val), `"`), 64); err == nil {
						if !yield(name, ms) {
							return
						}
					}
					break
				}
			}
		}
	}
}

// cutUnquoted cuts s around the first sep outside a quoted string.
func cutUnquoted(s string, sep byte) (before, after string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			quoted = !quoted
		case c == '\\' && quoted:
			i++
		case c == sep && !quoted:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}
