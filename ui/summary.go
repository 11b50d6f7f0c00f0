package ui

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// ListAge is the oldest pass GET /v1/scopes answers from: callers that page
// through every scope (a gateway, the CLI) cost Redis one pass every ListAge across
// the replicas, where the pool page's refresh asks for one every Refresh while a page
// is open.
const ListAge = 5 * Refresh

// shareKeep is how long the pass a replica shares stays in Redis: long enough for
// the oldest a caller takes while another replica makes the next (ListAge +
// Refresh; each reader checks its age, SummaryPass.At, against its clock), and it
// goes by itself a while after the last caller.
const shareKeep = ListAge + Refresh

// PassTimeout bounds one pass over every scope. The pass runs for every request that
// waits for it, so it does not stop when the request that began it goes away.
const PassTimeout = 10 * time.Second

// summary is one pass over every scope: when it ended, by which replica, each
// scope's sizes sorted by scope id, and their totals.
type summary struct {
	at     time.Time
	by     string
	rows   []warmpool.ScopeSummary
	totals Totals
}

func newSummary(p redisstore.SummaryPass) *summary {
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
// reading every scope again (or one less than two ttl ago while another replica
// reads: PassLock).
type summaries struct {
	store    Pools
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

// fresh reports whether a pass that ended at at is less than within old.
func (s *summaries) fresh(at time.Time, within time.Duration) bool {
	now := s.clock.Now()
	return !now.Before(at) && now.Sub(at) < within
}

// get returns a summary less than within old (the pool page asks for one less than
// ttl old, GET /v1/scopes for one less than ListAge). A caller that waited for a pass
// another began and got one older than it takes (a shared pass its starter took)
// makes its own. Errors: STORE_UNAVAILABLE, and ctx's own when it ends first.
func (s *summaries) get(ctx context.Context, within time.Duration) (*summary, error) {
	for {
		s.mu.Lock()
		if s.cur != nil && s.fresh(s.cur.at, within) {
			cur := s.cur
			s.mu.Unlock()
			return cur, nil
		}
		f := s.flight
		if f == nil {
			break
		}
		s.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil || s.fresh(f.sum.at, within) {
			return f.sum, f.err
		}
	}
	f := &pass{done: make(chan struct{})}
	s.flight = f
	s.mu.Unlock()

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PassTimeout)
	f.sum, f.err = s.load(pctx, within)
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

// PassLock is the name of the lease lock (redisstore.Keyspace.Lock) a replica holds while
// it reads every scope for the others: one that finds it taken serves the last pass
// shared, if it is at most a Refresh older than the caller takes, instead of reading
// every scope at the same time. Without it, pages on two replicas that ask about as often as a pass stays
// fresh fall into step, and each replica reads every scope for each of its pages.
const PassLock = "ui-summaries"

// load takes the pass another replica shared if it is less than within old, else
// reads every scope and shares the pass. A pass that cannot be shared is still used.
func (s *summaries) load(ctx context.Context, within time.Duration) (*summary, error) {
	shared, ok, err := s.store.SharedSummaries(ctx)
	if err != nil {
		return nil, err
	}
	if ok && s.fresh(shared.At, within) {
		return newSummary(shared), nil
	}
	lock, err := s.store.Obtain(ctx, s.store.Keys().Lock(PassLock), PassTimeout)
	switch {
	case errors.Is(err, warmpool.ErrNotObtained) && ok && s.fresh(shared.At, within+s.ttl):
		return newSummary(shared), nil
	case errors.Is(err, warmpool.ErrNotObtained):
		// Nothing recent to serve while the other replica reads: read as well.
	case err != nil:
		return nil, err
	default:
		defer func() {
			rctx, cancel := redisstore.CleanupContext(ctx)
			defer cancel()
			if err := lock.Release(rctx); err != nil {
				s.log.DebugContext(ctx, "pool page pass lock not released", "err", err)
			}
		}()
	}
	scopes, err := s.store.ScopeSummaries(ctx)
	if err != nil {
		return nil, err
	}
	// The pass's time is when it ended: what it read is that old at most, and a pass
	// of a few hundred milliseconds stays fresh for a whole Refresh once it can be
	// read, so that another replica whose page comes round a little later finds it.
	p := redisstore.SummaryPass{At: s.clock.Now(), By: s.instance, Scopes: scopes}
	if err := s.store.ShareSummaries(ctx, p, shareKeep); err != nil {
		s.log.WarnContext(ctx, "pool page summary not shared with the other replicas", "err", err)
	}
	return newSummary(p), nil
}
