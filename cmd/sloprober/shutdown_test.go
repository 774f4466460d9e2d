package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/simulator/simtest"
)

// writeConfig writes a configuration file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "sloprober.yml")
	require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	return file
}

// longStreams is a load whose requests each stream for minutes: 1000
// tokens 500 ms apart. Its target allows max_in_flight of them at once.
const longStreams = `
targets: [{name: sim, url: "%s/v1", model: sim-model, max_in_flight: %d}]
scenarios: [{name: long, input_tokens: 16, output_tokens: 1000, ignore_eos: true, slo: {ttft: 1s}}]
canary: [{target: sim, scenario: long, rate: 50, arrival: constant}]
`

// TestShutdownWithLongStreams: on SIGTERM (here its in-process
// equivalent, the end of runMain's context) with 52 streams in flight, the
// landing page keeps answering and /-/reload is refused at once through the
// grace period; the streams are cancelled when it ends (outcome shutdown);
// /metrics serves those final counts, and sloprober exits right after that
// scrape, at the grace period, not at grace + linger.
func TestShutdownWithLongStreams(t *testing.T) {
	const grace = 2 * time.Second
	srv := simtest.Start(t, "slots: 0\nfixed: {ttft: 10ms, itl: 500ms}\n")
	p := start(t, "--config.file="+writeConfig(t, fmt.Sprintf(longStreams, srv.URL, 52)),
		"--shutdown.grace-period="+grace.String(), "--shutdown.linger=5s")
	p.waitReady(t)
	const load = `{scenario="long",target="sim",test="canary"}`
	require.Eventually(t, func() bool {
		return p.metric(t, "sloprober_requests_in_flight"+load) == 52
	}, 10*time.Second, 20*time.Millisecond)

	signalled := time.Now()
	p.terminate(t)
	require.Eventually(t, func() bool {
		return strings.Contains(p.logs(), "Stopping loads")
	}, time.Second, 5*time.Millisecond)
	code, page := p.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "sloprober is stopping:")
	code, body := p.post(t, "/-/reload")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "sloprober is stopping")
	code, _ = p.get(t, "/-/ready")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, 52.0, p.metric(t, "sloprober_requests_in_flight"+load), "the streams are still draining")
	require.Less(t, time.Since(signalled), grace, "the web answered at once during the grace period")
	require.Equal(t, 1.0, p.metric(t, "sloprober_config_last_reload_successful"), "a refused reload is no failed configuration")

	// Scrape as Prometheus would until sloprober exits: the first scrape
	// after the drain ends the linger, and the last one that got an
	// answer has the final counts.
	shutdown := -1.0
	require.Eventually(t, func() bool {
		if p.hasExited() {
			return true
		}
		if v := p.metric(t, `sloprober_requests_finished_total{outcome="shutdown",scenario="long",target="sim",test="canary"}`); v >= 0 {
			shutdown = v
		}
		return false
	}, grace+3*time.Second, 20*time.Millisecond, "sloprober did not exit after the final counts were scraped")
	took := time.Since(signalled)
	require.Equal(t, 0, p.wait(t, 0))
	require.Equal(t, 52.0, shutdown, "the final counts were served")
	require.GreaterOrEqual(t, took, grace, "the streams had the grace period")
	require.Less(t, took, grace+2500*time.Millisecond, "exit right after the scrape, not after the linger")
	require.Contains(t, p.logs(), "See you next time!")
}

// TestShutdownLingerWithoutScrape: when nobody scrapes the final counts,
// the web stays up for --shutdown.linger after the drain, then sloprober
// exits.
func TestShutdownLingerWithoutScrape(t *testing.T) {
	const grace, linger = 500 * time.Millisecond, 1500 * time.Millisecond
	srv := simtest.Start(t, "slots: 0\nfixed: {ttft: 10ms, itl: 500ms}\n")
	p := start(t, "--config.file="+writeConfig(t, fmt.Sprintf(longStreams, srv.URL, 3)),
		"--shutdown.grace-period="+grace.String(), "--shutdown.linger="+linger.String())
	p.waitReady(t)
	require.Eventually(t, func() bool {
		return p.metric(t, `sloprober_requests_in_flight{scenario="long",target="sim",test="canary"}`) == 3
	}, 10*time.Second, 20*time.Millisecond)

	signalled := time.Now()
	p.terminate(t)
	require.Eventually(t, func() bool {
		return strings.Contains(p.logs(), "serving the final counts until the next scrape")
	}, grace+time.Second, 5*time.Millisecond)
	for _, path := range []string{"/", "/-/healthy", "/config"} {
		code, _ := p.get(t, path)
		require.Equal(t, http.StatusOK, code, "%s answers while lingering", path)
	}
	code := p.wait(t, grace+linger+5*time.Second)
	took := time.Since(signalled)
	require.Equal(t, 0, code)
	require.GreaterOrEqual(t, took, grace+linger)
	require.Less(t, took, grace+linger+exitMargin)
	require.Contains(t, p.logs(), "No scrape of the final counts within the linger time")
}

// TestExitDeadline: whatever hangs, the process exits (code 1, with a log
// line) once the grace period, the linger and the margin have passed.
func TestExitDeadline(t *testing.T) {
	var log bytes.Buffer
	logger := promslog.New(&promslog.Config{Writer: &log})
	exited := make(chan int)
	none := func() (time.Time, string) { return time.Time{}, "" }
	exitDeadline(logger, 10*time.Millisecond, func(code int) { exited <- code }, none)
	require.Equal(t, 1, <-exited)
	require.Contains(t, log.String(), "sloprober did not stop within the grace period and the linger time; exiting now")

	exitDeadline(logger, time.Hour, func(int) { t.Error("exited before the deadline") }, none).Stop()
}

// TestExitDeadlineWaitsForAnUndo: a fault action's undo under way at the
// deadline extends it to the undo's own timeout (and the margin), said in
// the log: exiting then would leave a replica out of rotation and the run
// without its undo. Before, the process exited at grace + linger + 2 s
// whatever the undo did.
func TestExitDeadlineWaitsForAnUndo(t *testing.T) {
	var log bytes.Buffer
	logger := promslog.New(&promslog.Config{Writer: &log})
	exited := make(chan time.Time, 1)
	until := time.Now().Add(300 * time.Millisecond)
	pending := func() (time.Time, string) { return until, "undo http POST http://gateway/admin/backends/1/up" }
	exitDeadline(logger, 10*time.Millisecond, func(int) { exited <- time.Now() }, pending)
	at := <-exited
	require.False(t, at.Before(until), "exited at %s, before the undo's timeout %s", at, until)
	require.Contains(t, log.String(), "A fault action is under way: the exit waits for it")
	require.Contains(t, log.String(), "undo http POST http://gateway/admin/backends/1/up")
}

// goroutines counts the goroutines of this test binary, where sloprober
// and the simulator run: conns, the HTTP connections open in it (a
// client's read loop each), and others, every goroutine but the three of
// a kept-alive loopback connection (the client's read and write loops,
// the server's conn.serve, and its background read while a handler runs).
func goroutines() (conns, others int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	// A frame's line starts with its function; a "created by" line
	// names the function that started the goroutine, which is not one of
	// its own frames.
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "\nnet/http.(*persistConn).readLoop("):
			conns++
		case strings.Contains(g, "\nnet/http.(*persistConn).writeLoop("),
			strings.Contains(g, "\nnet/http.(*conn).serve("),
			strings.Contains(g, "\nnet/http.(*connReader).backgroundRead("):
		default:
			others++
		}
	}
	return conns, others
}

// TestReloadStorm: 100 reloads alternating a good and a bad configuration
// leave the load untouched (never restarted, its counters going on) and
// leak no goroutine.
func TestReloadStorm(t *testing.T) {
	srv := simtest.Start(t, "slots: 0\nfixed: {ttft: 2ms, itl: 1ms}\n")
	const maxInFlight = 8
	good := fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: sim-model, max_in_flight: %d}]
scenarios: [{name: chat, input_tokens: 16, output_tokens: 2, ignore_eos: true, slo: {ttft: 1s}}]
canary: [{target: sim, scenario: chat, rate: 20, arrival: constant}]
`, srv.URL, maxInFlight)
	bad := strings.Replace(good, "rate: 20", "rate: fast", 1)
	file := writeConfig(t, good)
	p := start(t, "--config.file="+file)
	p.waitReady(t)
	const sent = `sloprober_requests_sent_total{scenario="chat",target="sim",test="canary"}`
	require.Eventually(t, func() bool { return p.metric(t, sent) >= 5 }, 10*time.Second, 20*time.Millisecond)
	// The goroutines apart from connections', the fewest over a few
	// looks: requests in flight come and go, a leak stays. Connections
	// are counted apart: a starved prober's requests last longer and its
	// arrivals bunch (it sends what fell due up to 1 s ago at once), so
	// more are in flight at once, and each opens a connection that then
	// stays in the pool, idle for up to 5 minutes (prometheus/common's
	// idle timeout), three goroutines each. Beside a CPU burner (make
	// test-busy) the pool grew from 1 to 16 connections during the storm
	// (go_goroutines 53 before, 78 after) and once to about 65 (31, 227),
	// with no goroutine of the prober's own left over.
	others := func() (conns, least int) {
		conns, least = goroutines()
		for range 5 {
			time.Sleep(20 * time.Millisecond)
			_, n := goroutines()
			least = min(least, n)
		}
		return conns, least
	}
	_, before := others()

	last := p.metric(t, sent)
	for i := range 100 {
		body, want := good, http.StatusOK
		if i%2 == 1 {
			body, want = bad, http.StatusInternalServerError
		}
		require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
		code, msg := p.post(t, "/-/reload")
		require.Equal(t, want, code, "reload %d: %s", i, msg)
		if i%10 == 9 {
			now := p.metric(t, sent)
			require.GreaterOrEqual(t, now, last, "the load's counters go on")
			last = now
		}
	}
	require.Eventually(t, func() bool { return p.metric(t, sent) > last }, 5*time.Second, 20*time.Millisecond, "the load keeps sending")
	require.Equal(t, 20.0, p.metric(t, `sloprober_intended_request_rate{scenario="chat",target="sim",test="canary"}`))
	require.Equal(t, 0.0, p.metric(t, "sloprober_config_last_reload_successful"), "the last reload was the bad one")
	// A leak (one goroutine a reload would be 50 or 100) stays; what
	// winds down after the storm is given 10 s. The prober's pool holds
	// at most a connection per request in flight and one per dial a
	// request gave up waiting for: 2 x max_in_flight, beside the test's
	// own to /metrics; a client leaked per reload would hold 50.
	conns, after := others()
	for deadline := time.Now().Add(10 * time.Second); after > before+5 && time.Now().Before(deadline); {
		conns, after = others()
	}
	t.Logf("goroutines apart from connections': %d before the storm, %d after; %d connections after", before, after, conns)
	require.LessOrEqual(t, after, before+5, "goroutines apart from connections': %d before the storm, %d after", before, after)
	require.LessOrEqual(t, conns, 2*maxInFlight+2, "HTTP connections open after the storm")
	require.Equal(t, 0, p.stop(t))
	logs := p.logs()
	require.Equal(t, 1, strings.Count(logs, `msg="Load started"`), "the load was never restarted")
	require.Zero(t, strings.Count(logs, `msg="Load stopped"`))
	require.Equal(t, 50, strings.Count(logs, `msg="Error loading config"`))
}
