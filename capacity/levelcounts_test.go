package capacity

import (
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"

	"github.com/sloprober/sloprober/prober"
)

// TestLevelCountsOwnRequests: the stop rules of a level count only the
// requests sent since it started. Against llama-server, the requests of
// an overloaded level timing out one by one after it ended made the next
// level "missed" on a stop rule within 18 µs, before it sent anything.
func TestLevelCountsOwnRequests(t *testing.T) {
	c := &Collector{}
	o := &collectorObserver{c: c, scenario: "chat"}
	before := time.Now()
	c.ResetLevel()
	failed := func(sent time.Time) {
		o.Sent(sent, 0)
		o.Finished(&prober.Result{Sent: sent, Outcome: prober.OutcomeTimeout, Ended: 10 * time.Second}, &prober.Measurement{Outcome: prober.OutcomeTimeout, Counted: true})
	}
	for range 11 {
		failed(before) // the last level's, ending now
	}
	finished, fails, maxTTFT := c.Level()
	require.Zero(t, finished, "an earlier level's requests count nothing of this one")
	require.Zero(t, fails)
	require.Zero(t, maxTTFT)
	require.Zero(t, c.InFlight(), "but they are no longer in flight")
	failed(time.Now())
	finished, fails, maxTTFT = c.Level()
	require.Equal(t, 1, finished)
	require.Equal(t, 1, fails)
	require.Equal(t, 10*time.Second, maxTTFT, "a request failed without a first token waited that long for it")
}

// TestLevelSentNothing: a level whose window sent nothing decides
// nothing, and says so.
func TestLevelSentNothing(t *testing.T) {
	s := &Step{Test: &config.TestConfig{Name: "t", Kind: config.TestStep, Window: config.WindowConfig{Steady: model.Duration(10 * time.Second)}}, col: &Collector{}}
	w := s.col.Open(time.Now())
	s.col.Close(w, time.Now().Add(time.Second))
	l := &Level{Stage: "verify", IntendedRate: 2}
	s.summarize(l, 0, 1, confidence, w)
	require.Equal(t, DecisionInconclusive, l.Decision)
	require.Contains(t, l.Note, "sent no request in its window: it decides nothing")
	require.False(t, against(l))
	require.False(t, verifies(l))
}
