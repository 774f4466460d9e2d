package main

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
)

// TestProgressTerminal: on a terminal the progress is one line, rewritten
// every second with the time moved on, cleared before a line of its own and
// at the end; to a pipe it is a plain line a level.
func TestProgressTerminal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out output
		p := newProgress(&out, true)
		p.width = func() int { return 120 } // a terminal of 120 columns
		p.println("Running a plan")
		p.update(capacity.Progress{Level: 2, Levels: 9, Stage: "sweep", Concurrency: 4, Elapsed: 10 * time.Second, Remaining: time.Minute, RemainingMax: 20 * time.Minute, Goodput: 3})
		time.Sleep(2500 * time.Millisecond)
		p.println("a line of its own")
		p.close()
		got := out.String()
		require.True(t, strings.HasPrefix(got, "Running a plan\n\r\x1b[Klevel 2 of about 9: sweep, 4 clients; elapsed 10s, about 1m0s left (up to 20m); last goodput 3 good req/s"), "%q", got)
		require.Contains(t, got, "\r\x1b[Klevel 2 of about 9: sweep, 4 clients; elapsed 12s, about 58s left (up to 20m)", "redrawn each second")
		require.Contains(t, got, "\r\x1b[Ka line of its own\n\r\x1b[Klevel 2")
		require.True(t, strings.HasSuffix(got, "\r\x1b[K"), "cleared at the end: %q", got)
		require.Equal(t, 1, strings.Count(got, "a line of its own"))
		require.Equal(t, 2, strings.Count(got, "\n"), "no line of progress ends: %q", got)
	})
}

// TestProgressLogLines: a log line written through the progress (test
// run's logger on a terminal) goes above the updating line, which is
// redrawn under it, never broken in two.
func TestProgressLogLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out output
		p := newProgress(&out, true)
		p.width = func() int { return 100 }
		logger := promslog.New(&promslog.Config{Writer: p})
		p.update(capacity.Progress{Level: 2, Levels: 9, Stage: "sweep", Concurrency: 4, Elapsed: 10 * time.Second, Remaining: time.Minute})
		logger.Info("Measuring a level again", "level", "4 clients")
		p.close()
		got := out.String()
		i := strings.Index(got, "level=INFO")
		require.Positive(t, i, "%q", got)
		start := strings.LastIndex(got[:i], "time=")
		require.True(t, strings.HasSuffix(got[:start], "good req/s\r\x1b[K"), "the progress line cleared before the log line: %q", got)
		end := start + strings.Index(got[start:], "\n") + 1
		require.Contains(t, got[start:end], `msg="Measuring a level again"`)
		require.True(t, strings.HasPrefix(got[end:], "\r\x1b[Klevel 2 of about 9"), "redrawn under it: %q", got)
	})
}

func TestProgressPlain(t *testing.T) {
	var out output
	p := newProgress(&out, false)
	p.println("Running a plan")
	p.update(capacity.Progress{Level: 1, Levels: 9, Stage: "baseline", Concurrency: 1})
	p.update(capacity.Progress{Level: 2, Levels: 9, Stage: "sweep", Concurrency: 2, Goodput: 3})
	p.close()
	require.Equal(t, "Running a plan\n"+
		"level 1 of about 9: baseline, 1 client; elapsed 0s, about 0s left\n"+
		"level 2 of about 9: sweep, 2 clients; elapsed 0s, about 0s left; last goodput 3 good req/s\n", out.String())
	require.False(t, isTerminal(&out))
}

// TestProgressNarrowTerminal: on a terminal narrower than the line, the
// line is cut to its width, so that it never wraps (a carriage return
// would rewrite only its last row).
func TestProgressNarrowTerminal(t *testing.T) {
	var out output
	p := newProgress(&out, true)
	p.width = func() int { return 40 }
	p.update(capacity.Progress{Level: 2, Levels: 9, Stage: "sweep", Concurrency: 4, Elapsed: 10 * time.Second, Remaining: time.Minute, Goodput: 3})
	p.close()
	line := strings.TrimPrefix(strings.Split(out.String(), "\r\x1b[K")[1], "")
	require.Equal(t, "2/~9 sweep, 4 clients; about 1m0s left", line, "the time left whole, the level's words short")
}

// TestFitLine: a line wider than the terminal loses its optional clauses
// first, last goodput, then elapsed, then the level's words, and keeps the
// time left whole (it was cut mid-parenthesis at 79 columns: "... left
// (up to 22m"); only a terminal too narrow for that is cut, with an
// ellipsis.
func TestFitLine(t *testing.T) {
	p := capacity.Progress{Level: 7, Levels: 11, Stage: "verify", Rate: 6.79, Elapsed: 192 * time.Second,
		Remaining: 130 * time.Second, RemainingMax: 22 * time.Minute, Goodput: 7.83}
	for _, tc := range []struct {
		width int
		want  string
	}{
		{200, "level 7 of about 11: verify, 6.79 req/s intended; elapsed 3m12s, about 2m10s left (up to 22m); last goodput 7.83 good req/s"},
		{100, "level 7 of about 11: verify, 6.79 req/s intended; elapsed 3m12s, about 2m10s left (up to 22m)"},
		{79, "level 7 of about 11: verify, 6.79 req/s intended; about 2m10s left (up to 22m)"},
		{70, "7/~11 verify, 6.79 req/s intended; about 2m10s left (up to 22m)"},
		{50, "7/~11 verify; about 2m10s left (up to 22m)"},
		{20, "7/~11 verify; about…"},
	} {
		got := fitLine(p, tc.width)
		require.Equal(t, tc.want, got, "width %d", tc.width)
		require.LessOrEqual(t, utf8.RuneCountInString(got), tc.width)
	}
}
