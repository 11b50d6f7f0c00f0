package sweeper

import (
	"context"
	"time"
)

// pacer keeps a full pass to its duty cycle: after each step (one scope's work) it
// waits until the pass has worked at most duty of the wall time since the previous
// wait, so the pass takes at most that share of a core and of Redis however fast the
// machine is, and the routes get the rest. A nil pacer, or a duty of 1 or more, never
// waits.
type pacer struct {
	duty float64
	now  func() time.Time
	wait func(ctx context.Context, d time.Duration) error
	// since is when the last wait ended: the time after it is work.
	since time.Time
}

// newPacer starts pacing a full pass now.
func (s *Sweeper) newPacer() *pacer {
	return &pacer{duty: s.cfg.PassDuty, now: s.paceNow, wait: s.paceWait, since: s.paceNow()}
}

// step waits out the step that just ended: (1-duty)/duty times as long as it worked.
// It returns ctx's error when ctx ends first.
func (p *pacer) step(ctx context.Context) error {
	if p == nil || p.duty >= 1 {
		return nil
	}
	worked := p.now().Sub(p.since)
	if err := p.wait(ctx, time.Duration(float64(worked)*(1-p.duty)/p.duty)); err != nil {
		return err
	}
	p.since = p.now()
	return nil
}

// flatOut stops the pacing for the rest of the pass.
func (p *pacer) flatOut() {
	if p != nil {
		p.duty = 1
	}
}

// sleep waits for d, or less when ctx ends first; it returns ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
