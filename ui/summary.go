package ui

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/lua"
)

// PassTimeout bounds one pass over every scope. The pass runs for every request that
// waits for it, so it does not stop when the request that began it goes away.
const PassTimeout = 10 * time.Second

// summary is one pass over every scope: each scope's sizes, sorted by scope id, and
// their totals.
type summary struct {
	at     time.Time
	by     string
	rows   []lua.ScopeSummary
	totals Totals
}

func newSummary(p lua.SummaryPass) *summary {
	s := &summary{at: p.At, by: p.By, rows: p.Scopes}
	t := &s.totals
	t.Scopes = len(p.Scopes)
	for i := range p.Scopes {
		c := &p.Scopes[i]
		t.Pods += c.Pods
		t.Idle += c.Idle
		t.OldPods += c.OldPods
		t.MaxPods += c.MaxPods
		t.Sessions += c.Sessions
		t.Placeholders += c.Deploying
		t.Followers += c.Followers
		t.Waiters += c.Waiters
	}
	t.Busy = t.Pods - t.Idle
	return s
}

// summaries hands out the summary of every scope, read at most once per ttl by this
// replica: requests that find none fresh wait for one pass (the first of them runs
// it), and a pass another replica stored in Redis less than ttl ago is used instead of
// reading every scope again.
type summaries struct {
	store    *lua.Store
	clock    warmpool.Clock
	instance string
	ttl      time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	cur    *summary
	flight *pass
}

// pass is a pass in flight; done is closed when sum or err is set.
type pass struct {
	done chan struct{}
	sum  *summary
	err  error
}

// fresh reports whether a pass that began at at is less than ttl old.
func (s *summaries) fresh(at time.Time) bool {
	now := s.clock.Now()
	return !now.Before(at) && now.Sub(at) < s.ttl
}

// get returns a summary less than ttl old. Errors: STORE_UNAVAILABLE, and ctx's own
// when it ends first.
func (s *summaries) get(ctx context.Context) (*summary, error) {
	s.mu.Lock()
	if s.cur != nil && s.fresh(s.cur.at) {
		cur := s.cur
		s.mu.Unlock()
		return cur, nil
	}
	if f := s.flight; f != nil {
		s.mu.Unlock()
		select {
		case <-f.done:
			return f.sum, f.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f := &pass{done: make(chan struct{})}
	s.flight = f
	s.mu.Unlock()

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PassTimeout)
	f.sum, f.err = s.load(pctx)
	cancel()
	s.mu.Lock()
	if f.err == nil {
		s.cur = f.sum
	}
	s.flight = nil
	s.mu.Unlock()
	close(f.done)
	return f.sum, f.err
}

// load takes the pass another replica shared if it is fresh, else reads every scope
// and shares the pass for ttl. A pass that cannot be shared is still used.
func (s *summaries) load(ctx context.Context) (*summary, error) {
	shared, ok, err := s.store.SharedSummaries(ctx)
	if err != nil {
		return nil, err
	}
	if ok && s.fresh(shared.At) {
		return newSummary(shared), nil
	}
	p := lua.SummaryPass{At: s.clock.Now(), By: s.instance}
	if p.Scopes, err = s.store.ScopeSummaries(ctx); err != nil {
		return nil, err
	}
	if err := s.store.ShareSummaries(ctx, p, s.ttl); err != nil {
		s.log.WarnContext(ctx, "pool page summary not shared with the other replicas", "err", err)
	}
	return newSummary(p), nil
}
