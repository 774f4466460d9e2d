// Package proc reads what the prober needs to know of its own process.
package proc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RSS is this process's resident set size in bytes, from /proc/self/statm
// (0 where there is none).
func RSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

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
