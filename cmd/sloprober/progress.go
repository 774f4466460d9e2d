package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sloprober/sloprober/capacity"
)

// progressWidth bounds the updating line where the terminal's width is
// not known: one wider than the terminal wraps, and a carriage return
// then rewrites only its last row.
const progressWidth = 79

// progress shows a running test's progress: on a terminal one line,
// rewritten every second with the elapsed time and the estimate left; to
// a pipe or a file (a CI log), a plain line a level.
type progress struct {
	w     io.Writer
	tty   bool
	width func() int // the terminal's columns, 0 when not known

	mu       sync.Mutex
	last     *capacity.Progress
	received time.Time
	shown    bool // a line is on the terminal, not yet ended
	stop     chan struct{}
	done     chan struct{}
}

// isTerminal reports whether w is a character device (a terminal) and
// TERM does not say it cannot move the cursor.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	_, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ) // a terminal answers; /dev/null does not
	return err == nil
}

// terminalWidth returns w's columns, 0 when w is no terminal.
func terminalWidth(w io.Writer) func() int {
	return func() int {
		f, ok := w.(*os.File)
		if !ok {
			return 0
		}
		ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			return 0
		}
		return int(ws.Col)
	}
}

func newProgress(w io.Writer, tty bool) *progress {
	p := &progress{w: w, tty: tty, width: terminalWidth(w), stop: make(chan struct{}), done: make(chan struct{})}
	if !tty {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				p.mu.Lock()
				p.redraw()
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// update shows a level's start.
func (p *progress) update(pr capacity.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, progressLine(pr))
		return
	}
	p.last, p.received = &pr, time.Now()
	p.redraw()
}

// println writes a line of its own, above the updating line.
func (p *progress) println(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintln(p.w, line)
	p.redraw()
}

// Write writes log lines above the updating line, which is redrawn
// under them: a log line written over it would break it in two.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	n, err := p.w.Write(b)
	p.redraw()
	return n, err
}

// redraw rewrites the updating line, its times moved on by the time since
// the level started. p.mu is held.
func (p *progress) redraw() {
	if !p.tty || p.last == nil {
		return
	}
	pr := *p.last
	since := time.Since(p.received)
	pr.Elapsed += since
	pr.Remaining, pr.RemainingMax = max(0, pr.Remaining-since), max(0, pr.RemainingMax-since)
	width := progressWidth
	if cols := p.width(); cols > 1 {
		width = cols - 1 // the last column would wrap on some terminals
	}
	fmt.Fprint(p.w, "\r\x1b[K"+fitLine(pr, width))
	p.shown = true
}

// fitLine is progressLine within width columns: where it is wider, the
// last goodput goes first, then the elapsed time, then the level's words
// ("7/~11 verify, ..."); the time left stays whole ("about 2m10s left (up
// to 22m)"), and only a line still too wide is cut, with an ellipsis.
func fitLine(p capacity.Progress, width int) string {
	level, left := levelText(p), p.RemainingText()
	short := fmt.Sprintf("%d/~%d %s", p.Level, p.Levels, p.Stage)
	for _, line := range []string{
		progressLine(p),
		level + "; " + elapsedText(p),
		level + "; " + left,
		short + ", " + p.LoadName() + "; " + left,
		short + "; " + left,
	} {
		if utf8.RuneCountInString(line) <= width {
			return line
		}
	}
	if width < 1 {
		return ""
	}
	return string([]rune(short + "; " + left)[:width-1]) + "…"
}

// clear ends the updating line. p.mu is held.
func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// close stops the updates and clears the line, so that what follows
// starts at the beginning of a line.
func (p *progress) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	p.last = nil
}
