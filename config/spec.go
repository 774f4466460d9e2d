package config

import (
	"fmt"
	"math"
	"time"
)

// Arrival processes of a LoadSpec. The first three are open loop: requests
// come at a rate, whatever the target answers. ArrivalReplay takes its
// arrivals from a trace. ArrivalClosed is closed loop: N clients, each
// sending its next request when its previous one ends (a step test's sweep).
const (
	ArrivalConstant = "constant"
	ArrivalPoisson  = "poisson"
	ArrivalGamma    = "gamma"
	ArrivalReplay   = "replay"
	ArrivalClosed   = "closed"
)

// LoadSpec is one load, resolved: everything the prober needs to run it,
// whoever asks for it. The configuration resolves each canary entry into
// one (CanaryLoads); a step or soak test will make its own. Two specs with
// the same labels describe the same load: the prober changes a running load
// in place when only its rate (open loop) or clients (closed loop) differ.
type LoadSpec struct {
	Target TargetConfig
	// Scenarios are the load's scenarios, one label set each; more than
	// one make a mix, each arrival drawn by weight.
	Scenarios []ScenarioSpec
	// Arrival is one of the Arrival constants.
	Arrival string
	// Rate is the intended request rate of the whole load, req/s, later
	// conversation turns included (open loop; for a replay, the trace's
	// mean rate times its speed).
	Rate float64
	// Burstiness is the gamma shape (ArrivalGamma).
	Burstiness float64
	// Replay is the trace of an ArrivalReplay load.
	Replay *ReplayConfig
	// Clients is the number of closed-loop clients (ArrivalClosed); it
	// is also the load's cap on requests in flight.
	Clients int
	// ThinkTime is how long a closed-loop client waits after a reply
	// before it sends its next request.
	ThinkTime time.Duration
	// MaxRate caps the request rate of a closed-loop load, req/s: against
	// a target that fails fast, N clients would otherwise send thousands
	// of requests a second. It counts against global.max_rate.
	MaxRate float64
	// Paused is a load that sends nothing but keeps its series.
	Paused bool
	// Shard is this process's part of an open-loop load (the canary's,
	// when sloprober runs as several shards): its arrivals are those of
	// the whole schedule that fall to it, and its rates (ScenarioRates,
	// PeakRate) its share.
	Shard Shard
	// HotTenant, when set, makes one tenant of the scenarios with tenants
	// send Factor times its share (see HotTenant: the caller raises Rate
	// by HotRateFactor). It changes in place, as the rate does.
	HotTenant *HotTenant
	// ColdCache salts every prompt with a fresh draw, so that no prompt
	// shares a prefix with another request of this load or of any earlier
	// run: prefix groups and trace blocks become per-request text of the
	// same length (a conversation's later turns still resend their own
	// history). It changes in place, as the rate does.
	ColdCache bool
}

// ScenarioSpec is one scenario of a load with its labels and weight.
type ScenarioSpec struct {
	ScenarioConfig
	Key    Key
	Weight float64
}

// Closed reports whether the load is closed loop.
func (s *LoadSpec) Closed() bool { return s.Arrival == ArrivalClosed }

// Keys returns the label sets of the load, in the order of Scenarios.
func (s *LoadSpec) Keys() []Key {
	keys := make([]Key, len(s.Scenarios))
	for i, sc := range s.Scenarios {
		keys[i] = sc.Key
	}
	return keys
}

// ScenarioRates splits the load's intended rate over its scenarios by
// weight, in the order of Scenarios: a mix of 3 req/s weighted 2:1 is 2 and
// 1 req/s; on shard i/3, a third of that. A closed-loop load has no
// intended rate: all zero.
func (s *LoadSpec) ScenarioRates() []float64 {
	rates := make([]float64, len(s.Scenarios))
	if s.Closed() || s.Paused {
		return rates
	}
	sum := 0.0
	for _, sc := range s.Scenarios {
		sum += sc.Weight
	}
	for i, sc := range s.Scenarios {
		rates[i] = s.Rate * s.Shard.Share() * sc.Weight / sum
	}
	return rates
}

// ScenarioClients splits the clients of a closed-loop load over its
// scenarios by weight, in the order of Scenarios, as ScenarioRates splits
// a rate: 10 clients of a mix weighted 3:2 are 6 and 4. Open-loop and
// paused loads have none: all zero.
func (s *LoadSpec) ScenarioClients() []float64 {
	clients := make([]float64, len(s.Scenarios))
	if !s.Closed() || s.Paused {
		return clients
	}
	sum := 0.0
	for _, sc := range s.Scenarios {
		sum += sc.Weight
	}
	for i, sc := range s.Scenarios {
		clients[i] = float64(s.Clients) * sc.Weight / sum
	}
	return clients
}

// PeakRate is the most requests a second the load may send: its rate (its
// shard's share), or the cap of a closed-loop load; 0 while paused. It is
// what counts against global.max_rate, which caps each process.
func (s *LoadSpec) PeakRate() float64 {
	switch {
	case s.Paused:
		return 0
	case s.Closed():
		return s.MaxRate
	}
	return s.Rate * s.Shard.Share()
}

// MaxInFlight is the load's cap on requests in flight: its target's
// max_in_flight, or its clients.
func (s *LoadSpec) MaxInFlight() int {
	if s.Closed() {
		return s.Clients
	}
	return s.Target.MaxInFlight
}

// Validate checks what a spec built in code (not from a file, which
// Config.Validate checks) must satisfy to run: the bounds of the
// configuration, with errors naming the load and the field.
func (s *LoadSpec) Validate() error {
	name := s.Name()
	switch {
	case len(s.Scenarios) == 0:
		return fmt.Errorf("load %s: no scenarios", name)
	case s.Target.Name == "":
		return fmt.Errorf("load %s: no target", name)
	}
	for _, sc := range s.Scenarios {
		if !(sc.Weight > 0) || math.IsInf(sc.Weight, 0) {
			return fmt.Errorf("load %s: scenario %s: weight must be positive, got %g", name, sc.Key.Scenario, sc.Weight)
		}
		if sc.Key.Target != s.Target.Name {
			return fmt.Errorf("load %s: scenario %s has target label %q, not the load's target %q", name, sc.Key.Scenario, sc.Key.Target, s.Target.Name)
		}
	}
	switch s.Arrival {
	case ArrivalConstant, ArrivalPoisson, ArrivalGamma:
		if !(s.Rate >= MinLoadRate && s.Rate <= MaxLoadRate) {
			return fmt.Errorf("load %s: rate must be between %g and %d req/s, got %g", name, MinLoadRate, MaxLoadRate, s.Rate)
		}
		if s.Arrival == ArrivalGamma && !(s.Burstiness >= MinBurstiness && s.Burstiness <= MaxBurstiness) {
			return fmt.Errorf("load %s: burstiness must be between %g and %d, got %g", name, MinBurstiness, MaxBurstiness, s.Burstiness)
		}
	case ArrivalReplay:
		if s.Replay == nil || s.Replay.Trace == nil || len(s.Scenarios) != 1 {
			return fmt.Errorf("load %s: a replay needs a read trace and one scenario", name)
		}
		if !(s.Rate > 0 && s.Rate <= MaxLoadRate) {
			return fmt.Errorf("load %s: the replay's rate must be positive and at most %d req/s, got %g", name, MaxLoadRate, s.Rate)
		}
	case ArrivalClosed:
		if s.Clients < 0 || s.Clients > MaxInFlightLimit {
			return fmt.Errorf("load %s: clients must be between 0 and %d, got %d", name, MaxInFlightLimit, s.Clients)
		}
		if !(s.MaxRate >= MinLoadRate && s.MaxRate <= MaxLoadRate) {
			return fmt.Errorf("load %s: a closed-loop load's max rate must be between %g and %d req/s, got %g", name, MinLoadRate, MaxLoadRate, s.MaxRate)
		}
		if s.ThinkTime < 0 {
			return fmt.Errorf("load %s: think time must not be negative, got %s", name, s.ThinkTime)
		}
	default:
		return fmt.Errorf("load %s: arrival must be constant, poisson, gamma, replay or closed, got %q", name, s.Arrival)
	}
	return nil
}

// Name identifies a load in logs and errors: its label sets joined by +.
func (s *LoadSpec) Name() string {
	name := ""
	for i, sc := range s.Scenarios {
		if i > 0 {
			name += "+"
		}
		name += sc.Key.String()
	}
	return name
}

// CanaryLoads returns the canary entries of a validated configuration,
// resolved into load specs (with test="canary"), in the file's order.
func (c *Config) CanaryLoads() []LoadSpec {
	specs := make([]LoadSpec, 0, len(c.Canary))
	for _, l := range c.Canary {
		spec := LoadSpec{
			Target:     *c.Target(l.Target),
			Arrival:    l.Process(),
			Rate:       c.LoadRate(l),
			Burstiness: l.Shape(),
			Paused:     !l.IsEnabled(),
		}
		if spec.Arrival != ArrivalGamma {
			spec.Burstiness = 0
		}
		if l.Replay != nil {
			spec.Arrival, spec.Burstiness = ArrivalReplay, 0
			r := *l.Replay
			spec.Replay = &r
		}
		names, weights := l.Scenarios()
		spec.Scenarios = c.scenarioSpecs(l.Target, CanaryTest, names, weights)
		specs = append(specs, spec)
	}
	return specs
}

// scenarioSpecs returns the named scenarios of a load on target with
// test label test, with their weights.
func (c *Config) scenarioSpecs(target, test string, names []string, weights []float64) []ScenarioSpec {
	out := make([]ScenarioSpec, len(names))
	for i, name := range names {
		out[i] = ScenarioSpec{ScenarioConfig: *c.Scenario(name), Key: Key{Target: target, Scenario: name, Test: test}, Weight: weights[i]}
	}
	return out
}
