package runstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/sloprober/sloprober/config"
)

// ID identifies a stored run: "<test>-<start>-<random>", the start in UTC
// to the millisecond as 20060102T150405.000Z and 8 random hex digits, e.g.
// "nightly-20250314T020000.000Z-9f86d081". The runs of one test sort by
// start as their IDs sort. The run's file is "<id>.json".
type ID string

// idTimeLayout is the start in an ID: fixed width, so that IDs sort by it.
const idTimeLayout = "20060102T150405.000Z"

// idPattern is an ID: a test name (a label value, config.MaxNameBytes at
// most), the start, the random part. Nothing in it can be a path
// separator, and its only dot is inside the start: an ID is one plain
// file name, never "." or "..".
var idPattern = regexp.MustCompile(fmt.Sprintf(
	`^([a-zA-Z0-9_-]{1,%d})-([0-9]{8}T[0-9]{6}\.[0-9]{3}Z)-([0-9a-f]{8})$`, config.MaxNameBytes))

var testPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// ErrInvalidID: a string that is not a run ID (a client's typo, or an
// attempt at a path outside the store).
var ErrInvalidID = errors.New("invalid run ID")

// ParseID checks that s is a run ID.
func ParseID(s string) (ID, error) {
	_, _, err := parseID(s)
	if err != nil {
		return "", err
	}
	return ID(s), nil
}

// parseID returns the test and start of an ID.
func parseID(s string) (string, time.Time, error) {
	m := idPattern.FindStringSubmatch(s)
	if m == nil {
		return "", time.Time{}, fmt.Errorf("%w %q: want <test>-<%s>-<8 hex digits>", ErrInvalidID, clip(s), idTimeLayout)
	}
	start, err := time.Parse(idTimeLayout, m[2])
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w %q: %w", ErrInvalidID, clip(s), err)
	}
	return m[1], start, nil
}

// checkTest checks a test name for use in an ID and a file name: a label
// value of config.MaxNameBytes at most, as the configuration has it.
func checkTest(test string) error {
	if !testPattern.MatchString(test) {
		return fmt.Errorf("test name %q: must match [a-zA-Z0-9_-]+", clip(test))
	}
	if len(test) > config.MaxNameBytes {
		return fmt.Errorf("test name %q: must be at most %d bytes, got %d", clip(test), config.MaxNameBytes, len(test))
	}
	return nil
}

// newID makes the ID of a run of test started at start.
func newID(test string, start time.Time) (ID, error) {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id := fmt.Sprintf("%s-%s-%s", test, start.UTC().Format(idTimeLayout), hex.EncodeToString(b[:]))
	if _, _, err := parseID(id); err != nil {
		// A start before year 0 or after 9999.
		return "", fmt.Errorf("run start %s: out of range", start)
	}
	return ID(id), nil
}

// clip shortens a string from outside for an error message.
func clip(s string) string {
	const n = 100
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
