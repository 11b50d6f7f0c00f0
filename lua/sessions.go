package lua

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
)

// Route outcomes.
const (
	RouteBound  = "bound"
	RouteNew    = "new"
	RouteReplay = "replay"
	RouteNone   = "none"
)

// RouteArgs are the inputs of one route attempt.
type RouteArgs struct {
	Now     time.Time
	Session string
	// Claim, when set, binds the session to the claimed pod.
	Claim string
	// RequestID, when set, caches the answer for IdemTTL and replays it.
	RequestID string
	IdemTTL   time.Duration
}

// RouteResult is session_route.lua's answer.
type RouteResult struct {
	Kind string
	// New tells whether the answer created the binding (for a replay: whether the
	// first answer did).
	New bool
	Pod warmpool.Pod
	// Session is the session the answer is for: a replay answers for the session of
	// the first call with its request id.
	Session string
	// Waiters is the queue length seen when no pod fits (RouteNone).
	Waiters int
}

// SessionRoute runs session_route.lua: the session's bound pod, else the claimed pod,
// else the first pod of the current version with a free slot, else RouteNone.
func (s *Store) SessionRoute(ctx context.Context, scope string, a RouteArgs) (RouteResult, error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, sessionRoute, scope,
		[]string{k.Epoch, k.Config, k.Pods, k.PodVer, k.PodInfo, k.Slots, k.Idle, k.Sessions, k.SessExp, k.Claims, k.ClaimPod, k.Waiters, k.Idem("route", a.RequestID)},
		ms(a.Now), a.Session, a.Claim, flag(a.RequestID != ""), a.IdemTTL.Milliseconds())
	if err != nil {
		return RouteResult{}, err
	}
	res := RouteResult{Kind: r.oneOf(0, RouteBound, RouteNew, RouteReplay, RouteNone)}
	if res.Kind == RouteNone {
		res.Waiters = r.count(1)
	} else {
		res.New, res.Pod, res.Session = r.flag(1), r.pod(2, 3), r.str(4)
	}
	return res, r.err()
}

// Touch outcomes.
const (
	TouchTouched = "touched"
	TouchExpired = "expired"
	TouchUnknown = "unknown"
)

// SessionTouch runs session_touch.lua; waiters is the queue length when the touch
// evicted.
func (s *Store) SessionTouch(ctx context.Context, scope, session string, now time.Time) (state string, waiters int, err error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, sessionTouch, scope,
		[]string{k.Epoch, k.Config, k.Pods, k.Slots, k.Idle, k.Sessions, k.SessExp, k.Waiters}, ms(now), session)
	if err != nil {
		return "", 0, err
	}
	state = r.oneOf(0, TouchTouched, TouchExpired, TouchUnknown)
	if state == TouchExpired {
		waiters = r.count(1)
	}
	return state, waiters, r.err()
}

// SessionEnd runs session_end.lua: it reports whether the session was bound, and the
// queue length of the scope.
func (s *Store) SessionEnd(ctx context.Context, scope, session string, now time.Time) (released bool, waiters int, err error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, sessionEnd, scope,
		[]string{k.Epoch, k.Config, k.Pods, k.Slots, k.Idle, k.Sessions, k.SessExp, k.Waiters}, ms(now), session)
	if err != nil {
		return false, 0, err
	}
	if released = r.oneOf(0, "released", "unknown") == "released"; released {
		r.str(1) // the pod it was on
		waiters = r.count(2)
	}
	return released, waiters, r.err()
}

// SessionEvict runs session_evict.lua: it evicts up to limit expired sessions and
// returns how many, with the queue length of the scope.
func (s *Store) SessionEvict(ctx context.Context, scope string, now time.Time, limit int) (evicted, waiters int, err error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, sessionEvict, scope,
		[]string{k.Epoch, k.Pods, k.Slots, k.Idle, k.Sessions, k.SessExp, k.Waiters}, ms(now), limit)
	if err != nil {
		return 0, 0, err
	}
	evicted, waiters = r.count(0), r.count(1)
	return evicted, waiters, r.err()
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
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, sessionGet, scope, []string{k.Config, k.Sessions, k.SessExp, k.PodInfo}, ms(now), session)
	if err != nil {
		return SessionBinding{}, err
	}
	if r.oneOf(0, "found", "unknown") == "unknown" {
		return SessionBinding{}, ErrNoSession
	}
	b := SessionBinding{Pod: r.pod(1, 2), ExpiresAt: r.time(3)}
	return b, r.err()
}

// Waiter gate outcomes.
const (
	GateOK     = "ok"
	GateFull   = "full"
	GateNoWait = "no_wait"
)

// WaiterGate runs waiter_gate.lua; for GateOK it returns the waiter's deadline.
func (s *Store) WaiterGate(ctx context.Context, scope, waiter string, now time.Time) (string, time.Time, error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, waiterGate, scope, []string{k.Epoch, k.Config, k.Waiters}, ms(now), waiter)
	if err != nil {
		return "", time.Time{}, err
	}
	var deadline time.Time
	state := r.oneOf(0, GateOK, GateFull, GateNoWait)
	if state == GateOK {
		deadline = r.time(1)
	}
	return state, deadline, r.err()
}

// WaiterLeave runs waiter_leave.lua: it takes a waiter out of the queue.
func (s *Store) WaiterLeave(ctx context.Context, scope, waiter string) error {
	r, err := s.call(ctx, waiterLeave, scope, []string{s.keys.Scope(scope).Waiters}, waiter)
	if err != nil {
		return err
	}
	r.flag(0)
	return r.err()
}
