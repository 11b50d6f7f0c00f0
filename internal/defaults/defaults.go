// Package defaults fills what a part's Config leaves out, the same way in every part:
// a number or duration that is zero (or negative) takes its named default, a nil clock
// is the wall clock, a nil logger discards, a nil observer hears nothing.
package defaults

import (
	"log/slog"

	"github.com/warmpool/warmpool"
)

// Positive sets *v to def unless *v is above zero.
func Positive[T ~int | ~int64 | ~float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Clock returns c, or the wall clock when c is nil.
func Clock(c warmpool.Clock) warmpool.Clock {
	if c == nil {
		return warmpool.SystemClock{}
	}
	return c
}

// Logger returns l, or a logger that discards everything when l is nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// Observer returns f, or one that ignores what it is told when f is nil.
func Observer(f func(event, outcome string)) func(event, outcome string) {
	if f == nil {
		return func(string, string) {}
	}
	return f
}
