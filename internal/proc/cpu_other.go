//go:build !unix

package proc

import "time"

// CPU is 0 where getrusage(2) does not exist: the prober's CPU share is
// then not known (and never marks a run as distorted).
func CPU() time.Duration { return 0 }
