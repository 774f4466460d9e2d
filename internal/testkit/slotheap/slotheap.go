// Package slotheap is the queueing models' slots in the tests: when each
// of c servers is next free, a min-heap of float64 seconds. It is not
// container/heap, which boxes each float64 into an interface: an
// allocation an arrival, and the models draw millions (under -race, where
// an allocation costs most, the capacity studies took 15 times as long
// as without it).
package slotheap

// Heap is when each slot is next free, the earliest first.
type Heap []float64

// New is c slots free from t.
func New(c int, t float64) Heap {
	h := make(Heap, c)
	for i := range h {
		h[i] = t
	}
	return h
}

// Min is when the first slot is free.
func (h Heap) Min() float64 { return h[0] }

// ReplaceMin gives the first free slot its next free time x (no earlier
// than Min) and restores the heap: a FIFO queue's slot taking the next
// arrival.
func (h Heap) ReplaceMin(x float64) {
	i, n := 0, len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if h[c] >= x {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = x
}
