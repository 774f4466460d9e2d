package faultaction

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// TestExecKillsItsGroup: a timeout or a stop kills what the command
// started too, and says so. `sh -c "sleep 300 & sleep 301"` timed out
// after 2 s used to leave both sleeps running under PID 1; a kubectl
// wrapper so could act minutes later, unrecorded. The stop comes once
// the shell has started both (a file it writes says so), however slow
// the machine is to fork.
func TestExecKillsItsGroup(t *testing.T) {
	needTools(t, "sh", "sleep")
	started := filepath.Join(t.TempDir(), "started")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if _, err := os.Stat(started); err == nil {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	r := Runner{AllowExec: true}
	script := "sleep 300 & sleep 301 & : > " + started + "; wait"
	e := r.Do(ctx, &Action{Exec: &ExecAction{Command: []string{"sh", "-c", script}, Timeout: model.Duration(time.Minute)}})
	m := regexp.MustCompile(`: signal: killed \(context canceled\): killed its process group ([0-9]+) \(3 processes: (sh|sleep), (sh|sleep), (sh|sleep)\)$`).FindStringSubmatch(e.Error)
	require.NotNil(t, m, e.Error)
	pgid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	// SIGKILL is delivered at once; the kernel reaps orphans through
	// init, which may take a moment: wait on the group, not a clock.
	require.Eventually(t, func() bool { return len(groupMembers(pgid)) == 0 }, 10*time.Second, 10*time.Millisecond, "left in the group: %v", groupMembers(pgid))
}

// TestExecKillsWhatItLeft: a command that ends at once but leaves a
// process behind in its group (`sh -c "kubectl ... &"`) has it killed,
// and the step fails saying so: it could otherwise act later,
// unrecorded. Whether the process keeps the command's output open or
// not.
func TestExecKillsWhatItLeft(t *testing.T) {
	needTools(t, "sh", "sleep")
	for name, script := range map[string]string{
		"output kept":   "sleep 300 &",
		"output closed": "sleep 300 >/dev/null 2>&1 &",
	} {
		t.Run(name, func(t *testing.T) {
			e := (&Runner{AllowExec: true}).Do(context.Background(), &Action{Exec: &ExecAction{Command: []string{"sh", "-c", script}}})
			m := regexp.MustCompile(`: ended, leaving processes running in its group: killed its process group ([0-9]+) \(1 process: (sh|sleep)\)$`).FindStringSubmatch(e.Error)
			require.NotNil(t, m, e.Error)
			pgid, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(groupMembers(pgid)) == 0 }, 10*time.Second, 10*time.Millisecond, "left in the group: %v", groupMembers(pgid))
		})
	}
}

// TestParseStat: the command name may hold spaces and parentheses; a
// zombie's state is read.
func TestParseStat(t *testing.T) {
	comm, state, pgrp, ok := parseStat("4242 (my (odd) cmd) Z 1 4240 4240 0 -1")
	require.True(t, ok)
	require.Equal(t, "my (odd) cmd", comm)
	require.Equal(t, "Z", state)
	require.Equal(t, 4240, pgrp)
	_, _, _, ok = parseStat("4242 cmd S 1")
	require.False(t, ok)
}
