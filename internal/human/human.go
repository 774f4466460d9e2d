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
