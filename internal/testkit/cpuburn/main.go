// Command cpuburn holds every core busy until it is stopped: `make
// test-busy` runs `make test` beside it, so that the tests that check
// timing meet a machine as busy as a shared CI runner or a laptop
// building something else.
//
// It spins one goroutine per CPU (-cpus to change it) and exits on SIGTERM
// or SIGINT, after -max (a bound, should nothing stop it), or as soon as
// the process that started it is gone (it is then adopted by another
// parent), so that a killed make never leaves it running.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

func main() {
	cpus := flag.Int("cpus", runtime.NumCPU(), "busy goroutines (one per core by default)")
	most := flag.Duration("max", 3*time.Hour, "exit after this long whatever happens")
	flag.Parse()
	if *cpus < 1 {
		fmt.Fprintln(os.Stderr, "cpuburn: -cpus must be at least 1")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*cpus + 1) // the spinners and the watch below
	for range *cpus {
		go spin()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	parent := os.Getppid()
	tick := time.NewTicker(200 * time.Millisecond)
	deadline := time.After(*most)
	fmt.Fprintf(os.Stderr, "cpuburn: %d busy goroutines (pid %d)\n", *cpus, os.Getpid())
	for {
		select {
		case s := <-stop:
			fmt.Fprintf(os.Stderr, "cpuburn: %v, stopping\n", s)
			return
		case <-deadline:
			fmt.Fprintf(os.Stderr, "cpuburn: %v passed, stopping\n", *most)
			return
		case <-tick.C:
			if os.Getppid() != parent {
				fmt.Fprintln(os.Stderr, "cpuburn: the process that started it is gone, stopping")
				return
			}
		}
	}
}

// spin keeps one core busy. The loop has no call in it, but Go preempts
// it asynchronously, so the signal handling above still runs.
func spin() {
	x := uint64(1)
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 {
			fmt.Fprint(os.Stderr, "") // never: keeps x alive
		}
	}
}
