package demoagent

import (
	"context"
	"errors"
	"time"

	"github.com/warmpool/warmpool/agent"
)

// reports is the demo agent's reporter, when warmpool told the pod where to report
// (agent.FromEnv): its sessions are its open SSE streams that name a session, sent
// with the session_tickets the streams brought.
type reports struct {
	r *agent.Reporter
	// gone receives agent.ErrGone when warmpool no longer knows the pod: the agent
	// exits.
	gone chan error
}

// startReports starts reporting the sessions of a in the background until ctx ends;
// with reports off it does nothing (a nil reporter, a gone that never receives).
func startReports(ctx context.Context, getenv func(string) string, a *Agent) *reports {
	rep := &reports{gone: make(chan error, 1)}
	cfg, ok := agent.FromEnv(getenv)
	if !ok {
		return rep
	}
	cfg.Sessions, cfg.Tickets = a.Sessions, a.Tickets
	rep.r = agent.New(cfg)
	a.SessionConfig = rep.r.SessionConfig
	go func() {
		if err := rep.r.Run(ctx); errors.Is(err, agent.ErrGone) {
			rep.gone <- err
		}
	}()
	return rep
}

// drain reports that the agent drains, and waits until its streams have closed,
// warmpool no longer knows the pod (it was deleted, or is being deleted), or grace
// has passed.
func (rep *reports) drain(a *Agent, grace time.Duration) {
	if rep.r == nil {
		return
	}
	rep.r.Drain()
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for a.Streams() > 0 {
		select {
		case err := <-rep.gone: // the pod is gone: the streams need not close first
			rep.gone <- err // for the agent's own wait, which ends it
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}
