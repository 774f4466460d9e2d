//go:build sloprober_burn

package main

import (
	"os"
	"strconv"
	"time"
)

// A test build (go build -tags sloprober_burn) starves itself on purpose:
// SLOPROBER_BURN=N goroutines spin for SLOPROBER_BURN_FOR (a Go duration),
// so that the end-to-end test of the measurement-validity signal starves a
// real sloprober the same way on any machine (with GOMAXPROCS=1, every
// other goroutine waits for the scheduler's 10 ms preemption of a
// spinner). Release builds have no such code.
func init() {
	n, _ := strconv.Atoi(os.Getenv("SLOPROBER_BURN"))
	d, err := time.ParseDuration(os.Getenv("SLOPROBER_BURN_FOR"))
	if n <= 0 || err != nil {
		return
	}
	end := time.Now().Add(d)
	for range n {
		go func() {
			for time.Now().Before(end) {
			}
		}()
	}
}
