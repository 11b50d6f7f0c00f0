package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/warmpool/warmpool"
)

// Route outcomes.
const (
	RouteBound  = "bound"
	RouteNew    = "new"
	RouteReplay = "replay"
	// RouteNone: nothing fits and the caller is not queued (nobody waits, or it gave
	// no waiter id): it may ask the pool for a pod.
	RouteNone = "none"
	// RouteQueued: the caller waits in the scope's queue; at rank 0 it is first in line
	// and may ask the pool for a pod too.
	RouteQueued = "queued"
	// RouteFull: the caller had to queue and the queue is full.
	RouteFull = "full"
	// RouteNoWait: the caller had to queue and the scope has no queue (queue_size or
	// wait_timeout_s is 0).
	RouteNoWait = "no_wait"
	// routeMismatch: the request id names another request; SessionRoute answers it as
	// IDEMPOTENCY_MISMATCH.
	routeMismatch = "mismatch"
)

// RouteArgs are the inputs of one route attempt.
type RouteArgs struct {
	Now     time.Time
	Session string
	// Claim, when set, binds the session to the claimed pod.
	Claim string
	// RequestID, when set, caches the answer for IdemTTL and replays it to a route of
	// the same session (RouteFingerprint); any other request with the id is refused.
	RequestID string
	IdemTTL   time.Duration
	// Waiter is the caller's place in the queue: it joins under this id when it must
	// wait, and a slot the queue hands it is the claim of this id. Empty: the caller
	// never queues (RouteNone instead).
	Waiter string
	// Join makes the caller queue when nothing fits even if nobody waits.
	Join bool
	// FixedTTL, when above zero, is the TTL of a binding this call makes, in place of
	// the scope's session_ttl_s, and fixes its expiry: routes, touches and agent
	// reports do not move it, SessionDeadline does (E2B's sandbox timeout). A session
	// bound already keeps its expiry.
	FixedTTL time.Duration
	// Config is the session's session_config, sealed (SPEC §12.2): kept for the pod's
	// agent when this call binds the session, ignored when it is bound already.
	Config []byte
}

// RouteResult is session_route.lua's answer.
type RouteResult struct {
	Kind string
	// New tells whether the answer created the binding (for a replay: whether the
	// first answer did).
	New bool
	Pod warmpool.Pod
	// Session is the session the answer is for.
	Session string
	// Rank is the caller's place in the queue (0 = first) and Deadline the end of its
	// wait (RouteQueued).
	Rank     int
	Deadline time.Time
}

// Served reports whether the answer is a binding.
func (r RouteResult) Served() bool {
	return r.Kind == RouteBound || r.Kind == RouteNew || r.Kind == RouteReplay
}

// SessionRoute runs session_route.lua: the session's bound pod, else the claimed pod
// (RM's or the queue's), else a free slot of the current version when no waiter is
// ahead of the caller (free slots go to the waiters first), else the caller queues.
// Errors: IDEMPOTENCY_MISMATCH (the request id names another request),
// SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (s *Store) SessionRoute(ctx context.Context, scope string, a RouteArgs) (RouteResult, error) {
	k := s.keys.scopeBase(scope)
	fp := ""
	if a.RequestID != "" {
		fp = RouteFingerprint(a.Session)
	}
	fixed := ""
	if a.FixedTTL > 0 {
		fixed = strconv.FormatInt(a.FixedTTL.Milliseconds(), 10)
	}
	r, err := s.callQuota(ctx, sessionRoute, k, []string{k.RouteAnswer(a.RequestID), k.IdemMark(a.RequestID)}, false,
		append([]any{ms(a.Now), a.Session, a.Claim, fp, a.IdemTTL.Milliseconds(), a.Waiter, flag(a.Join), fixed},
			append(s.handoffArgs(a.Now), a.Config)...)...)
	if err != nil {
		return RouteResult{}, err
	}
	res := RouteResult{Kind: r.oneOf(0, RouteBound, RouteNew, RouteReplay, RouteNone, RouteQueued, RouteFull, RouteNoWait, routeMismatch)}
	switch {
	case res.Kind == routeMismatch:
		if err := r.err(); err != nil {
			return RouteResult{}, err
		}
		return RouteResult{}, mismatch(scope, a.RequestID)
	case res.Served():
		res.New, res.Pod, res.Session = r.flag(1), r.pod(2, 3), r.str(4)
	case res.Kind == RouteQueued:
		res.Rank, res.Deadline = r.count(1), r.time(2)
	case res.Kind == RouteFull:
		r.count(1)
	}
	return res, r.err()
}

// Touch outcomes.
const (
	TouchTouched = "touched"
	TouchExpired = "expired"
	TouchUnknown = "unknown"
)

// SessionTouch runs session_touch.lua: it refreshes a live session's TTL, or evicts an
// expired one (its slot to the oldest waiter first).
func (s *Store) SessionTouch(ctx context.Context, scope, session string, now time.Time) (string, error) {
	r, err := s.call(ctx, sessionTouch, s.keys.Scope(scope), nil, append([]any{ms(now), session}, s.handoffArgs(now)...)...)
	if err != nil {
		return "", err
	}
	state := r.oneOf(0, TouchTouched, TouchExpired, TouchUnknown)
	return state, r.err()
}

// Deadline outcomes.
const (
	DeadlineSet     = "set"
	DeadlineExpired = TouchExpired
	DeadlineUnknown = TouchUnknown
)

// DeadlineResult is session_deadline.lua's answer: the outcome and, when set, the
// session's expiry now.
type DeadlineResult struct {
	State  string
	Expiry time.Time
}

// SessionDeadline runs session_deadline.lua: it fixes a live, bound session's expiry at
// now + ttl (with later, at the later of that and its expiry), which routes, touches
// and agent reports do not move from then on; an expired session is evicted (its slot
// to the oldest waiter first). Errors: SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (s *Store) SessionDeadline(ctx context.Context, scope, session string, now time.Time, ttl time.Duration, later bool) (DeadlineResult, error) {
	r, err := s.call(ctx, sessionDeadline, s.keys.Scope(scope), nil,
		append([]any{ms(now), session, ttl.Milliseconds(), flag(later)}, s.handoffArgs(now)...)...)
	if err != nil {
		return DeadlineResult{}, err
	}
	res := DeadlineResult{State: r.oneOf(0, DeadlineSet, DeadlineExpired, DeadlineUnknown)}
	if res.State == DeadlineSet {
		res.Expiry = r.time(1)
	}
	return res, r.err()
}

// SessionEnd runs session_end.lua: it unbinds the session (its slot to the oldest
// waiter first) and reports whether the session was bound.
func (s *Store) SessionEnd(ctx context.Context, scope, session string, now time.Time) (bool, error) {
	r, err := s.call(ctx, sessionEnd, s.keys.Scope(scope), nil, append([]any{ms(now), session}, s.handoffArgs(now)...)...)
	if err != nil {
		return false, err
	}
	released := r.oneOf(0, "released", "unknown") == "released"
	if released {
		r.str(1) // the pod it was on
	}
	return released, r.err()
}

// SessionEvict runs session_evict.lua: it evicts up to limit expired sessions and drops
// the claims past their deadline (expired holds among them), their slots to the oldest
// waiters first. It returns how many sessions and claims went.
func (s *Store) SessionEvict(ctx context.Context, scope string, now time.Time, limit int) (evicted, claims int, err error) {
	r, err := s.call(ctx, sessionEvict, s.keys.Scope(scope), nil,
		append([]any{ms(now), limit}, s.handoffArgs(now)...)...)
	if err != nil {
		return 0, 0, err
	}
	evicted, claims = r.count(0), r.count(1)
	return evicted, claims, r.err()
}

// SessionBinding is a live session's binding.
type SessionBinding struct {
	Pod       warmpool.Pod
	ExpiresAt time.Time
}

// ErrNoSession: the session is not bound (or its TTL has passed).
var ErrNoSession = warmpool.Errorf(warmpool.CodeSessionNotFound, "session not found")

// SessionGet runs session_get.lua: a live session's binding. Errors: ErrNoSession,
// SCOPE_NOT_FOUND.
func (s *Store) SessionGet(ctx context.Context, scope, session string, now time.Time) (SessionBinding, error) {
	r, err := s.call(ctx, sessionGet, s.keys.Scope(scope), nil, ms(now), session)
	if err != nil {
		return SessionBinding{}, err
	}
	if r.oneOf(0, "found", "unknown") == "unknown" {
		return SessionBinding{}, ErrNoSession
	}
	b := SessionBinding{Pod: r.pod(1, 2), ExpiresAt: r.time(3)}
	return b, r.err()
}

// WaiterLeave runs waiter_leave.lua: it takes a waiter out of the queue; a slot the
// queue handed it goes on to the next waiter.
func (s *Store) WaiterLeave(ctx context.Context, scope, waiter string, now time.Time) error {
	r, err := s.call(ctx, waiterLeave, s.keys.Scope(scope), nil,
		append([]any{waiter, ms(now)}, s.handoffArgs(now)...)...)
	if err != nil {
		return err
	}
	r.flag(0)
	return r.err()
}
