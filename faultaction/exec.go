package faultaction

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// maxExecOutput bounds the output (stdout and stderr together) an exec
// action keeps: 960 bytes show a command's message and error, with room
// in MaxResultBytes to say how much more came; a command printing 1 GiB
// costs the prober a kilobyte, not 1 GiB.
const maxExecOutput = MaxResultBytes - 64

// execWaitDelay is how long, after the command is killed (or exits),
// Wait waits for its output pipes to close: a child it started that keeps
// them open (a daemon it forked) does not hang the step.
const execWaitDelay = time.Second

// doExec runs argv without a shell, killed when d passes or ctx ends.
func doExec(ctx context.Context, argv []string, d time.Duration) (result, error) {
	ctx, cancel := bounded(ctx, d)
	defer cancel()
	shown := describeArgv(argv)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out := &boundedBuffer{max: maxExecOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = execWaitDelay
	var killed string
	inGroup(cmd, &killed)
	err := cmd.Run()
	left := leftInGroup(cmd)
	res := result{text: out.String()}
	if left != "" {
		// The command ended, what it started did not: it could act
		// later, unrecorded. Killed, and the step is not in place.
		if err == nil || errors.Is(err, exec.ErrWaitDelay) {
			return res, fmt.Errorf("%s: ended, leaving processes running in its group: %s", shown, left)
		}
		return res, fmt.Errorf("%s: %w, leaving processes running in its group: %s", shown, err, left)
	}
	if err == nil {
		if res.text == "" {
			res.text = "exit status 0"
		}
		return res, nil
	}
	if ctx.Err() != nil {
		// The command was killed: say why, not only "signal: killed",
		// and what (the processes it started too).
		if killed != "" {
			return res, fmt.Errorf("%s: %w (%v): %s", shown, err, context.Cause(ctx), killed)
		}
		return res, fmt.Errorf("%s: %w (%v)", shown, err, context.Cause(ctx))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return res, fmt.Errorf("%s: %w", shown, err)
	}
	return res, fmt.Errorf("%s: could not run: %w", shown, err)
}

// boundedBuffer keeps the first max bytes written to it and counts the
// rest; writes never fail (a command is not killed by SIGPIPE for
// talking too much).
type boundedBuffer struct {
	mu      sync.Mutex
	max     int
	b       []byte
	dropped int
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(len(p), w.max-len(w.b))
	w.b = append(w.b, p[:n]...)
	w.dropped += len(p) - n
	return len(p), nil
}

func (w *boundedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(w.b), "\uFFFD"))
	if w.dropped > 0 {
		s += fmt.Sprintf("… (%d more bytes not kept)", w.dropped)
	}
	return s
}
