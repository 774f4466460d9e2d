package servermetrics

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/simulator"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// TestSimulatorGroundTruth scrapes the simulator, whose own stats are the
// truth: idle, after cached prompts, and under a load that fills its
// slots and its queue.
func TestSimulatorGroundTruth(t *testing.T) {
	sim := simtest.Start(t, `
slots: 2
decode: {base: 20ms, per_sequence: 0s}
prefill: {base: 1ms, per_token: 0s}
prefix_cache: {block_tokens: 4}
`)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	post := func(ctx context.Context, prompt string, maxTokens int, stream bool) error {
		body, _ := json.Marshal(map[string]any{
			"model": "sim-model", "messages": []map[string]string{{"role": "user", "content": prompt}},
			"max_tokens": maxTokens, "stream": stream, "ignore_eos": true,
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, sim.URL+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	s := newScraper(t, sim.URL+"/metrics", 5*time.Second)
	scrape := func() (Snapshot, simulator.Stats) {
		t.Helper()
		before := sim.Stats()
		snap, err := s.Scrape(context.Background())
		require.NoError(t, err)
		after := sim.Stats()
		require.Equal(t, before.Running, after.Running, "the simulator is steady while scraped")
		require.Equal(t, before.Waiting, after.Waiting, "the simulator is steady while scraped")
		return snap, after
	}

	// Idle.
	snap, st1 := scrape()
	require.Equal(t, EngineVLLM, snap.Engine)
	require.InDelta(t, 0, *snap.Running, 0)
	require.InDelta(t, 0, *snap.Waiting, 0)
	require.Nil(t, snap.PrefixCacheHitRatio, "no increase before the first scrape")
	require.Empty(t, snap.Rejected)

	// The same 100-token prompt three times: the second and third find
	// its whole blocks cached.
	prompt := strings.Repeat("abcd", 100)
	for range 3 {
		require.NoError(t, post(context.Background(), prompt, 1, false))
	}
	snap, st2 := scrape()
	queried := st2.PromptTokensTotal - st1.PromptTokensTotal
	hit := st2.CachedPromptTokensTotal - st1.CachedPromptTokensTotal
	require.Positive(t, hit)
	require.NotNil(t, snap.PrefixCacheHitRatio)
	require.InDelta(t, float64(hit)/float64(queried), *snap.PrefixCacheHitRatio, 1e-12)

	// Five long streams on two slots: two run, three wait.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() { _ = post(ctx, strings.Repeat("x", 40+i), 20000, true) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	require.Eventually(t, func() bool {
		st := sim.Stats()
		return st.Running == 2 && st.Waiting == 3
	}, 5*time.Second, 2*time.Millisecond)
	snap, st3 := scrape()
	require.InDelta(t, float64(st3.Running), *snap.Running, 0)
	require.InDelta(t, float64(st3.Waiting), *snap.Waiting, 0)
	if snap.KVCacheUsage != nil { // running sequences / slots, when the simulator serves it
		require.InDelta(t, 1, *snap.KVCacheUsage, 1e-12)
	}

	// The drain check's fresh read agrees too.
	m := NewManager(nil, NewMetrics(newRegistry()))
	require.NoError(t, m.Apply(configWith(t, "sim", smConfig(sim.URL+"/metrics", 5*time.Second))))
	defer stopManager(t, m)
	n, err := m.Queue("sim").Waiting(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, n)
}
