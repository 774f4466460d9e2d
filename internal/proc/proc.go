// Package proc reads what the prober needs to know of its own process.
package proc

import (
	"os"
	"strconv"
	"strings"
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
