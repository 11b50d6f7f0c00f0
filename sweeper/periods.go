package sweeper

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// The probe periods of the scopes whose pods the watch has seen (pool.probe_period_s).

// setPeriod sets the probe period of a scope, as Redis serves its config now; the
// scope's pods are looked at again by the next run when it changed.
func (w *watchState) setPeriod(scope string, period time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setPeriodLocked(scope, period)
}

func (w *watchState) setPeriodLocked(scope string, period time.Duration) {
	shard := redisstore.DueShard(scope)
	delete(w.unread[shard], scope)
	if old, ok := w.periods[scope]; ok && old == period {
		return
	}
	w.periods[scope] = period
	w.view[shard].lookAgain(scope)
}

// forgetPeriod drops a deleted scope's probe period: a scope of that name created
// again has its own read.
func (w *watchState) forgetPeriod(scope string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.periods, scope)
	shard := redisstore.DueShard(scope)
	if len(w.view[shard].byScope[scope]) > 0 {
		w.unread[shard][scope] = true
	}
}

// unreadPeriods are the scopes of a shard's pods whose probe period is to be read.
func (w *watchState) unreadPeriods(shard int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.unread[shard]))
}

// addPeriods adds the periods read of scopes to those known, each unless a change
// set it meanwhile (which is newer); a scope Redis does not publish gets the default.
func (w *watchState) addPeriods(scopes []string, read map[string]time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range scopes {
		if _, ok := w.periods[id]; ok {
			delete(w.unread[redisstore.DueShard(id)], id)
			continue
		}
		period, ok := read[id]
		if !ok {
			period = warmpool.DefaultProbePeriodS * time.Second
		}
		w.setPeriodLocked(id, period)
	}
}

// period is the probe period of a scope: the default when it was not read. w.mu is
// held.
func (w *watchState) period(scope string) time.Duration {
	if p, ok := w.periods[scope]; ok {
		return p
	}
	return warmpool.DefaultProbePeriodS * time.Second
}

// readPeriods reads from Redis the probe periods of the scopes of a shard's pods that
// the watch sees for the first time. Redis not answering must not stop the watch: dead
// pods are still buried, and these scopes' pods probed at the default until the next
// run reads them.
func (s *Sweeper) readPeriods(ctx context.Context, shard int) {
	unknown := s.watch.unreadPeriods(shard)
	if len(unknown) == 0 {
		return
	}
	read, err := s.store.ProbePeriods(ctx, unknown)
	if err != nil {
		s.log.WarnContext(ctx, "watch: probe periods not read; the default for now", "scopes", len(unknown), "err", err)
		return
	}
	s.watch.addPeriods(unknown, read)
}
