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
