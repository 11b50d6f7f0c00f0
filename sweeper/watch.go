package sweeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

const probeConcurrency = 8

// WatchJobName is the name of the watch job of a shard of the due index (its lease is
// the job lock of that name).
func WatchJobName(shard int) string { return "watch:" + strconv.Itoa(shard) }

// DefaultResync: the watch of a driver with pod events (warmpool.PodNotifier) lists
// the driver this often, as an informer's resync does, to find what the events missed.
const DefaultResync = 5 * time.Minute

// watchState is what a replica keeps between its runs of the watch jobs, and what the
// driver's pod events (warmpool.PodNotifier) told it. Nothing in it needs to survive the
// replica or to agree across replicas: the probe window and the failing pods are in
// Redis, and what a replica has not seen the full pass (the audit) finds.
type watchState struct {
	// listMu is held while the driver is listed (which may wait for a cache), so the
	// shards' jobs share one list; mu guards the fields and is never held long.
	listMu sync.Mutex
	mu     sync.Mutex
	// view is each shard's pods as the events (and the last list) have them, with the
	// live ones' probe schedule.
	view [redisstore.DueShards]*shardView
	// reported are the deaths the driver reported (or a list showed), per shard, by pod
	// id, not yet handled by a run of that shard here.
	reported [redisstore.DueShards]map[string]warmpool.Pod
	// unverified are the live pods the driver reported, per shard, by pod id (as the
	// last event had them), not yet found registered in Redis by a run of that shard
	// here: past OrphanGrace, one that is not registered nor in flight is an orphan.
	unverified [redisstore.DueShards]map[string]warmpool.Pod
	// verified are the pods of each shard found registered (or adopted), until the
	// driver reports them gone: their later events need no look at Redis.
	verified [redisstore.DueShards]map[string]bool
	wake     [redisstore.DueShards]chan struct{}
	// failing is how many entries of each shard's failing set (redisstore.Failing)
	// this replica's last run of the shard left there, -1 before its first run (a
	// replica that died may have left some): while any may be left the shard's job is
	// not idle, so the run that finds their pods gone clears them, also once the shard
	// has no pod left.
	failing [redisstore.DueShards]int

	// syncedAt is when the last list of the driver that the view took was begun (zero:
	// none yet); resync, set by a driver that may have missed events, makes the next
	// run list again. changed holds the pods an event changed since the list under way
	// began (nil while none is), which the list may show as they were before.
	syncedAt time.Time
	resync   bool
	changed  map[string]bool

	// periods are the probe periods of the scopes whose pods the watch has seen, read
	// from Redis the first time it sees a pod of the scope (ProbePeriods), and set
	// again from each change of the scope in the config store's feed and by the full
	// pass; unread are the scopes of each shard whose period is to be read.
	periods map[string]time.Duration
	unread  [redisstore.DueShards]map[string]bool
}

func newWatchState() *watchState {
	w := &watchState{periods: map[string]time.Duration{}}
	for i := range w.wake {
		w.wake[i] = make(chan struct{}, 1)
		w.failing[i] = -1
		w.view[i] = newShardView()
		w.reported[i] = map[string]warmpool.Pod{}
		w.unverified[i] = map[string]warmpool.Pod{}
		w.verified[i] = map[string]bool{}
		w.unread[i] = map[string]bool{}
	}
	return w
}

// event takes a pod event from the driver (warmpool.PodNotifier) into the view. A pod
// not yet found registered is kept for its shard's watch job to look up once its
// orphan grace has passed; a pod gone is forgotten. A death (a dead or gone pod) makes
// the pod's shard's watch job run at once.
func (w *watchState) event(ev warmpool.PodEvent) {
	if ev.Resync {
		w.mu.Lock()
		w.resync = true
		w.mu.Unlock()
		return
	}
	p := ev.Pod
	shard := redisstore.DueShard(p.ScopeID)
	w.mu.Lock()
	if w.changed != nil {
		w.changed[p.ID] = true
	}
	switch {
	case ev.Gone:
		delete(w.unverified[shard], p.ID)
		delete(w.verified[shard], p.ID)
		w.view[shard].remove(p.ID)
	case !w.verified[shard][p.ID]:
		w.unverified[shard][p.ID] = p
	}
	if !ev.Gone {
		w.putLocked(shard, p)
	}
	dead := p.Dead != ""
	if dead {
		w.reported[shard][p.ID] = p
	}
	w.mu.Unlock()
	if !dead {
		return
	}
	select {
	case w.wake[shard] <- struct{}{}:
	default:
	}
}

// putLocked sets a pod in its shard's view, its scope's period to be read when it is
// not known; w.mu is held.
func (w *watchState) putLocked(shard int, p warmpool.Pod) {
	w.view[shard].put(p)
	if _, ok := w.periods[p.ScopeID]; !ok {
		w.unread[shard][p.ScopeID] = true
	}
}

// resyncDue reports whether the view is to be taken from a list of the driver at now:
// none was taken yet, a driver asked for one, or the last is at least every old.
func (w *watchState) resyncDue(now time.Time, every time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.syncedAt.IsZero() || w.resync || now.Sub(w.syncedAt) >= every || now.Before(w.syncedAt)
}

// beginList marks the start of a list of the driver: the events from now on are newer
// than what it may show.
func (w *watchState) beginList() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changed = map[string]bool{}
	w.resync = false
}

// listFailed ends a list that failed: the next run lists again.
func (w *watchState) listFailed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changed = nil
	w.resync = true
}

// listed takes the driver's pods as listed from at as the view of every shard, as an
// informer's list does: a pod it shows dead that the view had alive or lacked, and a
// live pod of the view it does not show, is a death to bury (an event that was
// missed); a pod not yet seen is looked up like one an event reported (a driver may
// report only some of its pods). A pod an event changed while the list ran keeps what
// the event said.
func (w *watchState) listed(all []warmpool.Pod, at time.Time) {
	var byShard [redisstore.DueShards]map[string]warmpool.Pod
	for i := range byShard {
		byShard[i] = map[string]warmpool.Pod{}
	}
	for _, p := range all {
		byShard[redisstore.DueShard(p.ScopeID)][p.ID] = p
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for shard, cur := range byShard {
		v := w.view[shard]
		for id, p := range cur {
			if w.changed[id] {
				continue
			}
			if was, ok := v.pod(id); p.Dead != "" && (!ok || was.Dead == "") {
				w.reported[shard][id] = p
			}
			if _, ok := w.unverified[shard][id]; !ok && !w.verified[shard][id] {
				w.unverified[shard][id] = p
			}
			w.putLocked(shard, p)
		}
		for id, vp := range v.pods {
			if _, ok := cur[id]; ok || w.changed[id] {
				continue
			}
			if p := vp.pod; p.Dead == "" {
				p.Ready, p.Dead = false, "gone from the driver"
				w.reported[shard][id] = p
			}
			delete(w.unverified[shard], id)
			delete(w.verified[shard], id)
			v.remove(id)
		}
	}
	w.changed = nil
	w.syncedAt = at
}

// viewed is a pod of a shard's view.
func (w *watchState) viewed(shard int, id string) (warmpool.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.view[shard].pod(id)
}

// deaths returns, and forgets, the pods of a shard to bury if Redis knows them: those
// the driver reported dead or gone, and those a list showed dead or gone.
func (w *watchState) deaths(shard int) []warmpool.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := w.reported[shard]
	w.reported[shard] = map[string]warmpool.Pod{}
	out := make([]warmpool.Pod, 0, len(found))
	for _, p := range found {
		out = append(out, p)
	}
	return out
}

// retry puts back deaths that could not be handled, for the next run of their shard.
func (w *watchState) retry(shard int, pods []warmpool.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pods {
		w.reported[shard][p.ID] = p
	}
}

// Watch runs the watch of every shard once, as their jobs do (WatchShard); a driver
// without pod events is listed afresh first.
func (s *Sweeper) Watch(ctx context.Context) error {
	if err := s.syncView(ctx, !s.notified()); err != nil {
		return err
	}
	var errs []error
	for shard := range redisstore.DueShards {
		errs = append(errs, s.watchShard(ctx, shard))
	}
	return errors.Join(errs...)
}

// WatchShard is the watch of one shard of the due index: it buries the registered pods
// of the shard's scopes that the driver reported dead or gone (or a list showed so),
// handles as orphans the pods the driver reported that Redis does not know once past
// OrphanGrace (watchOrphans), and probes each live pod once per its scope's probe
// period, burying a pod whose probe failed HealthFailThreshold times in a row. Its
// view of the pods is the driver's pod events: it lists the driver only every Resync
// (and at its first run, and when the driver may have missed events), or, for a
// driver without events, once per watch interval for all shards. It reads a scope's
// pool only for an orphan, and looks only at the pods whose probe time has come; a
// pod Redis has that the driver never showed is the full pass's (Reconcile) to purge.
func (s *Sweeper) WatchShard(ctx context.Context, shard int) error {
	if err := s.syncView(ctx, false); err != nil {
		if !s.notified() {
			return err
		}
		// The events still say which pods there are: bury and probe by them.
		s.log.WarnContext(ctx, "watch: resync failed; the next run lists again", "err", err)
	}
	return s.watchShard(ctx, shard)
}

// watchIdle reports whether a shard's watch has nothing to do: the driver reports pod
// events, no list of it is due, and the shard has no pod in the view, no death to
// bury, no pod to look up, no period to read and no failing pod its last run here left
// in Redis. Its probe window then stays where it
// was (the next run's window reaches back to it) and it takes no lock.
func (s *Sweeper) watchIdle(shard int) bool {
	if !s.notified() {
		return false
	}
	w := s.watch
	if w.resyncDue(s.clock.Now(), s.cfg.Resync) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.view[shard].pods) == 0 && len(w.reported[shard]) == 0 && len(w.unverified[shard]) == 0 && len(w.unread[shard]) == 0 && w.failing[shard] == 0
}

// notified reports whether the driver reports pod events (warmpool.PodNotifier).
func (s *Sweeper) notified() bool {
	_, ok := s.driver.(warmpool.PodNotifier)
	return ok
}

// syncView lists the driver into the watch's view when a list is due (or fresh is
// set): for a driver with pod events every Resync, for one without every watch
// interval (at most maxViewAge, as the orphans are judged on it), which the shards'
// jobs, their ticks spread over the interval, share.
func (s *Sweeper) syncView(ctx context.Context, fresh bool) error {
	w := s.watch
	w.listMu.Lock()
	defer w.listMu.Unlock()
	every := s.cfg.Resync
	if !s.notified() {
		every = min(s.cfg.Watch, s.maxViewAge())
	}
	now := s.clock.Now()
	if !fresh && !w.resyncDue(now, every) {
		return nil
	}
	w.beginList()
	all, err := s.driver.List(ctx)
	if err != nil {
		w.listFailed()
		return fmt.Errorf("watch: list pods: %w", err)
	}
	w.listed(all, now)
	return nil
}

// viewAt is the time of the view the orphans are judged on: now for a driver whose
// events keep it current, else the time of its last list.
func (s *Sweeper) viewAt() time.Time {
	if s.notified() {
		return s.clock.Now()
	}
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return s.watch.syncedAt
}

func (s *Sweeper) watchShard(ctx context.Context, shard int) error {
	var failed []warmpool.Pod
	var errs []error
	for _, p := range s.watch.deaths(shard) {
		if err := s.buryDead(ctx, p); err != nil {
			failed = append(failed, p)
			errs = append(errs, err)
		}
	}
	s.watch.retry(shard, failed)
	s.readPeriods(ctx, shard)
	errs = append(errs, s.watchOrphans(ctx, shard, s.viewAt()))
	return errors.Join(append(errs, s.probeShard(ctx, shard))...)
}

// buryDead buries a pod the driver reports dead or gone, if Redis knows it: other pods
// (a deploy that failed, an orphan) are the deploy's or watchOrphans'.
func (s *Sweeper) buryDead(ctx context.Context, p warmpool.Pod) error {
	known, err := s.store.PodKnown(ctx, p.ScopeID, p.ID)
	if err != nil || !known {
		return err
	}
	s.bury(ctx, p.ScopeID, p, p.Dead, "dead")
	return nil
}

// probeShard probes the live pods of a shard whose probe time falls in the window
// from the end of the shard's last window to now, looking only at the pods whose time
// has come (shardView.popDue). A pod's probe times are its own offset within its probe
// period (a hash of its id) plus whole periods, so each pod is probed once per period
// and the probes of many pods spread evenly over it. A pod whose agent reported within
// three report intervals is not probed: its report is as good as a passing probe. Only
// a failure, and the first pass after failures, is written to Redis.
func (s *Sweeper) probeShard(ctx context.Context, shard int) error {
	now := s.clock.Now()
	since, failing, reporting, err := s.store.ProbeWindow(ctx, shard, now)
	if err != nil {
		return err
	}
	if since.IsZero() || since.After(now) {
		since = now.Add(-s.cfg.Watch) // a shard's first window: one tick
	}
	wasFailing := make(map[string]bool, len(failing))
	var gone []redisstore.PodRef
	s.watch.mu.Lock()
	for _, r := range failing {
		if p, ok := s.watch.view[shard].pod(r.Pod); ok && p.Dead == "" {
			wasFailing[r.Pod] = true
		} else {
			gone = append(gone, r)
		}
	}
	due, looked := s.watch.view[shard].popDue(since, now, s.watch.period)
	s.watch.mu.Unlock()
	if looked > 0 {
		s.log.DebugContext(ctx, "watch: probe times come", "shard", shard, "looked", looked, "due", len(due))
	}
	spared := s.spared(ctx, shard, due, now, reporting)
	var mu sync.Mutex
	var recovered []redisstore.PodRef
	marked := 0
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	for _, p := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ref := redisstore.PodRef{Scope: p.ScopeID, Pod: p.ID}
			rec, mark := s.probe(ctx, p, wasFailing[p.ID], spared[ref])
			mu.Lock()
			defer mu.Unlock()
			if rec {
				recovered = append(recovered, ref)
			}
			if mark && !wasFailing[p.ID] {
				marked++
			}
		}()
	}
	wg.Wait()
	err = s.store.ClearFailing(ctx, shard, append(gone, recovered...))
	left := len(wasFailing) - len(recovered) + marked
	if err != nil {
		left = len(failing) + marked
	}
	s.watch.mu.Lock()
	s.watch.failing[shard] = left
	s.watch.mu.Unlock()
	return err
}

// spared are the pods of due whose reports spare them the probe at now; none when no
// pod of the shard reports, and none when Redis does not answer (the pods are probed:
// a probe too many costs less than a dead pod left).
func (s *Sweeper) spared(ctx context.Context, shard int, due []warmpool.Pod, now time.Time, reporting bool) map[redisstore.PodRef]bool {
	if !reporting || len(due) == 0 {
		return nil
	}
	refs := make([]redisstore.PodRef, len(due))
	for i, p := range due {
		refs[i] = redisstore.PodRef{Scope: p.ScopeID, Pod: p.ID}
	}
	spared, err := s.store.Spared(ctx, shard, refs, now)
	if err != nil {
		s.log.WarnContext(ctx, "watch: reports not read; every due pod is probed", "shard", shard, "err", err)
		return nil
	}
	return spared
}

// probe probes one pod, unless its reports spare it (a report is then its pass). A
// failure is counted in Redis (pod_health.lua) and buries the pod at
// HealthFailThreshold in a row; a pass writes only when the pod was failing. It
// reports whether a pass reset the count, and whether a failure put the pod in its
// shard's failing set.
func (s *Sweeper) probe(ctx context.Context, pod warmpool.Pod, failing, spared bool) (recovered, marked bool) {
	if spared && !failing {
		return false, false
	}
	var perr error
	if !spared {
		perr = s.driver.Probe(ctx, pod)
	}
	if ctx.Err() != nil || (perr == nil && !failing) {
		return false, false
	}
	if perr == nil {
		_, err := s.store.PodHealth(ctx, pod.ScopeID, pod.ID, true)
		return err == nil, false
	}
	if err := s.store.MarkFailing(ctx, redisstore.PodRef{Scope: pod.ScopeID, Pod: pod.ID}); err != nil {
		s.log.WarnContext(ctx, "watch: probe failure not recorded", "scope", pod.ScopeID, "pod", pod.ID, "err", err)
		return false, false
	}
	n, err := s.store.PodHealth(ctx, pod.ScopeID, pod.ID, false)
	if err != nil || n < s.cfg.HealthFailThreshold {
		return false, true
	}
	s.bury(ctx, pod.ScopeID, pod, fmt.Sprintf("health probe failed %d times in a row: %v", n, perr), "unhealthy")
	return false, true
}
