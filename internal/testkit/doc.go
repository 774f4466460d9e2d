// Package testkit holds what only the tests use, each in a package of its
// own: hostile (servers that lie and misbehave, against which the prober
// is tested as it is against the simulator), browser (a page rendered in
// a real headless Chromium), jaegertest (a real Jaeger on loopback for
// the tracing tests), cpuburn (a CPU burner beside `make test-busy`), freeport
// (loopback addresses for the processes a test starts, never one twice),
// rrproxy (a round-robin gateway over simulator replicas, for the soak's
// replica-failure tests) and readertest (the prober's reader a test run
// uses). No package of the program imports them.
package testkit
