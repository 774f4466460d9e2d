package capacity_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/prober"
)

// TestDecodeRunBeforeSchemaVersion: runs stored before the schema had a
// version (testdata/v1-*.json, written by sloprober 0.x as it stored runs
// until then) read as version 1, with their header's concluded rate
// derived; sealed and written again, they keep every field name and
// value and only gain schema_version and verified_rate.
func TestDecodeRunBeforeSchemaVersion(t *testing.T) {
	for _, tc := range []struct {
		file string
		rate *float64
	}{
		{"v1-step-run.json", ptr(8.879509319202972)},
		{"v1-soak-run.json", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			require.NoError(t, err)
			run, err := capacity.DecodeRun(data)
			require.NoError(t, err)
			require.Equal(t, 1, run.SchemaVersion)
			require.Equal(t, tc.rate, run.VerifiedRate)

			sum, err := capacity.DecodeSummary(data)
			require.NoError(t, err)
			require.Equal(t, run.Summary, sum)

			run.Seal()
			again, err := json.Marshal(run)
			require.NoError(t, err)
			var before, after map[string]any
			require.NoError(t, json.Unmarshal(data, &before))
			require.NoError(t, json.Unmarshal(again, &after))
			require.EqualValues(t, 1, after["schema_version"], "a run keeps the version it was written in")
			delete(after, "schema_version")
			delete(after, "verified_rate")
			require.Equal(t, before, after)
		})
	}
}

// TestDecodeRunForecastHolds: a version 2 run wrote a forecast's holds
// false for a peak not verified as for one that missed; read now, it is
// null (not verified) or false from the level's decision. A version 3
// run's holds are read as written.
func TestDecodeRunForecastHolds(t *testing.T) {
	for _, tc := range []struct {
		version, decision, holds string
		want                     *bool
	}{
		{"2", "inconclusive", "false", nil},
		{"2", "missed", "false", ptrBool(false)},
		{"2", "met", "true", ptrBool(true)},
		{"3", "inconclusive", "null", nil},
		{"3", "met", "true", ptrBool(true)},
	} {
		body := `{"schema_version": ` + tc.version + `, "test": "k", "kind": "step", "verdict": "pass",
			"capacity": {"verified_rate": 5, "forecast": {"peak_rate": 6, "replicas": 1, "spare_replicas": 0,
			"peak": {"rate": 6, "offered": 6, "decision": "` + tc.decision + `"}, "holds": ` + tc.holds + `}}}`
		run, err := capacity.DecodeRun([]byte(body))
		require.NoError(t, err, body)
		require.Equal(t, tc.want, run.Capacity.Forecast.Holds, "version %s, %s", tc.version, tc.decision)
	}
}

func ptrBool(b bool) *bool { return &b }

// TestDecodeRunSchemaVersion: a run of a newer schema is refused, not
// misread; the header's verified rate is derived, never taken from the
// file.
func TestDecodeRunSchemaVersion(t *testing.T) {
	_, err := capacity.DecodeRun([]byte(`{"schema_version": 99, "test": "knee", "kind": "step", "verdict": "pass"}`))
	require.True(t, errors.Is(err, capacity.ErrNewerSchema), "%v", err)
	require.EqualError(t, err, "run written by a newer sloprober: schema_version 99, this sloprober reads up to 3")
	_, err = capacity.DecodeSummary([]byte(`{"schema_version": 4}`))
	require.ErrorIs(t, err, capacity.ErrNewerSchema)
	_, err = capacity.DecodeRun([]byte(`{"schema_version": -1}`))
	require.EqualError(t, err, "schema_version -1: not a version")

	for _, tc := range []struct {
		body string
		rate *float64
	}{
		{`{"test": "k", "kind": "step", "verdict": "pass", "verified_rate": 99, "capacity": {"verified_rate": 5}}`, ptr(5)},
		{`{"test": "k", "kind": "step", "verdict": "fail", "capacity": {"concurrency": 4}}`, ptr(0)},
		{`{"test": "k", "kind": "step", "verdict": "infeasible"}`, ptr(0)},
		{`{"test": "k", "kind": "step", "verdict": "aborted", "verified_rate": 5, "capacity": {"verified_rate": 5}}`, nil},
		{`{"test": "k", "kind": "step", "verdict": "running", "capacity": {"verified_rate": 5}}`, nil},
		{`{"test": "k", "kind": "soak", "verdict": "pass", "verified_rate": 5}`, nil},
	} {
		run, err := capacity.DecodeRun([]byte(tc.body))
		require.NoError(t, err, tc.body)
		require.Equal(t, tc.rate, run.VerifiedRate, tc.body)
		sum, err := capacity.DecodeSummary([]byte(tc.body))
		require.NoError(t, err, tc.body)
		require.Equal(t, tc.rate, sum.VerifiedRate, tc.body)
	}
}

func ptr(v float64) *float64 { return &v }

// TestDecodeRunCleans: a hand-edited stored run cannot act on the terminal
// that prints it nor be rendered whole at any size: every string read back
// is cleaned (ESC, BEL, U+202E made spaces; lines kept) and bounded.
func TestDecodeRunCleans(t *testing.T) {
	huge := strings.Repeat("r", 20<<20)
	data := fmt.Sprintf(`{"schema_version": 3, "test": "t\u202eevil", "kind": "step", "verdict": "fail",
		"reason": "ok\u001b]0;PWNED\u0007\u001b[2J %s",
		"setup": {"target": {"name": "x", "url": "http://h/v1", "api": "chat", "model": "m", "replicas": 1, "timeout_seconds": 1, "metadata": {"k\u001b": "v\u202e"}}, "scenarios": [], "test": "kind: step\nsweep: [1, 2]\n"},
		"sweep": [{"stage": "sweep", "note": "a\u0000b", "outcomes": {"ok\u001b[31m": 1}}]}`, huge)
	run, err := capacity.DecodeRun([]byte(data))
	require.NoError(t, err)
	require.Equal(t, "t evil", run.Test)
	require.True(t, strings.HasPrefix(run.Reason, "ok ]0;PWNED  [2J rrr"), run.Reason[:40])
	require.LessOrEqual(t, len(run.Reason), capacity.MaxStoredString)
	require.Equal(t, "kind: step\nsweep: [1, 2]\n", run.Setup.Test, "lines kept")
	require.Equal(t, map[string]string{"k ": "v "}, run.Setup.Target.Metadata)
	require.Equal(t, "a b", run.Sweep[0].Note)
	require.Contains(t, run.Sweep[0].Outcomes, prober.Outcome("ok [31m"))

	sum, err := capacity.DecodeSummary([]byte(data))
	require.NoError(t, err)
	require.Equal(t, "t evil", sum.Test)
	require.LessOrEqual(t, len(sum.Reason), capacity.MaxStoredString)
}

// FuzzDecodeRun: whatever a stored run's file holds, decoding it ends, and
// what it decodes to holds no ESC, BEL or bidi override in the strings a
// report prints first.
func FuzzDecodeRun(f *testing.F) {
	for _, name := range []string{"v1-step-run.json"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"schema_version": 3, "test": "t\u202e", "reason": "\u001b[2J", "sweep": [{"note": "\u0007"}]}`))
	f.Add([]byte(`{"schema_version": 99}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		run, err := capacity.DecodeRun(b)
		if err != nil {
			return
		}
		for _, s := range []string{run.Test, run.Reason, run.Target, run.Verdict} {
			if strings.ContainsAny(s, "\x1b\x07\u202e") || len(s) > capacity.MaxStoredString {
				t.Fatalf("kept %q", s)
			}
		}
		for _, l := range run.Sweep {
			if strings.ContainsAny(l.Note, "\x1b\x07\u202e") {
				t.Fatalf("kept note %q", l.Note)
			}
		}
	})
}
