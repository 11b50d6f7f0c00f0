package sweeper

import (
	"context"
	"time"
)

// SetPace makes the full pass of s time its steps with now and wait out its pace with
// wait.
func SetPace(s *Sweeper, now func() time.Time, wait func(ctx context.Context, d time.Duration) error) {
	s.paceNow, s.paceWait = now, wait
}

// Sleep is the full pass's wait between steps outside tests.
var Sleep = sleep

// ProbePeriodOf is the watch's probe period of a scope, and whether it has one.
func ProbePeriodOf(s *Sweeper, scope string) (time.Duration, bool) {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	p, ok := s.watch.periods[scope]
	return p, ok
}
