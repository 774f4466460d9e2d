package prober

import (
	"slices"
	"sync"
)

// checkExtra learns the tokens a scenario's quality check adds to a prompt
// by design: its question, in a message of its own, and what the server's
// chat template makes of the schema or the tool definitions (a tool_call
// check's tools doubled a 300-token prompt: +104%). It is measured with the
// same calibration as the filler: each reply's counted prompt less the
// calibrated count of the filler words. The filler is then shortened so
// that filler and additions make the requested length, and the requested
// length is what the server's count is judged against.
//
// The estimate is the median of the last checkExtraWindow additions, so a
// server's odd count moves it by one rank, not by its size; additions
// outside [0, maxCheckExtra] are not taken (a server's count is not
// trusted).
type checkExtra struct {
	mu   sync.Mutex
	seen []int // the last checkExtraWindow additions, oldest first
}

const (
	checkExtraWindow = 15
	// maxCheckExtra bounds an addition: 64k tokens of schema or tools is
	// beyond any template.
	maxCheckExtra = 1 << 16
)

// observe records the prompt tokens counted for a request whose filler was
// fillerTokens by the calibration.
func (e *checkExtra) observe(counted, fillerTokens int) {
	extra := counted - fillerTokens
	if extra < 0 || extra > maxCheckExtra {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) == checkExtraWindow {
		e.seen = e.seen[1:]
	}
	e.seen = append(e.seen, extra)
}

// tokens returns the estimated addition and whether one was measured.
func (e *checkExtra) tokens() (int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) == 0 {
		return 0, false
	}
	s := slices.Sorted(slices.Values(e.seen))
	return s[len(s)/2], true
}
