package defaults

import (
	"log/slog"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
)

func TestPositive(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, time.Second}, {-time.Millisecond, time.Second}, {time.Millisecond, time.Millisecond},
	} {
		got := tc.in
		Positive(&got, time.Second)
		if got != tc.want {
			t.Errorf("Positive(%v, 1s) = %v, want %v", tc.in, got, tc.want)
		}
	}
	n := 0
	Positive(&n, 3)
	if n != 3 {
		t.Errorf("Positive(0, 3) = %d", n)
	}
}

type fixedClock struct{}

func (fixedClock) Now() time.Time { return time.Time{} }

func TestPartsKeepWhatIsGivenAndFillWhatIsNot(t *testing.T) {
	if _, ok := Clock(nil).(warmpool.SystemClock); !ok {
		t.Error("nil clock is not the wall clock")
	}
	if _, ok := Clock(fixedClock{}).(fixedClock); !ok {
		t.Error("a given clock was replaced")
	}
	if Logger(nil) == nil {
		t.Error("nil logger not filled")
	}
	if l := slog.Default(); Logger(l) != l {
		t.Error("a given logger was replaced")
	}
	Observer(nil)("event", "outcome")
	called := false
	Observer(func(string, string) { called = true })("event", "outcome")
	if !called {
		t.Error("a given observer was replaced")
	}
}
