package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// MaxShards bounds the shards of one configuration: at the 493 req/s one
// process sustains on 2 vCPUs (BENCHMARKS.md), 1,000 shards carry every
// rate global.max_rate allows.
const MaxShards = 1000

// Shard is one process's part of the configuration's canary loads: shard
// Index of Count sends the arrivals of every open-loop canary load whose
// hash (of the load and the arrival's Seq) falls to it, so Count processes
// together send each load's schedule exactly, every arrival once. Step
// and soak tests run on shard 0 only. The zero value is the whole load.
type Shard struct {
	Index, Count int
}

// Sharded reports whether the loads are split over several processes.
func (s Shard) Sharded() bool { return s.Count > 1 }

// Share is the part of each canary load this shard sends: 1/Count.
func (s Shard) Share() float64 {
	if s.Count > 1 {
		return 1 / float64(s.Count)
	}
	return 1
}

// String writes the shard as i/N.
func (s Shard) String() string {
	return strconv.Itoa(s.Index) + "/" + strconv.Itoa(max(s.Count, 1))
}

// ParseShard reads "i/N" (0 <= i < N <= MaxShards), or "ordinal/N": i is
// the number after the last "-" of hostname, a StatefulSet pod's ordinal
// (sloprober-2 is shard 2).
func ParseShard(s, hostname string) (Shard, error) {
	idx, count, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, fmt.Errorf("shard %q: must be i/N (e.g. 0/3) or ordinal/N", s)
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || n > MaxShards {
		return Shard{}, fmt.Errorf("shard %q: N must be between 1 and %d", s, MaxShards)
	}
	if idx == "ordinal" {
		// The host's ordinal is the part that is wrong, not i: a
		// StatefulSet of more replicas than N, or a host name that
		// ends otherwise.
		_, ord, found := cutLast(hostname, "-")
		i, err := strconv.Atoi(ord)
		switch {
		case !found || err != nil:
			return Shard{}, fmt.Errorf("shard %q: the host name %q does not end in -<ordinal>", s, hostname)
		case i < 0 || i >= n:
			return Shard{}, fmt.Errorf("shard %q: the host name %q has ordinal %d, not between 0 and %d: run at most %d replicas, or raise N", s, hostname, i, n-1, n)
		}
		return Shard{Index: i, Count: n}, nil
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("shard %q: i must be between 0 and %d", s, n-1)
	}
	return Shard{Index: i, Count: n}, nil
}

// Hostname is os.Hostname for ParseShard, "" when it fails.
func Hostname() string {
	h, _ := os.Hostname()
	return h
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
