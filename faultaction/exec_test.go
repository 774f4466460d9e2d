package faultaction

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s not on PATH: %v", n, err)
		}
	}
}

func TestExecRefusedUnlessAllowed(t *testing.T) {
	a := &Action{Exec: &ExecAction{Command: []string{"touch", t.TempDir() + "/ran"}}}
	var r Runner
	require.ErrorIs(t, r.Check(a), ErrExecNotAllowed)
	require.EqualError(t, r.Check(a), "exec fault actions are off: start sloprober with --test.allow-exec-faults")
	for _, e := range []Event{r.Do(context.Background(), a), r.Undo(context.Background(), a)} {
		require.Equal(t, "exec fault actions are off: start sloprober with --test.allow-exec-faults", e.Error)
		require.Equal(t, KindExec, e.Kind)
	}
	require.NoFileExists(t, a.Exec.Command[1], "the command ran")

	r.AllowExec = true
	require.NoError(t, r.Check(a))
	// A bad action is refused as Validate says, whatever the flag.
	require.EqualError(t, r.Check(&Action{Exec: &ExecAction{}}), `exec.command: must be a non-empty argv list, e.g. ["/usr/local/bin/chaos", "--kill"]`)
}

func TestExec(t *testing.T) {
	needTools(t, "true", "false", "sleep", "echo", "head", "printf")
	long := strings.Repeat("x", maxExecOutput+100)
	for _, tc := range []struct {
		name           string
		argv           []string
		timeout        time.Duration
		result, errMsg string
	}{
		{"true", []string{"true"}, 0, "exit status 0", ""},
		{"false", []string{"false"}, 0, "", `["false"]: exit status 1`},
		// No shell: the ; and $HOME are arguments, not syntax.
		{"no shell", []string{"echo", "a;", "$HOME", "b c"}, 0, "a; $HOME b c", ""},
		{"missing", []string{"/nonexistent/chaos"}, 0, "", `["/nonexistent/chaos"]: could not run: fork/exec /nonexistent/chaos: no such file or directory`},
		{"timeout", []string{"sleep", "5"}, 100 * time.Millisecond, "", `["sleep" "5"]: signal: killed (timed out after 100ms): killed its process group <pid> (1 process: sleep)`},
		{"output bounded", []string{"printf", "%s", long}, 0, long[:maxExecOutput] + "… (100 more bytes not kept)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Runner{AllowExec: true}
			a := &Action{Exec: &ExecAction{Command: tc.argv, Timeout: model.Duration(tc.timeout)}}
			e := r.Do(context.Background(), a)
			require.Equal(t, tc.errMsg, pgidRE.ReplaceAllString(e.Error, "group <pid>"))
			require.Equal(t, tc.result, e.Result)
			require.Less(t, e.Seconds, 3.0)
		})
	}
}

func TestExecUndoAndStderr(t *testing.T) {
	needTools(t, "sh", "true")
	r := Runner{AllowExec: true}
	// sh is named as a program here, as an operator could: still no shell
	// of ours in between.
	a := &Action{Exec: &ExecAction{Command: []string{"true"}, Undo: []string{"sh", "-c", "echo healed; echo oops >&2; exit 3"}}}
	require.True(t, a.Undoable())
	e := r.Undo(context.Background(), a)
	require.Equal(t, ActionUndo, e.Action)
	require.Equal(t, `exec ["sh" "-c" "echo healed; echo oops >&2; exit 3"]`, e.Description)
	require.Equal(t, "healed oops", e.Result, "one line")
	require.Equal(t, `["sh" "-c" "echo healed; echo oops >&2; exit 3"]: exit status 3`, e.Error)

	e = r.Undo(context.Background(), &Action{Exec: &ExecAction{Command: []string{"true"}}})
	require.Equal(t, "nothing to undo", e.Result)
}

// The caller's context kills the command too.
func TestExecContextCancelled(t *testing.T) {
	needTools(t, "sleep")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	e := (&Runner{AllowExec: true}).Do(ctx, &Action{Exec: &ExecAction{Command: []string{"sleep", "5"}}})
	require.Equal(t, `["sleep" "5"]: signal: killed (context canceled): killed its process group <pid> (1 process: sleep)`, pgidRE.ReplaceAllString(e.Error, "group <pid>"))
	require.Less(t, e.Seconds, 3.0)
}

// pgidRE finds the process group a kill names, which changes run to run.
var pgidRE = regexp.MustCompile(`group [0-9]+`)

// TestExecResultCleaned: what a command prints reaches the run as one
// printable line: no escape sequence sets the operator's window title or
// clears the screen when `report show` prints it.
func TestExecResultCleaned(t *testing.T) {
	needTools(t, "printf")
	e := (&Runner{AllowExec: true}).Do(context.Background(), &Action{Exec: &ExecAction{Command: []string{"printf", "ok\033]0;PWNED\007\033[2J\nnext\342\200\256line"}}})
	require.Empty(t, e.Error)
	require.Equal(t, "ok ]0;PWNED [2J next line", e.Result)
}

func TestBoundedBuffer(t *testing.T) {
	w := &boundedBuffer{max: 4}
	for _, s := range []string{"ab", "cd", "ef"} {
		n, err := w.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, 2, n)
	}
	require.Equal(t, "abcd… (2 more bytes not kept)", w.String())
}
