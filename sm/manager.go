// Package sm is the session manager: it routes sessions of a scope to pods with spare
// capacity (sticky for the session's life), queues routes when the scope is full, and
// ends, touches and expires sessions. Every mutation is one Lua script (package redisstore, running the scripts of lua/);
// pods come from a warmpool.Pool (the resource manager).
package sm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
)

// Defaults of Config.
const (
	DefaultRecheck  = 250 * time.Millisecond
	DefaultIdemTTL  = 60 * time.Second
	DefaultAttempts = 3
	// DefaultSessionLease is the lease of a session's route lock: a replica that dies
	// while routing a session holds up that session's other routes this long at most.
	DefaultSessionLease = 10 * time.Second
	// lockPoll is how often a route that waits for another call routing the same
	// session looks whether that call is done.
	lockPoll = 20 * time.Millisecond
)

// Config tunes a Manager; zero fields take the defaults above.
type Config struct {
	// Recheck is how often a queued route re-checks for capacity without a wake-up.
	Recheck time.Duration
	// IdemTTL is how long a route answer is kept for replays of its request id.
	IdemTTL time.Duration
	// Attempts bounds how often a route retries when a pod it was handed went away
	// (purged, or of an old deploy_ver after a config change) before it bound.
	Attempts int
	// SessionLease is the lease of the lock under which one call at a time runs a
	// session's slow path (acquire, deploy, queue); it is extended while the call runs.
	SessionLease time.Duration
	Clock        warmpool.Clock
	Logger       *slog.Logger
	// Observe, when set, is told of queue events (queued, queue_full, wait_timeout,
	// woken).
	Observe func(event, outcome string)
	// ObserveRoute, when set, is told of every route call (Manager.Route): its scope,
	// how it was served (Binding.Source) or, when it failed, its error code, and its
	// latency. It must not block.
	ObserveRoute func(scope, source string, code warmpool.Code, took time.Duration)
}

// Manager is the session manager. It is safe for concurrent use.
type Manager struct {
	store State
	pool  warmpool.Pool
	cfg   Config
	clock warmpool.Clock
	log   *slog.Logger
	wake  *redisstore.Wake
}

// fill gives every field left out its default.
func (c *Config) fill() {
	defaults.Positive(&c.Recheck, DefaultRecheck)
	defaults.Positive(&c.IdemTTL, DefaultIdemTTL)
	defaults.Positive(&c.Attempts, DefaultAttempts)
	defaults.Positive(&c.SessionLease, DefaultSessionLease)
	c.Clock, c.Logger, c.Observe = defaults.Clock(c.Clock), defaults.Logger(c.Logger), defaults.Observer(c.Observe)
	if c.ObserveRoute == nil {
		c.ObserveRoute = func(string, string, warmpool.Code, time.Duration) {}
	}
}

// New returns a Manager over store, taking pods from pool.
func New(store State, pool warmpool.Pool, cfg Config) *Manager {
	cfg.fill()
	return &Manager{
		store: store, pool: pool, cfg: cfg, clock: cfg.Clock,
		log:  cfg.Logger.With("component", "sm"),
		wake: store.NewWake(),
	}
}

// Close ends the wake-up subscriptions.
func (m *Manager) Close() { m.wake.Close() }

func binding(scope, session string, pod warmpool.Pod, isNew bool) warmpool.Binding {
	return warmpool.Binding{ScopeID: scope, SessionID: session, PodID: pod.ID, SSEURL: pod.SSEURL, DeployVer: pod.DeployVer, New: isNew}
}

// served is the binding of a route answer: a binding the answer made has source, one
// it found (bound already, or a replay) has SourceAffinity.
func served(scope string, res redisstore.RouteResult, source string) warmpool.Binding {
	b := binding(scope, res.Session, res.Pod, res.New)
	b.Source = warmpool.SourceAffinity
	if res.Kind == redisstore.RouteNew {
		b.Source = source
	}
	return b
}

// Route returns the pod of a session: its bound pod (TTL refreshed), else the first pod
// of the current deploy_ver with a free slot, else a pod from the pool (warm, followed
// or deployed), else a place in the scope's waiter queue until capacity frees. The
// queue is fair: while routes wait, a new one queues behind them, and freed capacity
// goes to the oldest waiter first, on any replica.
// With a request id, a repeated call returns the first answer, and a call with a
// request id used for another request (another session, or an acquire) is refused.
// Concurrent routes of one session take one pod: one call at a time looks for it (see
// routeOnce). Errors: VALIDATION, SCOPE_NOT_FOUND, IDEMPOTENCY_MISMATCH,
// NO_POD_AVAILABLE, QUEUE_FULL, WAIT_TIMEOUT, DEPLOY_FAILED, STORE_UNAVAILABLE.
// Each call's outcome and latency go to Config.ObserveRoute.
func (m *Manager) Route(ctx context.Context, scope, session, requestID string) (warmpool.Binding, error) {
	return m.RouteWith(ctx, scope, session, warmpool.RouteOptions{RequestID: requestID})
}

// RouteWith is Route with its options: a request id, a fixed TTL.
func (m *Manager) RouteWith(ctx context.Context, scope, session string, o warmpool.RouteOptions) (warmpool.Binding, error) {
	start := time.Now()
	b, err := m.route(ctx, scope, session, o)
	if err != nil {
		m.cfg.ObserveRoute(scope, "", warmpool.ErrorCode(err), time.Since(start))
		return warmpool.Binding{}, err
	}
	m.cfg.ObserveRoute(scope, b.Source, "", time.Since(start))
	return b, nil
}

// route is RouteWith without its observation.
func (m *Manager) route(ctx context.Context, scope, session string, o warmpool.RouteOptions) (warmpool.Binding, error) {
	requestID := o.RequestID
	if err := errors.Join(checkIDs(scope, session), warmpool.CheckRequestID(requestID)); err != nil {
		return warmpool.Binding{}, err
	}
	// A bound session, a warm fit or a replay of the cached answer costs one script
	// call; this probe never queues (it has no waiter id).
	res, err := m.store.SessionRoute(ctx, scope, m.routeArgs(session, o))
	if err != nil {
		return warmpool.Binding{}, fmt.Errorf("route %s/%s: %w", scope, session, err)
	}
	if res.Served() {
		return served(scope, res, warmpool.SourceWarm), nil
	}
	if requestID == "" {
		return m.routeOnce(ctx, scope, session, o)
	}
	// The slow path runs once per request id across replicas: a retry that arrives
	// while the first call deploys or queues waits for its answer instead of taking
	// a second pod.
	req := redisstore.IdemRequest{Scope: scope, ID: requestID, Fingerprint: redisstore.RouteFingerprint(session)}
	source := warmpool.SourceAffinity // unless this call runs the route itself
	run, err := m.store.Idempotent(ctx, req, m.cfg.IdemTTL, maxRouteWait, m.cfg.Recheck, func() ([]byte, error) {
		b, err := m.routeOnce(ctx, scope, session, o)
		if err != nil {
			return nil, err
		}
		source = b.Source
		return json.Marshal(b)
	})
	if run.Unkept != nil {
		m.log.WarnContext(ctx, "route's request id mark not completed", "scope", scope, "session", session, "err", run.Unkept)
	}
	if err != nil {
		return warmpool.Binding{}, err
	}
	var b warmpool.Binding
	if err := json.Unmarshal(run.Answer, &b); err != nil {
		return warmpool.Binding{}, fmt.Errorf("route %s/%s: cached answer: %w", scope, session, err)
	}
	b.Source = source
	return b, nil
}

// maxRouteWait bounds how long a repeated request waits for the first one's answer:
// the longest a route can take (queue wait plus a deploy), with room to spare.
const maxRouteWait = time.Duration(warmpool.MaxWaitTimeoutS+warmpool.MaxReadyTimeoutS) * time.Second

// routeOnce runs the slow path of a session's route (acquire, deploy, queue) one call
// at a time per (scope, session) across replicas, under a lease lock kept alive while
// it runs. A concurrent route of the same session waits until that call is done, then
// runs the route script again, which finds the session bound: concurrent routes of one
// session deploy one pod and answer it. No answer is kept beyond the call; when the
// call that ran failed, the next waiter runs the slow path itself.
func (m *Manager) routeOnce(ctx context.Context, scope, session string, o warmpool.RouteOptions) (warmpool.Binding, error) {
	key := m.store.Keys().Scope(scope).SessionLock(session)
	bound := time.NewTimer(maxRouteWait)
	defer bound.Stop()
	for {
		lock, err := m.store.Obtain(ctx, key, m.cfg.SessionLease)
		if err == nil {
			return m.routeLocked(ctx, lock, scope, session, o)
		}
		if !errors.Is(err, warmpool.ErrNotObtained) {
			return warmpool.Binding{}, fmt.Errorf("route %s/%s: %w", scope, session, err)
		}
		if err := m.awaitUnlocked(ctx, key, bound.C); err != nil {
			return warmpool.Binding{}, fmt.Errorf("route %s/%s: %w", scope, session, err)
		}
		res, err := m.store.SessionRoute(ctx, scope, m.routeArgs(session, o))
		if err != nil {
			return warmpool.Binding{}, fmt.Errorf("route %s/%s: %w", scope, session, err)
		}
		if res.Served() {
			return served(scope, res, warmpool.SourceWarm), nil
		}
	}
}

// routeArgs are the arguments of a route attempt of session with o, now, as a caller
// that does not queue.
func (m *Manager) routeArgs(session string, o warmpool.RouteOptions) redisstore.RouteArgs {
	return redisstore.RouteArgs{Now: m.clock.Now(), Session: session, RequestID: o.RequestID, IdemTTL: m.cfg.IdemTTL, FixedTTL: o.FixedTTL, Config: o.Config}
}

// routeLocked runs the slow path under the session's lock and gives the lock back. A
// lock lost before the route bound anything fails the route: another call may be
// routing the session now.
func (m *Manager) routeLocked(ctx context.Context, lock *redisstore.Lock, scope, session string, o warmpool.RouteOptions) (warmpool.Binding, error) {
	locked, stop := lock.KeepAlive(ctx)
	b, err := m.routeOrQueue(locked, scope, session, o)
	lost := stop()
	cleanup, cancel := redisstore.CleanupContext(ctx)
	defer cancel()
	if lerr := lock.Release(cleanup); lerr != nil && lost == nil {
		m.log.WarnContext(ctx, "session lock not released; it expires by its lease", "scope", scope, "session", session, "err", lerr)
	}
	if err != nil && lost != nil && ctx.Err() == nil {
		return warmpool.Binding{}, fmt.Errorf("route %s/%s: %w: %w", scope, session,
			warmpool.Errorf(warmpool.CodeStoreUnavailable, "the session's route lock was lost (Redis unreachable or too slow)").Retry(1), lost)
	}
	return b, err
}

// awaitUnlocked waits until nobody holds the lock key, polling every lockPoll. It
// fails with NO_POD_AVAILABLE when bound fires first.
func (m *Manager) awaitUnlocked(ctx context.Context, key string, bound <-chan time.Time) error {
	t := time.NewTicker(lockPoll)
	defer t.Stop()
	for {
		held, err := m.store.Held(ctx, key)
		if err != nil || !held {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-bound:
			return warmpool.Errorf(warmpool.CodeNoPodAvailable, "another call has been routing this session for %s", maxRouteWait).Retry(1)
		case <-t.C:
		}
	}
}

// routeOrQueue routes the session under a waiter id of its own: one pass, then, when
// the pass queued it, the wait in the queue.
func (m *Manager) routeOrQueue(ctx context.Context, scope, session string, o warmpool.RouteOptions) (warmpool.Binding, error) {
	a := m.routeArgs(session, o)
	a.Waiter = warmpool.NewID()
	res, source, full, err := m.pass(ctx, scope, a)
	if err != nil {
		return warmpool.Binding{}, err
	}
	if res.Served() {
		return served(scope, res, source), nil
	}
	return m.queue(ctx, scope, a, res, full)
}

// pass is one attempt at a binding: session_route.lua, then, when nothing fits and no
// waiter is ahead of the caller, a pod from the pool bound with its claim. When the pool
// is full too, the route script runs once more with Join, which fits after all (a pod
// registered or a slot freed meanwhile) or queues the caller. It returns a binding or
// the script's queue answer, with the pool's error that made it queue, if any. source
// says where a binding's pod came from: a free slot (warm) or the pool's lease.
func (m *Manager) pass(ctx context.Context, scope string, a redisstore.RouteArgs) (res redisstore.RouteResult, source string, full error, err error) {
	route := func(claim string) (redisstore.RouteResult, error) {
		a.Now, a.Claim = m.clock.Now(), claim
		res, err := m.store.SessionRoute(ctx, scope, a)
		if err != nil {
			return res, fmt.Errorf("route %s/%s: %w", scope, a.Session, err)
		}
		return res, nil
	}
	for range m.cfg.Attempts {
		res, err := route("")
		switch {
		case err != nil:
			return res, "", nil, err
		case res.Kind != redisstore.RouteNone && (res.Kind != redisstore.RouteQueued || res.Rank > 0):
			// Served, or queued behind others (or refused a place): the pool is not
			// this caller's to ask.
			return res, warmpool.SourceWarm, nil, nil
		}
		lease, err := m.pool.Acquire(ctx, scope)
		if errors.Is(err, warmpool.ErrPoolFull) {
			a.Join = true
			res, rerr := route("")
			return res, warmpool.SourceWarm, err, rerr
		}
		if err != nil {
			return res, "", nil, err
		}
		res, err = route(lease.Claim)
		if err != nil {
			m.releaseClaim(ctx, scope, lease.Claim)
			return res, "", nil, err
		}
		if res.Served() {
			return res, lease.Source, nil, nil
		}
		// The pod went away or is of an old version now; the script gave the claim back.
		m.log.InfoContext(ctx, "handed pod unusable, routing again", "scope", scope, "session", a.Session, "pod", lease.Pod.ID)
	}
	return redisstore.RouteResult{}, "", nil, warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: pods kept going away while routing; retry", scope).Retry(1)
}

func (m *Manager) releaseClaim(ctx context.Context, scope, claim string) {
	cleanup, cancel := redisstore.CleanupContext(ctx)
	defer cancel()
	if err := m.pool.ReleaseClaim(cleanup, scope, claim); err != nil {
		m.log.WarnContext(ctx, "claim not given back; it expires by its deadline", "scope", scope, "err", err)
	}
}

// queue waits in the scope's queue, where res (the pass that queued the caller, or
// refused it a place) left it. Capacity freed anywhere is handed to the oldest waiter
// by the script that frees it, which wakes that waiter alone: its next pass binds the
// slot. The first in line also tries the pool on each wake-up. Every Recheck a pass
// runs anyway, so a lost wake-up only delays. The waiter leaves the queue however the
// wait ends; a slot handed to it too late goes on to the next.
func (m *Manager) queue(ctx context.Context, scope string, a redisstore.RouteArgs, res redisstore.RouteResult, full error) (b warmpool.Binding, err error) {
	switch res.Kind {
	case redisstore.RouteFull:
		m.cfg.Observe("queue", "queue_full")
		return warmpool.Binding{}, warmpool.Errorf(warmpool.CodeQueueFull, "scope %q: every pod is busy and the waiter queue is full", scope).Retry(1)
	case redisstore.RouteNoWait:
		if full == nil {
			full = warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: every pod is busy and the scope has no waiter queue", scope).Retry(1)
		}
		return warmpool.Binding{}, full
	}
	m.cfg.Observe("queue", "queued")
	defer func() {
		if err == nil {
			return // the binding took the caller out of the queue
		}
		cleanup, cancel := redisstore.CleanupContext(ctx)
		defer cancel()
		if lerr := m.store.WaiterLeave(cleanup, scope, a.Waiter, m.clock.Now()); lerr != nil {
			m.log.WarnContext(ctx, "waiter not removed; it expires by its deadline", "scope", scope, "err", lerr)
		}
	}()
	// Subscribed only now: the pass right below finds a slot handed over before.
	woken, unsubscribe := m.wake.Subscribe(ctx, scope, a.Waiter)
	defer unsubscribe()
	wait := res.Deadline.Sub(m.clock.Now())
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	tick := time.NewTicker(m.cfg.Recheck)
	defer tick.Stop()
	a.Join = true
	for {
		res, _, _, err := m.pass(ctx, scope, a)
		switch {
		case err != nil:
			return warmpool.Binding{}, err
		case res.Served():
			return served(scope, res, warmpool.SourceQueued), nil
		case res.Kind != redisstore.RouteQueued:
			// A slot handed over was lost (it expired unbound) and the queue has no room now.
			return m.queue(ctx, scope, a, res, nil)
		}
		select {
		case <-ctx.Done():
			return warmpool.Binding{}, ctx.Err()
		case <-timeout.C:
			m.cfg.Observe("queue", "wait_timeout")
			// The last pass queued the caller, at res.Rank (0: first in line). The
			// envelope of WAIT_TIMEOUT has no details (SPEC §3): the place is in words.
			return warmpool.Binding{}, warmpool.Errorf(warmpool.CodeWaitTimeout, "scope %q: no capacity freed within %s (place %d in line)", scope, wait.Round(time.Second), res.Rank+1).Retry(1)
		case <-woken:
			m.cfg.Observe("queue", "woken")
		case <-tick.C:
		}
	}
}

// Touch refreshes a session's TTL. It reports false when the session had expired (it
// is evicted now, its slot handed to the oldest waiter or freed) or never existed.
// Errors: VALIDATION, SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) Touch(ctx context.Context, scope, session string) (bool, error) {
	if err := checkIDs(scope, session); err != nil {
		return false, err
	}
	state, err := m.store.SessionTouch(ctx, scope, session, m.clock.Now())
	if err != nil {
		return false, fmt.Errorf("touch %s/%s: %w", scope, session, err)
	}
	return state == redisstore.TouchTouched, nil
}

// End releases a session: its slot goes to the oldest waiter of the scope (on any
// replica), or is freed and its pod goes idle when it was the last session. It reports
// whether the session was bound.
// Errors: VALIDATION, SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) End(ctx context.Context, scope, session string) (bool, error) {
	if err := checkIDs(scope, session); err != nil {
		return false, err
	}
	released, err := m.store.SessionEnd(ctx, scope, session, m.clock.Now())
	if err != nil {
		return false, fmt.Errorf("end %s/%s: %w", scope, session, err)
	}
	return released, nil
}

// checkIDs validates a scope and a session id.
func checkIDs(scope, session string) error {
	return errors.Join(warmpool.CheckScopeID(scope), warmpool.CheckSessionID(session))
}

// Get returns a live session's binding. Errors: VALIDATION, SCOPE_NOT_FOUND,
// SESSION_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) Get(ctx context.Context, scope, session string) (warmpool.Binding, error) {
	if err := checkIDs(scope, session); err != nil {
		return warmpool.Binding{}, err
	}
	sb, err := m.store.SessionGet(ctx, scope, session, m.clock.Now())
	if err != nil {
		return warmpool.Binding{}, err
	}
	b := binding(scope, session, sb.Pod, false)
	b.ExpiresAt = sb.ExpiresAt
	return b, nil
}

// ExpireSessions evicts the scope's sessions whose TTL has passed (up to limit per
// call) and drops its claims past their deadline (holds not released in time among
// them); each freed slot goes to the oldest waiter, or is freed. It returns how many
// sessions it evicted.
func (m *Manager) ExpireSessions(ctx context.Context, scope string, limit int) (int, error) {
	n, _, err := m.store.SessionEvict(ctx, scope, m.clock.Now(), limit)
	if err != nil {
		return 0, fmt.Errorf("expire sessions of %q: %w", scope, err)
	}
	return n, nil
}

// Wake tells every waiter of the scope on every replica that capacity may have come
// back that no script handed on (a pod was purged below max_pods, or adopted): each
// re-runs its pass, where free slots go to the oldest waiters first.
func (m *Manager) Wake(ctx context.Context, scope string) {
	if err := m.wake.Publish(ctx, scope); err != nil {
		m.log.WarnContext(ctx, "wake-up not published; waiters re-check on their own", "scope", scope, "err", err)
	}
}
