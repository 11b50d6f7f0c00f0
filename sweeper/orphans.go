package sweeper

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// An orphan is a pod the driver has and Redis does not know. The watch (from the
// driver's pod events) and the full pass (from its list) find them; one decision
// (judgeOrphan) says what becomes of each, on the driver's list of a known time.

// podView is the driver's pods as one list had them, and when it was taken.
type podView struct {
	at      time.Time
	byScope map[string][]warmpool.Pod
	listed  map[string]bool
}

// listView lists the driver's pods with list and takes the time of the list.
func (s *Sweeper) listView(ctx context.Context, list func(context.Context) ([]warmpool.Pod, error)) (*podView, error) {
	pods, err := list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	v := &podView{at: s.clock.Now(), byScope: map[string][]warmpool.Pod{}, listed: make(map[string]bool, len(pods))}
	for _, p := range pods {
		v.listed[p.ID] = true
		v.byScope[p.ScopeID] = append(v.byScope[p.ScopeID], p)
	}
	return v, nil
}

// scopes are the scopes of v's pods, sorted.
func (v *podView) scopes() []string { return slices.Sorted(maps.Keys(v.byScope)) }

// maxViewAge is the age of the driver's list from which no pod is adopted. A pod
// reclaimed after the list (purged, then deleted from the driver) is still ready in
// it, and only its tombstone (redisstore.GoneTTL from the purge) keeps it from being adopted
// back: so the list must be younger than the tombstone, with half of it left for the
// delete to show in a list, and no older than the orphan grace.
func (s *Sweeper) maxViewAge() time.Duration { return min(redisstore.GoneTTL/2, s.cfg.OrphanGrace) }

// freshen lists the driver again when v is too old to adopt from (maxViewAge): the
// paced full pass visits its scopes over minutes.
func (s *Sweeper) freshen(ctx context.Context, v *podView) error {
	if s.clock.Now().Sub(v.at) < s.maxViewAge() {
		return nil
	}
	fresh, err := s.listView(ctx, s.driver.List)
	if err != nil {
		return err
	}
	*v = *fresh
	return nil
}

// inFlight reports whether a deploy lease with this fence is live: its pod is about
// to be registered by its leader. A lease past its deadline is dead (the register
// script refuses it), even before a repair removes it.
func inFlight(snap redisstore.Snapshot, fence int64, now time.Time) bool {
	for d, deadline := range snap.Deploys {
		if strings.TrimSuffix(d, "w") == strconv.FormatInt(fence, 10) && deadline.After(now) {
			return true
		}
	}
	return false
}

// What judgeOrphan did with a pod.
type orphanOutcome int

const (
	orphanLeft    orphanOutcome = iota // left alone: within its grace, under a live lease, on an old list, or a call failed
	orphanDeleted                      // deleted from the driver
	orphanAdopted                      // registered in Redis (adopted now, or known already)
)

// judgeOrphan decides what becomes of pod p as the driver listed it at at, given its
// scope's record rec and pool snap, read after the list: a pod the pool has is
// registered; one under a live deploy lease is its leader's; any other is an orphan,
// adopted or deleted (orphan). The watch and the full pass both judge by it.
func (s *Sweeper) judgeOrphan(ctx context.Context, rec redisstore.ScopeRecord, snap redisstore.Snapshot, p warmpool.Pod, at time.Time, lost bool) orphanOutcome {
	for _, r := range snap.Pods {
		if r.Pod.ID == p.ID {
			return orphanAdopted
		}
	}
	if inFlight(snap, p.Fence, at) {
		return orphanLeft
	}
	return s.orphan(ctx, rec, p, at, lost)
}

// orphan adopts or deletes a pod the driver has and Redis does not know, as the driver
// listed it at at. Such a pod had no session through warmpool (Redis binds sessions
// only to pods it knows, and forgets a pod's sessions with it), unless its scope's
// keys were lost (lost): then it may serve sessions Redis no longer has, and takes no
// new one until they have expired. A pod is not adopted from a list maxViewAge old or
// older: the driver may have deleted it since, and its tombstone expired.
func (s *Sweeper) orphan(ctx context.Context, rec redisstore.ScopeRecord, p warmpool.Pod, at time.Time, lost bool) orphanOutcome {
	switch {
	case p.Dead != "":
		return s.deleteOrphan(ctx, p, "dead: "+p.Dead)
	case rec.Deleted:
		return s.deleteOrphan(ctx, p, "its scope is deleted")
	case !p.Ready:
		if at.Sub(time.UnixMilli(p.CreatedAt)) >= s.cfg.OrphanGrace {
			return s.deleteOrphan(ctx, p, "never became ready")
		}
		return orphanLeft
	case p.DeployVer != rec.DeployVer:
		return s.deleteOrphan(ctx, p, "old deploy_ver "+p.DeployVer)
	case p.SSEURL == "":
		return s.deleteOrphan(ctx, p, "no SSE address to adopt it with")
	case s.clock.Now().Sub(at) >= s.maxViewAge():
		return orphanLeft // judged again on a fresh list
	}
	st, err := s.store.PodAdopt(ctx, p, at, lost)
	switch {
	case err != nil:
		s.log.WarnContext(ctx, "orphan: adopt failed", "pod", p.ID, "err", err)
	case st == redisstore.AdoptFull:
		return s.deleteOrphan(ctx, p, "no room under max_pods")
	case st == redisstore.AdoptGone:
		// Purged lately by a job that deletes it (or failed to): it stays gone.
		return s.deleteOrphan(ctx, p, "purged")
	case st == redisstore.AdoptAdopted:
		s.log.InfoContext(ctx, "adopted an orphan pod", "scope", p.ScopeID, "pod", p.ID, "job", jobName(ctx))
		s.fixed(ctx, "adopted")
		s.sessions.Wake(ctx, p.ScopeID)
		return orphanAdopted
	case st == redisstore.AdoptKnown:
		return orphanAdopted // registered meanwhile by its deploy
	}
	return orphanLeft
}

func (s *Sweeper) deleteOrphan(ctx context.Context, p warmpool.Pod, reason string) orphanOutcome {
	if err := s.driver.Delete(ctx, p); err != nil {
		s.log.WarnContext(ctx, "orphan pod not deleted", "pod", p.ID, "err", err)
		return orphanLeft
	}
	s.log.InfoContext(ctx, "deleted an orphan pod", "scope", p.ScopeID, "pod", p.ID, "reason", reason, "job", jobName(ctx))
	s.fixed(ctx, "deleted_orphan")
	return orphanDeleted
}

// unverifiedBefore returns the pods of a shard the driver reported and Redis was not
// yet seen to know, created before t (past their orphan grace).
func (w *watchState) unverifiedBefore(shard int, t time.Time) []warmpool.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []warmpool.Pod
	for _, p := range w.unverified[shard] {
		if time.UnixMilli(p.CreatedAt).Before(t) {
			out = append(out, p)
		}
	}
	return out
}

// settle forgets an unverified pod that was looked up (unless an event changed it
// meanwhile: the next run looks at it again), and remembers it as registered when
// registered is set and it is not gone meanwhile.
func (w *watchState) settle(shard int, p warmpool.Pod, registered bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur, ok := w.unverified[shard][p.ID]
	if !ok || cur != p {
		return
	}
	delete(w.unverified[shard], p.ID)
	if registered {
		w.verified[shard][p.ID] = true
	}
}

// watchOrphans looks up, one PodKnown each, the pods of a shard that the driver
// reported and that were not yet found registered, once their orphan grace has
// passed, as the watch's view (its events, or for a driver without them its list,
// as of viewAt: no list of its own, so a replica that deploys all the time lists no
// more often than one that does not) has them; a pod no longer in the view is
// forgotten. A pod Redis does not know whose deploy lease is dead (its leader crashed
// half-way, or gave up and failed to delete it) is adopted or deleted as the full pass
// would (judgeOrphan); one that another replica deleted since the list is deleted
// again, which the driver takes as done. Nothing is judged while the keyspace has no
// epoch (a rebuild from the driver is due), and a pod of a scope Redis does not have
// is left to the full pass, which republishes the stored configs first.
func (s *Sweeper) watchOrphans(ctx context.Context, shard int, viewAt time.Time) error {
	due := s.watch.unverifiedBefore(shard, s.clock.Now().Add(-s.cfg.OrphanGrace))
	if len(due) == 0 {
		return nil
	}
	live, err := s.store.EpochLive(ctx)
	if err != nil || !live {
		return err
	}
	var errs []error
	for _, p := range due {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lp, ok := s.watch.viewed(shard, p.ID)
		if !ok {
			s.watch.settle(shard, p, false) // gone meanwhile
			continue
		}
		settled, registered, err := s.eventOrphan(ctx, lp, viewAt)
		if err != nil {
			errs = append(errs, fmt.Errorf("orphan %s: %w", p.ID, err))
		}
		if settled {
			s.watch.settle(shard, p, registered)
		}
	}
	return errors.Join(errs...)
}

// eventOrphan looks up a pod the driver reported, as listed at listedAt: settled when
// nothing is left to do for it (registered or adopted: registered; deleted; of a
// scope Redis lacks), not while its deploy is in flight or its delete or adoption
// failed or waits for a fresh list.
func (s *Sweeper) eventOrphan(ctx context.Context, p warmpool.Pod, listedAt time.Time) (settled, registered bool, err error) {
	known, err := s.store.PodKnown(ctx, p.ScopeID, p.ID)
	if err != nil || known {
		return known, known, err
	}
	rec, snap, err := s.pool(ctx, p.ScopeID)
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return true, false, nil
	}
	if err != nil {
		return false, false, err
	}
	switch s.judgeOrphan(ctx, rec, snap, p, listedAt, false) {
	case orphanAdopted:
		return true, true, nil
	case orphanDeleted:
		return true, false, nil
	}
	return false, false, nil
}
