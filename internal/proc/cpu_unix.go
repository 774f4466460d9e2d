//go:build unix

package proc

import (
	"syscall"
	"time"
)

// CPU is the CPU time this process has used, user and system, from
// getrusage(2) (0 where there is none). Its growth over a window, divided
// by the window and GOMAXPROCS, is how busy the prober was: a prober near
// 100% adds its own delay to what it measures.
func CPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
