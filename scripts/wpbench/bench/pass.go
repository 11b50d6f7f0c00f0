package bench

import (
	"context"
	"strings"
)

// PassCompare is route latency with sweeps off and while full passes run back to back.
type PassCompare struct {
	Scopes int    `json:"scopes"`
	Off    *Phase `json:"sweeps_off"`
	// NoPass sweeps as usual (due and watch jobs) without the full pass, so On's
	// difference to it is the pass's alone.
	NoPass *Phase `json:"sweeps_without_pass"`
	On     *Phase `json:"full_passes"`
}

// passCompare measures the routing phase at PassSize scopes three times, each on a
// fresh setup: with every sweep off, with the due and watch jobs but no full pass, and
// with the full pass running back to back besides them.
func (c *ScaleConfig) passCompare(ctx context.Context) (*PassCompare, error) {
	pc := &PassCompare{Scopes: c.PassSize}
	runs := []struct {
		name  string
		flags []string
		into  **Phase
		// sweeps: the replica sweeps, so the setup's due work is awaited.
		sweeps bool
	}{
		{"sweeps-off", []string{"--sweep-interval", "1h"}, &pc.Off, false},
		{"no-full-pass", []string{"--reconcile-interval", "1h"}, &pc.NoPass, true},
		{"full-passes", []string{"--reconcile-interval", "1s"}, &pc.On, true},
	}
	for _, r := range runs {
		c.logf("S=%d, %s (%s)", c.PassSize, r.name, strings.Join(r.flags, " "))
		e, err := c.start(ctx, r.name, r.flags...)
		if err != nil {
			return nil, err
		}
		p := c.population("pass-", c.PassSize)
		err = c.setup(ctx, e, p, &Size{}, r.sweeps)
		if err == nil {
			*r.into, err = e.measure(ctx, r.name, 0, c.routing(e, p))
		}
		e.stop()
		if err != nil {
			return nil, err
		}
		c.logf("  %s", (*r.into).oneLine())
	}
	return pc, nil
}
