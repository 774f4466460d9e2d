// Package testkit holds what only the tests use, each in a package of its
// own: hostile (servers that lie and misbehave, against which the prober
// is tested as it is against the simulator), browser (a page rendered in
// a real headless Chromium) and jaegertest (a real Jaeger on loopback for
// the tracing tests). No package of the program imports them.
package testkit
