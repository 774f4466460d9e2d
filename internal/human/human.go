// Package human writes quantities as the reports and pages write them to
// a person, so that an SLO reads the same on the landing page as in a
// report: "2 s", "100 ms", "5m0s", never "2000.0 ms".
package human

import (
	"fmt"
	"math"
	"time"
)

// Seconds writes s seconds to three significant figures: "850 ms" under
// a second, "2 s" and "12.5 s" under a minute, "5m0s" (to the second)
// above; "-" for NaN or an infinity.
func Seconds(s float64) string {
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0):
		return "-"
	case s < 1:
		return fmt.Sprintf("%.3g ms", 1e3*s)
	case s < 60:
		return fmt.Sprintf("%.3g s", s)
	}
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// Duration is Seconds of d.
func Duration(d time.Duration) string { return Seconds(d.Seconds()) }

// SignedPercent writes a change as a signed percentage: "+100%", "-21%";
// under one percent to a tenth, so that a small fall is not "-0%":
// "-0.3%", and no change "0%".
func SignedPercent(x float64) string {
	p := 100 * x
	switch {
	case math.Round(10*p) == 0:
		return "0%"
	case math.Abs(p) < 1:
		return fmt.Sprintf("%+.1f%%", p)
	}
	return fmt.Sprintf("%+.0f%%", p)
}
