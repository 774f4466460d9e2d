package config

// Step test profiles: the step test `sloprober init --target URL` writes
// and `sloprober test run --target URL` runs, by its --profile. The
// capacity benchmarks (capacity/groundtruth) run them as written.
const (
	// ProfileFirstLook is a first look: 20 s windows, a level up to 60
	// s, two open-loop rates and two bisections; minutes.
	ProfileFirstLook = "first-look"
	// ProfileSign is a number to sign: 2-minute windows, a level up to 6
	// minutes, the open-loop search's up to 12 (next to the objective a
	// level's misses come in bunches: at 0.85 of the capacity, 6 minutes
	// decide "met" about half the time, 12 minutes nine times in ten),
	// the sweep refined twice, the search to 3% of the closed-loop rate
	// within an hour (verify.max_duration: the test's length is known
	// before it starts); about 1h10m.
	ProfileSign = "sign"
)

// Profiles lists the step test profiles, the default first.
var Profiles = []string{ProfileFirstLook, ProfileSign}

// StepProfile is a profile's test keys, as YAML lines indented for a
// test in a list (after its name, kind, target and scenario); "" for an
// unknown profile.
func StepProfile(profile string) string {
	switch profile {
	case ProfileFirstLook:
		return `    baseline: {requests: 10}
    sweep: {concurrency: [2, 4, 8, 16, 32], refine: 0}
    window: {warmup: 5s, steady: 20s, max_steady: 60s, min_requests: 50}
    verify: {rates: [0.6, 0.8], max_levels: 4}
`
	case ProfileSign:
		return `    baseline: {requests: 20}
    sweep: {concurrency: [1, 2, 4, 8, 16, 32, 64], refine: 2}
    window: {warmup: 30s, steady: 2m, max_steady: 6m}
    verify: {rates: [0.5, 0.8], resolution: 0.03, max_levels: 8, max_steady: 12m, max_duration: 1h}
`
	}
	return ""
}

// ProfileMaxInFlight is the max_in_flight a profile's target is written
// with: twice its sweep's most clients, at least the default (64). An
// open-loop level near the capacity holds more requests at times than
// the closed loop at its knee: 32 slots of 0.157 s at 186 req/s held 64
// in flight now and then (a queue of 32 behind them), and a level whose
// arrivals were dropped at the cap verifies no rate, however it attained
// (98.9% [96.0, 99.8] of 60,093 with 118 dropped).
func ProfileMaxInFlight(profile string) int {
	most := 0
	switch profile {
	case ProfileFirstLook:
		most = 32
	case ProfileSign:
		most = 64
	}
	return max(2*most, DefaultTargetConfig.MaxInFlight)
}
