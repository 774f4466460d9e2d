package prober

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
)

// TestReportedPhases: each timing source reads its phases from recorded
// replies: llama.cpp's and the simulator's timings objects, Server-Timing
// and a gateway's own header, by the target's mapping.
func TestReportedPhases(t *testing.T) {
	kong := config.DefaultTimingConfig
	kong.Headers = map[string]string{"X-Kong-Proxy-Latency": config.PhaseGateway}
	custom := config.TimingConfig{Sources: config.TimingSources, Timings: map[string]string{"wait_ms": config.PhaseQueue}}
	for _, tc := range []struct {
		name   string
		file   string
		header http.Header
		timing config.TimingConfig
		want   []ReportedPhase
	}{
		{
			name: "llama.cpp timings: prefill and decode, no queue", file: "llamacpp_timings.sse", timing: config.DefaultTimingConfig,
			want: []ReportedPhase{{config.SourceTimings, config.PhasePrefill, ms(20.512)}, {config.SourceTimings, config.PhaseDecode, ms(30.125)}},
		},
		{
			name: "simulator timings: queue too", file: "sim_timings.sse", timing: config.DefaultTimingConfig,
			want: []ReportedPhase{
				{config.SourceTimings, config.PhaseQueue, ms(371.8)}, {config.SourceTimings, config.PhasePrefill, ms(40.1)},
				{config.SourceTimings, config.PhaseDecode, ms(20.2)},
			},
		},
		{
			name: "Server-Timing and a gateway header", file: "usage_on_finish.sse", timing: kong,
			header: http.Header{
				"Server-Timing":        {`gateway;dur=12.5, cache;desc="Cache Read";dur=23.2`, `queue;desc="waiting";dur=300`, "edge;dur=-1, prefill;dur=abc"},
				"X-Kong-Proxy-Latency": {"7"},
			},
			want: []ReportedPhase{
				{config.SourceServerTiming, config.PhaseGateway, ms(12.5)}, {config.SourceServerTiming, config.PhaseQueue, ms(300)},
				{config.SourceHeaders, config.PhaseGateway, ms(7)},
			},
		},
		{
			name: "a quoted comma or semicolon in a description keeps its entry", file: "usage_on_finish.sse", timing: config.DefaultTimingConfig,
			header: http.Header{"Server-Timing": {`queue;desc="waiting, for; a slot";dur=300, prefill;dur=20`}},
			want:   []ReportedPhase{{config.SourceServerTiming, config.PhaseQueue, ms(300)}, {config.SourceServerTiming, config.PhasePrefill, ms(20)}},
		},
		{
			name: "twenty Server-Timing entries do not crowd out the timings object", file: "sim_timings.sse", timing: config.DefaultTimingConfig,
			header: http.Header{"Server-Timing": {strings.Repeat("queue;dur=1, ", 20)}},
			want: append(slices.Repeat([]ReportedPhase{{config.SourceServerTiming, config.PhaseQueue, ms(1)}}, maxReportedPerSource),
				ReportedPhase{config.SourceTimings, config.PhaseQueue, ms(371.8)}, ReportedPhase{config.SourceTimings, config.PhasePrefill, ms(40.1)},
				ReportedPhase{config.SourceTimings, config.PhaseDecode, ms(20.2)}),
		},
		{
			name: "a source the target does not use is not read", file: "sim_timings.sse",
			timing: config.TimingConfig{Sources: []string{config.SourceTimings}, Timings: config.DefaultTimingConfig.Timings, ServerTiming: config.DefaultTimingConfig.ServerTiming},
			header: http.Header{"Server-Timing": {"queue;dur=5"}},
			want: []ReportedPhase{
				{config.SourceTimings, config.PhaseQueue, ms(371.8)}, {config.SourceTimings, config.PhasePrefill, ms(40.1)},
				{config.SourceTimings, config.PhaseDecode, ms(20.2)},
			},
		},
		{
			name: "a mapping of other field names, and nothing of the defaults", file: "sim_timings.sse", timing: custom,
			header: http.Header{"Server-Timing": {"queue;dur=5"}},
		},
		{
			name: "a day and more, negative, not a number: not a time", file: "usage_on_finish.sse", timing: kong,
			header: http.Header{"Server-Timing": {"queue;dur=86400001, prefill;dur=NaN, decode;dur=-0.5"}, "X-Kong-Proxy-Latency": {"1e400"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "streams", tc.file))
			require.NoError(t, err)
			r := readRecorded(t, data, func(r io.Reader) io.Reader { return r })
			m := newTimingMap(&tc.timing)
			m.fromHeaders(tc.header, r)
			m.fromTimings(r.timingsRaw, r)
			require.ElementsMatch(t, tc.want, r.Reported)
		})
	}
}

// TestSplitPhases: the split of a request's time into phases, from the
// reported phases and the client's own clock.
func TestSplitPhases(t *testing.T) {
	sources := config.TimingSources
	span := func(phase string, start, end float64, source string) PhaseSpan {
		return PhaseSpan{Phase: phase, Start: ms(start), End: ms(end), Source: source}
	}
	const tm, st, cl = config.SourceTimings, config.SourceServerTiming, SourceClient
	for _, tc := range []struct {
		name     string
		r        Result
		sources  []string
		want     []PhaseSpan
		rejected []string
	}{
		{
			name: "llama.cpp: the wait for a slot and the network are unattributed",
			r: Result{Chunks: []time.Duration{ms(100), ms(110), ms(120), ms(130)}, Ended: ms(131), Trace: Trace{FirstByte: ms(99.99)},
				Reported: []ReportedPhase{{tm, config.PhasePrefill, ms(20.512)}, {tm, config.PhaseDecode, ms(30.125)}}},
			want: []PhaseSpan{
				span(config.PhaseUnattributed, 0, 79.488, cl), span(config.PhasePrefill, 79.488, 100, tm), span(config.PhaseDecode, 100, 130.125, tm),
			},
		},
		{
			name: "the simulator: network to where the queue starts, then queue and prefill to the first token",
			r: Result{Chunks: []time.Duration{ms(412), ms(422), ms(432)}, Ended: ms(433), Trace: Trace{FirstByte: ms(0.3)},
				Reported: []ReportedPhase{{tm, config.PhaseQueue, ms(371.8)}, {tm, config.PhasePrefill, ms(40.1)}, {tm, config.PhaseDecode, ms(20.2)}}},
			want: []PhaseSpan{
				span(config.PhaseNetwork, 0, 0.1, cl), span(config.PhaseQueue, 0.1, 371.9, tm), span(config.PhasePrefill, 371.9, 412, tm),
				span(config.PhaseDecode, 412, 432.2, tm),
			},
		},
		{
			name: "a gateway in front (Server-Timing), the engine's timings behind it",
			r: Result{Chunks: []time.Duration{ms(395), ms(405)}, Ended: ms(406), Trace: Trace{FirstByte: ms(50.2)},
				Reported: []ReportedPhase{{st, config.PhaseGateway, ms(50)}, {tm, config.PhaseQueue, ms(300)}, {tm, config.PhasePrefill, ms(40)}}},
			want: []PhaseSpan{
				span(config.PhaseNetwork, 0, 5, cl), span(config.PhaseGateway, 5, 55, st), span(config.PhaseQueue, 55, 355, tm),
				span(config.PhasePrefill, 355, 395, tm), span(config.PhaseDecode, 395, 405, cl),
			},
		},
		{
			name: "no source: network to the first byte, the server's time to first token unattributed",
			r:    Result{Chunks: []time.Duration{ms(200), ms(210)}, Ended: ms(211), Trace: Trace{FirstByte: ms(0.5)}},
			want: []PhaseSpan{span(config.PhaseNetwork, 0, 0.5, cl), span(config.PhaseUnattributed, 0.5, 200, cl), span(config.PhaseDecode, 200, 210, cl)},
		},
		{
			name: "no source, headers held until the first token: nothing told apart",
			r:    Result{Chunks: []time.Duration{ms(200)}, Ended: ms(201), Trace: Trace{FirstByte: ms(199.9)}},
			want: []PhaseSpan{span(config.PhaseUnattributed, 0, 200, cl)},
		},
		{
			name: "timings that add up to more than the client saw are not used at all; the next source is",
			r: Result{Chunks: []time.Duration{ms(300), ms(310)}, Ended: ms(311), Trace: Trace{FirstByte: ms(1)},
				Reported: []ReportedPhase{
					{tm, config.PhaseQueue, ms(500)}, {tm, config.PhasePrefill, ms(40)}, {tm, config.PhaseDecode, ms(5)},
					{st, config.PhaseQueue, ms(250)},
				}},
			want: []PhaseSpan{
				span(config.PhaseNetwork, 0, 1, cl), span(config.PhaseUnattributed, 1, 50, cl), span(config.PhaseQueue, 50, 300, st),
				span(config.PhaseDecode, 300, 310, cl),
			},
			rejected: []string{tm},
		},
		{
			name: "a decode longer than the stream is not believed",
			r: Result{Chunks: []time.Duration{ms(100), ms(110)}, Ended: ms(111), Trace: Trace{FirstByte: ms(1)},
				Reported: []ReportedPhase{{tm, config.PhaseQueue, ms(50)}, {tm, config.PhasePrefill, ms(40)}, {tm, config.PhaseDecode, ms(5000)}}},
			want: []PhaseSpan{
				span(config.PhaseNetwork, 0, 1, cl), span(config.PhaseUnattributed, 1, 100, cl), span(config.PhaseDecode, 100, 110, cl),
			},
			rejected: []string{tm},
		},
		{
			name: "a decode that began before the first token reached the client ends with the response",
			r: Result{Chunks: []time.Duration{ms(100), ms(119)}, Ended: ms(120), Trace: Trace{FirstByte: ms(1)},
				Reported: []ReportedPhase{{tm, config.PhaseQueue, ms(50)}, {tm, config.PhasePrefill, ms(40)}, {tm, config.PhaseDecode, ms(25)}}},
			want: []PhaseSpan{
				span(config.PhaseNetwork, 0, 1, cl), span(config.PhaseUnattributed, 1, 10, cl), span(config.PhaseQueue, 10, 60, tm),
				span(config.PhasePrefill, 60, 100, tm), span(config.PhaseDecode, 95, 120, tm),
			},
		},
		{
			name: "a server that held its headers: the time before its reported queue is not network",
			r: Result{Chunks: []time.Duration{ms(100)}, Ended: ms(101), Trace: Trace{FirstByte: ms(99.9)},
				Reported: []ReportedPhase{{st, config.PhaseQueue, ms(10)}, {st, config.PhasePrefill, ms(10)}}},
			want: []PhaseSpan{span(config.PhaseUnattributed, 0, 80, cl), span(config.PhaseQueue, 80, 90, st), span(config.PhasePrefill, 90, 100, st)},
		},
		{
			name: "a bogus gateway header does not take the engine's timings with it",
			r: Result{Chunks: []time.Duration{ms(100), ms(110)}, Ended: ms(111), Trace: Trace{FirstByte: ms(1)},
				Reported: []ReportedPhase{{tm, config.PhaseQueue, ms(50)}, {tm, config.PhasePrefill, ms(40)}, {st, config.PhaseGateway, ms(500)}}},
			want: []PhaseSpan{
				span(config.PhaseNetwork, 0, 1, cl), span(config.PhaseUnattributed, 1, 10, cl), span(config.PhaseQueue, 10, 60, tm),
				span(config.PhasePrefill, 60, 100, tm), span(config.PhaseDecode, 100, 110, cl),
			},
			rejected: []string{st},
		},
		{
			name: "sources that fit alone but not together: the last in the order goes",
			r: Result{Chunks: []time.Duration{ms(100)}, Ended: ms(101), Trace: Trace{FirstByte: ms(1)},
				Reported: []ReportedPhase{{tm, config.PhaseQueue, ms(60)}, {tm, config.PhasePrefill, ms(30)}, {st, config.PhaseGateway, ms(50)}}},
			want: []PhaseSpan{
				span(config.PhaseNetwork, 0, 1, cl), span(config.PhaseUnattributed, 1, 10, cl), span(config.PhaseQueue, 10, 70, tm),
				span(config.PhasePrefill, 70, 100, tm),
			},
			rejected: []string{st},
		},
		{
			name: "the order of the sources decides which one gives a phase",
			r: Result{Chunks: []time.Duration{ms(100)}, Ended: ms(101), Trace: Trace{FirstByte: ms(0.2)},
				Reported: []ReportedPhase{{tm, config.PhaseQueue, ms(60)}, {st, config.PhaseQueue, ms(70)}, {tm, config.PhasePrefill, ms(20)}}},
			sources: []string{config.SourceServerTiming, config.SourceTimings},
			want: []PhaseSpan{
				span(config.PhaseNetwork, 0, 0.2, cl), span(config.PhaseUnattributed, 0.2, 10, cl),
				span(config.PhaseQueue, 10, 80, st), span(config.PhasePrefill, 80, 100, tm),
			},
		},
		{
			name: "a prefix-cache hit's prefill of 0 ms is the server's word",
			r: Result{Chunks: []time.Duration{ms(30)}, Ended: ms(31), Trace: Trace{FirstByte: ms(0.1)},
				Reported: []ReportedPhase{{tm, config.PhaseQueue, ms(29.9)}, {tm, config.PhasePrefill, 0}}},
			want: []PhaseSpan{span(config.PhaseNetwork, 0, 0.1, cl), span(config.PhaseQueue, 0.1, 30, tm), span(config.PhasePrefill, 30, 30, tm)},
		},
		{
			name: "a failure before any token: network to the first byte, the rest unattributed",
			r:    Result{Ended: ms(10), Trace: Trace{FirstByte: ms(5)}, Reported: []ReportedPhase{{st, config.PhaseGateway, ms(4)}}},
			want: []PhaseSpan{span(config.PhaseNetwork, 0, 5, cl), span(config.PhaseUnattributed, 5, 10, cl)},
		},
		{
			name: "no connection at all",
			r:    Result{Ended: ms(3)},
			want: []PhaseSpan{span(config.PhaseUnattributed, 0, 3, cl)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.sources
			if src == nil {
				src = sources
			}
			s := SplitPhases(&tc.r, src)
			require.Len(t, s.Phases, len(tc.want), "%+v", s.Phases)
			for i, p := range s.Phases {
				w := tc.want[i]
				require.Equal(t, w.Phase, p.Phase, "phase %d", i)
				require.Equal(t, w.Source, p.Source, "source of %s", p.Phase)
				require.InDelta(t, w.Start, p.Start, float64(time.Microsecond), "start of %s", p.Phase)
				require.InDelta(t, w.End, p.End, float64(time.Microsecond), "end of %s", p.Phase)
			}
			require.Equal(t, tc.rejected, s.Rejected)
			// The phases before the first token tile [0, TTFT].
			if len(tc.r.Chunks) > 0 {
				var at time.Duration
				for _, p := range s.Phases {
					if p.Phase == config.PhaseDecode {
						continue
					}
					require.Equal(t, at, p.Start, "%s starts where the previous phase ended", p.Phase)
					at = p.End
				}
				require.Equal(t, tc.r.Chunks[0], at, "the phases before the first token end at it")
			}
		})
	}
}

// TestServerTimingBounded: a 9 MiB Server-Timing header of semicolons
// costs a bounded scan: its first 4 KiB are read, with no allocation per
// parameter.
func TestServerTimingBounded(t *testing.T) {
	huge := "queue" + strings.Repeat(";", 9<<20) + "dur=5"
	m := newTimingMap(&config.DefaultTimingConfig)
	allocs := testing.AllocsPerRun(5, func() {
		r := &Result{}
		m.fromHeaders(http.Header{"Server-Timing": {huge, "prefill;dur=3"}}, r)
		require.Empty(t, r.Reported, "nothing past the first 4 KiB is read")
	})
	require.LessOrEqual(t, allocs, 4.0)
}

// TestTraceparent: the head decision follows the ratio on the trace id,
// the trace id is the request id, and the header is W3C's.
func TestTraceparent(t *testing.T) {
	h := &headSampling{ratio: 0.25}
	sampled := 0
	const n = 20000
	for i := range n {
		id := fmt.Sprintf("%016x%016x", uint64(i)*0x9e3779b97f4a7c15, uint64(i)*0xbf58476d1ce4e5b9)
		sc := h.spanContext(id)
		require.Equal(t, id, sc.TraceID().String())
		if sc.IsSampled() {
			sampled++
		}
	}
	require.InDelta(t, 0.25, float64(sampled)/n, 0.02)
	sc := (&headSampling{ratio: 1}).spanContext("0af7651916cd43dd8448eb211c80319c")
	require.Regexp(t, `^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$`, traceparent(sc))
	sc = (&headSampling{ratio: 0}).spanContext("not hex")
	require.True(t, sc.IsValid())
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-00$`, traceparent(sc))
}

// FuzzTimingSources: whatever a server puts in its Server-Timing and
// mapped headers and its "timings" object, the reported phases are bounded
// in number and each is a time of at most a day, and the split of any
// timeline with them tiles [0, TTFT].
func FuzzTimingSources(f *testing.F) {
	f.Add(`gateway;dur=12.5, cache;desc="a;b,c";dur=23.2`, "7", []byte(`{"queue_ms":371.8,"prompt_ms":40.1,"predicted_ms":20.2}`), int64(400e6))
	f.Add("queue;dur=1e400, prefill;dur=-1, decode;dur=NaN", "1e9", []byte(`{"queue_ms":"x","prompt_ms":null}`), int64(1))
	f.Add(strings.Repeat("queue;dur=1,", 100), "", []byte(`[]`), int64(0))
	f.Fuzz(func(t *testing.T, serverTiming, header string, timings []byte, ttft int64) {
		cfg := config.DefaultTimingConfig
		cfg.Headers = map[string]string{"X-Gateway-Ms": config.PhaseGateway}
		m := newTimingMap(&cfg)
		r := &Result{}
		m.fromHeaders(http.Header{"Server-Timing": {serverTiming}, "X-Gateway-Ms": {header}}, r)
		m.fromTimings(timings, r)
		require.LessOrEqual(t, len(r.Reported), maxReported)
		for _, rp := range r.Reported {
			require.GreaterOrEqual(t, rp.Dur, time.Duration(0))
			require.LessOrEqual(t, rp.Dur, 24*time.Hour)
		}
		if ttft < 0 {
			ttft = -ttft
		}
		ttft %= int64(time.Hour)
		r.Chunks = []time.Duration{time.Duration(ttft), time.Duration(ttft) + time.Millisecond}
		r.Ended = time.Duration(ttft) + 2*time.Millisecond
		s := SplitPhases(r, config.TimingSources)
		var at time.Duration
		for _, p := range s.Phases {
			if p.Phase == config.PhaseDecode {
				require.LessOrEqual(t, p.End, r.Ended+plausibilitySlack)
				continue
			}
			require.Equal(t, at, p.Start)
			at = p.End
		}
		require.Equal(t, r.Chunks[0], at)
	})
}
