// Package await is the one polling helper of the tests: wait until a condition holds,
// fail the test when it does not in time. The poll interval is not synchronisation:
// the condition says what the test waits for.
package await

import (
	"testing"
	"time"
)

// Poll is how often True asks its condition.
const Poll = 20 * time.Millisecond

// True asks cond every Poll until it holds, and fails the test (naming what was awaited)
// when it still does not after within.
func True(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(Poll)
	}
}
