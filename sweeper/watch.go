package sweeper

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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

// watchState is what a replica keeps between its runs of the watch jobs, and what the
// driver's pod events (warmpool.PodNotifier) told it. Nothing in it needs to survive the
// replica or to agree across replicas: the probe window and the failing pods are in
// Redis, and what a replica has not seen the full pass (the audit) finds.
type watchState struct {
	// listMu is held while the driver is listed (which may wait for a cache), so the
	// shards' jobs share one list; mu guards the fields and is never held long.
	listMu sync.Mutex
	mu     sync.Mutex
	// reported are the deaths the driver reported, per shard, by pod id, not yet
	// handled by a run of that shard here.
	reported [redisstore.DueShards]map[string]warmpool.Pod
	// unverified are the live pods the driver reported, per shard, by pod id (as the
	// last event had them), not yet found registered in Redis by a run of that shard
	// here: past OrphanGrace, one that is not registered nor in flight is an orphan.
	unverified [redisstore.DueShards]map[string]warmpool.Pod
	// verified are the pods of each shard found registered (or adopted), until the
	// driver reports them gone: their later events need no look at Redis.
	verified [redisstore.DueShards]map[string]bool
	// seen are the pods of each shard at this replica's last run of it (nil before the
	// first), with Dead as then.
	seen [redisstore.DueShards]map[string]warmpool.Pod
	wake [redisstore.DueShards]chan struct{}

	// list is the driver's pods by shard, which the watch jobs of the shards share for
	// one watch interval (their ticks are spread over it) unless a death came in.
	list   [redisstore.DueShards][]warmpool.Pod
	listAt time.Time // zero: the list is stale
	// deathsSeen counts the reports: a list begun before one is not shared.
	deathsSeen uint64

	// periods are the probe periods of the scopes whose pods the watch has seen, read
	// from Redis the first time it sees a pod of the scope (ProbePeriods), and set
	// again from each change of the scope in the config store's feed and by the full
	// pass.
	periods map[string]time.Duration
}

func newWatchState() *watchState {
	w := &watchState{periods: map[string]time.Duration{}}
	for i := range w.wake {
		w.wake[i] = make(chan struct{}, 1)
		w.reported[i] = map[string]warmpool.Pod{}
		w.unverified[i] = map[string]warmpool.Pod{}
		w.verified[i] = map[string]bool{}
	}
	return w
}

// event takes a pod event from the driver (warmpool.PodNotifier). A pod not yet found
// registered is kept for its shard's watch job to look up once its orphan grace has
// passed; a pod gone is forgotten. A death (a dead or gone pod) makes the pod's
// shard's watch job run at once, on a fresh list.
func (w *watchState) event(ev warmpool.PodEvent) {
	p := ev.Pod
	shard := redisstore.DueShard(p.ScopeID)
	w.mu.Lock()
	switch {
	case ev.Gone:
		delete(w.unverified[shard], p.ID)
		delete(w.verified[shard], p.ID)
	case !w.verified[shard][p.ID]:
		w.unverified[shard][p.ID] = p
	}
	dead := p.Dead != ""
	if dead {
		w.reported[shard][p.ID] = p
		w.listAt = time.Time{}
		w.deathsSeen++
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

// listedPods takes a shard's pods as the driver lists them, as an informer's list
// would: a pod not yet seen is looked up like one an event reported (a driver may
// report only its own process's pods, local.Driver does).
func (w *watchState) listedPods(shard int, cur map[string]warmpool.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, p := range cur {
		if _, ok := w.unverified[shard][id]; !ok && !w.verified[shard][id] {
			w.unverified[shard][id] = p
		}
	}
}

// deaths returns the pods of a shard to bury if Redis knows them: those the driver
// reported, those listed dead that were not at the last run, and those listed then
// and gone now. It remembers cur for the next run.
func (w *watchState) deaths(shard int, cur map[string]warmpool.Pod) []warmpool.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := w.reported[shard]
	w.reported[shard] = map[string]warmpool.Pod{}
	prev := w.seen[shard]
	for id, p := range cur {
		if was, ok := prev[id]; p.Dead != "" && (!ok || was.Dead == "") {
			found[id] = p
		}
	}
	for id, p := range prev {
		if _, ok := cur[id]; !ok && p.Dead == "" {
			p.Ready, p.Dead = false, "gone from the driver"
			found[id] = p
		}
	}
	w.seen[shard] = cur
	out := make([]warmpool.Pod, 0, len(found))
	for _, p := range found {
		out = append(out, p)
	}
	return out
}

// setPeriod sets the probe period of a scope, as Redis serves its config now.
func (w *watchState) setPeriod(scope string, period time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.periods[scope] = period
}

// forgetPeriod drops a deleted scope's probe period: a scope of that name created
// again has its own read.
func (w *watchState) forgetPeriod(scope string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.periods, scope)
}

// unknownPeriods are the scopes of pods whose probe period the watch has not read.
func (w *watchState) unknownPeriods(pods []warmpool.Pod) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	seen := map[string]bool{}
	for _, p := range pods {
		if _, ok := w.periods[p.ScopeID]; !ok && !seen[p.ScopeID] {
			seen[p.ScopeID] = true
			out = append(out, p.ScopeID)
		}
	}
	return out
}

// addPeriods adds the periods read of scopes to those known, each unless a change
// set it meanwhile (which is newer); a scope Redis does not publish gets the default.
func (w *watchState) addPeriods(scopes []string, read map[string]time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range scopes {
		if _, ok := w.periods[id]; ok {
			continue
		}
		period, ok := read[id]
		if !ok {
			period = warmpool.DefaultProbePeriodS * time.Second
		}
		w.periods[id] = period
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

// retry puts back deaths that could not be handled, for the next run of their shard.
func (w *watchState) retry(shard int, pods []warmpool.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pods {
		w.reported[shard][p.ID] = p
	}
}

// Watch runs the watch of every shard once, on a fresh list of the driver's pods (the
// jobs run it shard by shard, WatchShard).
func (s *Sweeper) Watch(ctx context.Context) error {
	listed, at, err := s.watchList(ctx, true)
	if err != nil {
		return err
	}
	var errs []error
	for shard := range redisstore.DueShards {
		errs = append(errs, s.watchShard(ctx, shard, listed[shard], at))
	}
	return errors.Join(errs...)
}

// WatchShard is the watch of one shard of the due index: it buries the registered pods
// of the shard's scopes that the driver reported dead, lists dead, or no longer lists,
// handles as orphans the pods the driver reported that Redis does not know once past
// OrphanGrace (watchOrphans), and probes each live pod once per its scope's probe
// period, burying a pod whose probe failed HealthFailThreshold times in a row. It reads
// a scope's pool only for an orphan: the driver's list says which pods there are, and
// a pod Redis has that the driver never listed is the full pass's (Reconcile) to purge.
func (s *Sweeper) WatchShard(ctx context.Context, shard int) error {
	listed, at, err := s.watchList(ctx, false)
	if err != nil {
		return err
	}
	return s.watchShard(ctx, shard, listed[shard], at)
}

// watchList returns the driver's pods by shard and when they were listed: the list
// the shards' jobs of one watch interval (at most maxViewAge) share, unless fresh.
func (s *Sweeper) watchList(ctx context.Context, fresh bool) ([redisstore.DueShards][]warmpool.Pod, time.Time, error) {
	w := s.watch
	w.listMu.Lock()
	defer w.listMu.Unlock()
	now := s.clock.Now()
	w.mu.Lock()
	list, listAt, gen := w.list, w.listAt, w.deathsSeen
	w.mu.Unlock()
	if fresh || listAt.IsZero() || now.Sub(listAt) >= min(s.cfg.Watch, s.maxViewAge()) || now.Before(listAt) {
		all, err := s.driver.List(ctx)
		if err != nil {
			return [redisstore.DueShards][]warmpool.Pod{}, time.Time{}, fmt.Errorf("watch: list pods: %w", err)
		}
		list = [redisstore.DueShards][]warmpool.Pod{}
		for _, p := range all {
			shard := redisstore.DueShard(p.ScopeID)
			list[shard] = append(list[shard], p)
		}
		listAt = now
		w.mu.Lock()
		if w.deathsSeen == gen {
			w.list, w.listAt = list, now
		}
		w.mu.Unlock()
	}
	return list, listAt, nil
}

// readPeriods reads from Redis the probe periods of the scopes of listed whose pods the
// watch sees for the first time. Redis not answering must not stop the watch: dead
// pods are still buried, and these scopes' pods probed at the default until the next
// run reads them.
func (s *Sweeper) readPeriods(ctx context.Context, listed []warmpool.Pod) {
	unknown := s.watch.unknownPeriods(listed)
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

func (s *Sweeper) watchShard(ctx context.Context, shard int, listed []warmpool.Pod, listedAt time.Time) error {
	cur := make(map[string]warmpool.Pod, len(listed))
	for _, p := range listed {
		cur[p.ID] = p
	}
	var failed []warmpool.Pod
	var errs []error
	for _, p := range s.watch.deaths(shard, cur) {
		if err := s.buryDead(ctx, p); err != nil {
			failed = append(failed, p)
			errs = append(errs, err)
		}
	}
	s.watch.retry(shard, failed)
	s.watch.listedPods(shard, cur)
	s.readPeriods(ctx, listed)
	errs = append(errs, s.watchOrphans(ctx, shard, cur, listedAt))
	return errors.Join(append(errs, s.probeShard(ctx, shard, cur))...)
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
// from the end of the shard's last window to now. A pod's probe times are its own
// offset within its probe period (a hash of its id) plus whole periods, so each pod is
// probed once per period and the probes of many pods spread evenly over it. A pod whose
// agent reported within three report intervals is not probed: its report is as good as
// a passing probe. Only a failure, and the first pass after failures, is written to
// Redis.
func (s *Sweeper) probeShard(ctx context.Context, shard int, cur map[string]warmpool.Pod) error {
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
	for _, r := range failing {
		if p, ok := cur[r.Pod]; ok && p.Dead == "" {
			wasFailing[r.Pod] = true
		} else {
			gone = append(gone, r)
		}
	}
	var due []warmpool.Pod
	s.watch.mu.Lock()
	for _, p := range cur {
		if p.Dead == "" && probeDue(p.ID, s.watch.period(p.ScopeID), since, now) {
			due = append(due, p)
		}
	}
	s.watch.mu.Unlock()
	spared := s.spared(ctx, shard, due, now, reporting)
	var mu sync.Mutex
	var recovered []redisstore.PodRef
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	for _, p := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ref := redisstore.PodRef{Scope: p.ScopeID, Pod: p.ID}
			if s.probe(ctx, p, wasFailing[p.ID], spared[ref]) {
				mu.Lock()
				recovered = append(recovered, ref)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return s.store.ClearFailing(ctx, shard, append(gone, recovered...))
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

// probeDue reports whether a pod probed every period at its own offset has a probe
// time in (from, to].
func probeDue(pod string, period time.Duration, from, to time.Time) bool {
	p := max(period.Milliseconds(), 1)
	f, t := from.UnixMilli(), to.UnixMilli()
	if t-f >= p {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(pod))
	offset := int64(h.Sum64() % uint64(p))
	next := f - ((f-offset)%p+p)%p + p // the first probe time after f
	return next <= t
}

// probe probes one pod, unless its reports spare it (a report is then its pass). A
// failure is counted in Redis (pod_health.lua) and buries the pod at
// HealthFailThreshold in a row; a pass writes only when the pod was failing, and
// reports whether it reset the count.
func (s *Sweeper) probe(ctx context.Context, pod warmpool.Pod, failing, spared bool) (recovered bool) {
	if spared && !failing {
		return false
	}
	var perr error
	if !spared {
		perr = s.driver.Probe(ctx, pod)
	}
	if ctx.Err() != nil || (perr == nil && !failing) {
		return false
	}
	if perr == nil {
		_, err := s.store.PodHealth(ctx, pod.ScopeID, pod.ID, true)
		return err == nil
	}
	if err := s.store.MarkFailing(ctx, redisstore.PodRef{Scope: pod.ScopeID, Pod: pod.ID}); err != nil {
		s.log.WarnContext(ctx, "watch: probe failure not recorded", "scope", pod.ScopeID, "pod", pod.ID, "err", err)
		return false
	}
	n, err := s.store.PodHealth(ctx, pod.ScopeID, pod.ID, false)
	if err != nil || n < s.cfg.HealthFailThreshold {
		return false
	}
	s.bury(ctx, pod.ScopeID, pod, fmt.Sprintf("health probe failed %d times in a row: %v", n, perr), "unhealthy")
	return false
}
