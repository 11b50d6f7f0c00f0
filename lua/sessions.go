package lua

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

// Route runs session_route.lua.
func (s *Store) Route(ctx context.Context, scope string, a RouteArgs) (RouteResult, error) {
	k := s.keys.Scope(scope)
	idem, has := k.Idem("route", a.RequestID), "0"
	if a.RequestID != "" {
		has = "1"
	}
	out, err := s.run(ctx, SessionRoute, scope,
		[]string{k.Epoch, k.Config, k.Pods, k.PodVer, k.PodInfo, k.Slots, k.Idle, k.Sessions, k.SessExp, k.Claims, k.ClaimPod, k.Waiters, idem},
		ms(a.Now), a.Session, a.Claim, has, a.IdemTTL.Milliseconds())
	if err != nil {
		return RouteResult{}, err
	}
	res := RouteResult{Kind: out[0]}
	if res.Kind == RouteNone {
		res.Waiters, _ = strconv.Atoi(out[1])
		return res, nil
	}
	res.New, res.Session = out[1] == "1", out[4]
	res.Pod, err = decodePod(out[2], out[3])
	return res, err
}

// Touch outcomes.
const (
	TouchTouched = "touched"
	TouchExpired = "expired"
	TouchUnknown = "unknown"
)

// Touch runs session_touch.lua; waiters is the queue length when the touch evicted.
func (s *Store) Touch(ctx context.Context, scope, session string, now time.Time) (state string, waiters int, err error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, SessionTouch, scope,
		[]string{k.Epoch, k.Config, k.Pods, k.Slots, k.Idle, k.Sessions, k.SessExp, k.Waiters}, ms(now), session)
	if err != nil {
		return "", 0, err
	}
	if out[0] == TouchExpired {
		waiters, _ = strconv.Atoi(out[1])
	}
	return out[0], waiters, nil
}

// End runs session_end.lua: it reports whether the session was bound, and the queue
// length of the scope.
func (s *Store) End(ctx context.Context, scope, session string, now time.Time) (released bool, waiters int, err error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, SessionEnd, scope,
		[]string{k.Epoch, k.Config, k.Pods, k.Slots, k.Idle, k.Sessions, k.SessExp, k.Waiters}, ms(now), session)
	if err != nil || out[0] != "released" {
		return false, 0, err
	}
	waiters, _ = strconv.Atoi(out[2])
	return true, waiters, nil
}

// EvictExpired runs session_evict.lua: it evicts up to limit expired sessions and
// returns how many, with the queue length of the scope.
func (s *Store) EvictExpired(ctx context.Context, scope string, now time.Time, limit int) (evicted, waiters int, err error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, SessionEvict, scope,
		[]string{k.Epoch, k.Pods, k.Slots, k.Idle, k.Sessions, k.SessExp, k.Waiters}, ms(now), limit)
	if err != nil {
		return 0, 0, err
	}
	evicted, _ = strconv.Atoi(out[0])
	waiters, _ = strconv.Atoi(out[1])
	return evicted, waiters, nil
}

// SessionBinding is a live session's binding.
type SessionBinding struct {
	Pod       warmpool.Pod
	ExpiresAt time.Time
}

// ErrNoSession: the session is not bound (or its TTL has passed).
var ErrNoSession = warmpool.Errorf(warmpool.CodeSessionNotFound, "session not found")

// Session reads a live session's binding. Errors: ErrNoSession, SCOPE_NOT_FOUND.
func (s *Store) Session(ctx context.Context, scope, session string, now time.Time) (SessionBinding, error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, SessionGet, scope, []string{k.Config, k.Sessions, k.SessExp, k.PodInfo}, ms(now), session)
	if err != nil {
		return SessionBinding{}, err
	}
	if out[0] != "found" {
		return SessionBinding{}, ErrNoSession
	}
	pod, err := decodePod(out[1], out[2])
	if err != nil {
		return SessionBinding{}, err
	}
	e, _ := strconv.ParseFloat(out[3], 64)
	return SessionBinding{Pod: pod, ExpiresAt: time.UnixMilli(int64(e))}, nil
}

// Waiter gate outcomes.
const (
	GateOK     = "ok"
	GateFull   = "full"
	GateNoWait = "no_wait"
)

// JoinQueue runs waiter_gate.lua; for GateOK it returns the waiter's deadline.
func (s *Store) JoinQueue(ctx context.Context, scope, waiter string, now time.Time) (string, time.Time, error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, WaiterGate, scope, []string{k.Epoch, k.Config, k.Waiters}, ms(now), waiter)
	if err != nil {
		return "", time.Time{}, err
	}
	var deadline time.Time
	if out[0] == GateOK {
		d, _ := strconv.ParseInt(out[1], 10, 64)
		deadline = time.UnixMilli(d)
	}
	return out[0], deadline, nil
}

// LeaveQueue takes a waiter out of the queue.
func (s *Store) LeaveQueue(ctx context.Context, scope, waiter string) error {
	k := s.keys.Scope(scope)
	_, err := s.run(ctx, WaiterLeave, scope, []string{k.Waiters}, waiter)
	return err
}
