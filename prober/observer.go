package prober

import (
	"time"

	"github.com/sloprober/sloprober/config"
)

// Observer receives what happens to the arrivals and requests of one label
// set. Its methods are called concurrently.
type Observer interface {
	// Scheduled: an arrival fell due.
	Scheduled()
	// Dropped: a due arrival was not sent.
	Dropped(DropReason)
	// Sent: a request that took an in-flight slot started at t0, lag
	// (t0 - ts) after its due time. It is called once per sent request
	// when its HTTP call starts, so a request that never ends has its lag
	// counted too; t0 is the Result's Sent, so that an observer can tell
	// the requests it has seen start from those it has seen end. A
	// closed-loop request is due when it is sent: its lag is 0.
	Sent(t0 time.Time, lag time.Duration)
	// Finished: a sent request ended; r is complete and no longer changes,
	// and m is its measurement under the load's SLOs, computed once for
	// every observer.
	Finished(r *Result, m *Measurement)
}

// ObserverFactory creates the observers of loads: the Prometheus metrics,
// the landing page's recent results, a test run's recorder. The manager
// calls it under its lock, never concurrently.
type ObserverFactory interface {
	// Observe creates the series of a load, at zero, and returns their observer.
	Observe(LoadInfo) Observer
	// Update tells that a running load changed in place: its rate (open
	// loop) or its clients (closed loop). Its counters go on.
	Update(LoadInfo)
	// Forget deletes the series of a load once it has stopped.
	Forget(LoadInfo)
}

// CalibrationObserver is implemented by an ObserverFactory that exports the
// state of each target's prompt calibration (see Calibrator). The manager
// calls it from request goroutines, concurrently.
type CalibrationObserver interface {
	// CalibrationFrozen reports whether a target's calibration has stopped
	// adapting because the server's prompt token counts cannot be followed
	// (sloprober_calibration_frozen).
	CalibrationFrozen(target string, frozen bool)
	// CalibrationRejected counts one observation of a target that
	// calibration refused (sloprober_calibration_rejected_total).
	CalibrationRejected(target string)
}

// LoadInfo describes a load: its labels and what it is configured to do.
type LoadInfo struct {
	config.Key
	// Rate is the intended arrival rate, req/s; 0 while the load is
	// paused, and for a closed-loop load.
	Rate float64
	// Clients are the clients of a closed-loop load, split over a mix by
	// weight like Rate; 0 for an open-loop load.
	Clients float64
	// Arrival is the arrival process: constant, poisson, gamma, replay or
	// closed.
	Arrival   string
	SLOs      []config.SLO
	Objective float64
}

// Fanout returns a factory whose observers hand every event to one
// observer of each factory, in order: cmd composes the Prometheus metrics
// with the landing page's recent results this way, and a test run adds its
// recorder. Calibration reports go to the factories that take them.
func Fanout(factories ...ObserverFactory) ObserverFactory {
	if len(factories) == 1 {
		return factories[0]
	}
	return fanout(factories)
}

type fanout []ObserverFactory

var _ CalibrationObserver = fanout(nil)

func (f fanout) Observe(info LoadInfo) Observer {
	obs := make(observers, len(f))
	for i, factory := range f {
		obs[i] = factory.Observe(info)
	}
	return obs
}

func (f fanout) Update(info LoadInfo) {
	for _, factory := range f {
		factory.Update(info)
	}
}

func (f fanout) Forget(info LoadInfo) {
	for _, factory := range f {
		factory.Forget(info)
	}
}

func (f fanout) CalibrationFrozen(target string, frozen bool) {
	for _, factory := range f {
		if c, ok := factory.(CalibrationObserver); ok {
			c.CalibrationFrozen(target, frozen)
		}
	}
}

func (f fanout) CalibrationRejected(target string) {
	for _, factory := range f {
		if c, ok := factory.(CalibrationObserver); ok {
			c.CalibrationRejected(target)
		}
	}
}

// observers is the observer of a fanout.
type observers []Observer

func (o observers) Scheduled() {
	for _, obs := range o {
		obs.Scheduled()
	}
}

func (o observers) Dropped(r DropReason) {
	for _, obs := range o {
		obs.Dropped(r)
	}
}

func (o observers) Sent(t0 time.Time, lag time.Duration) {
	for _, obs := range o {
		obs.Sent(t0, lag)
	}
}

func (o observers) Finished(r *Result, m *Measurement) {
	for _, obs := range o {
		obs.Finished(r, m)
	}
}
