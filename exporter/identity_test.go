package exporter_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/prober"
)

// TestIdentity: a target's served identity is the last ok reply's; a
// change replaces the info series and is counted; failed replies and
// replies that say nothing leave it; the series go with the target's last
// load.
func TestIdentity(t *testing.T) {
	reg := prometheus.NewRegistry()
	id := exporter.NewIdentity(reg)
	canary := prober.LoadInfo{Key: config.Key{Target: "t", Scenario: "s", Test: "canary"}}
	test := prober.LoadInfo{Key: config.Key{Target: "t", Scenario: "s", Test: "knee"}}
	a, b := id.Observe(canary), id.Observe(test)
	reply := func(obs prober.Observer, outcome prober.Outcome, model, fp, header string) {
		obs.Finished(&prober.Result{Outcome: outcome, Model: model, SystemFingerprint: fp, IdentityHeader: header}, &prober.Measurement{})
	}
	expect := func(info string, changes int) {
		t.Helper()
		want := `
# HELP sloprober_target_identity_changes_total Changes of a target's stated identity (model, fingerprint, identity header) between consecutive ok replies.
# TYPE sloprober_target_identity_changes_total counter
sloprober_target_identity_changes_total{target="t"} ` + strconv.Itoa(changes) + `
`
		if info != "" {
			want += `# HELP sloprober_target_served_info Who a target's last ok reply said it is: its model, system_fingerprint and identity_header value ("" when not sent); 1.
# TYPE sloprober_target_served_info gauge
` + info + "\n"
		}
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
	}
	expect("", 0)
	reply(a, prober.OutcomeOK, "llama-3.1-8b", "fp_1", "")
	reply(b, prober.OutcomeOK, "llama-3.1-8b", "fp_1", "")
	expect(`sloprober_target_served_info{fingerprint="fp_1",header="",model="llama-3.1-8b",target="t"} 1`, 0)
	reply(a, prober.OutcomeHTTP5xx, "fallback", "", "")
	reply(a, prober.OutcomeOK, "", "", "")
	expect(`sloprober_target_served_info{fingerprint="fp_1",header="",model="llama-3.1-8b",target="t"} 1`, 0)
	reply(b, prober.OutcomeOK, "llama-3.1-8b", "fp_2", "v2")
	expect(`sloprober_target_served_info{fingerprint="fp_2",header="v2",model="llama-3.1-8b",target="t"} 1`, 1)
	reply(a, prober.OutcomeOK, "llama-3.1-8b", "fp_1", "")
	expect(`sloprober_target_served_info{fingerprint="fp_1",header="",model="llama-3.1-8b",target="t"} 1`, 2)

	id.Forget(test)
	expect(`sloprober_target_served_info{fingerprint="fp_1",header="",model="llama-3.1-8b",target="t"} 1`, 2)
	id.Forget(canary)
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Zero(t, n, "the target's series go with its last load")
}
