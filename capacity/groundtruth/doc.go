// Package groundtruth holds the step test's ground-truth tests: a
// simulator whose engine is an M/D/c queue, and a discrete-event model of
// that queue, written apart from the simulator, that says what the
// open-loop capacity is. They need the machine to themselves (the
// simulator runs in the test's process, and a starved simulator is a
// slower queue than the model's), so `make test` runs them on their own,
// after the other packages; `make bench-capacity` runs them 20 times.
package groundtruth
