package redisstore

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
)

// ErrNoHold: no live hold of that id is on that pod (unknown, released, expired, or a
// hold of another pod).
var ErrNoHold = warmpool.Errorf(warmpool.CodeHoldNotFound, "hold not found: unknown, released, expired, or of another pod")

// HoldTouch runs hold_touch.lua: it extends a live hold (a claim on pod) to now plus the
// scope's hold_ttl_s and returns its new deadline. A config (a sealed session_config,
// SPEC §12.2) is kept as the hold's; nil keeps the one it has. Errors: ErrNoHold,
// SCOPE_NOT_FOUND.
func (s *Store) HoldTouch(ctx context.Context, scope, hold, pod string, now time.Time, config []byte) (time.Time, error) {
	r, err := s.call(ctx, holdTouch, s.keys.Scope(scope), nil, ms(now), hold, pod, config)
	if err != nil {
		return time.Time{}, err
	}
	if r.oneOf(0, "held", "unknown") == "unknown" {
		return time.Time{}, ErrNoHold
	}
	until := r.time(1)
	return until, r.err()
}

// HoldRelease runs hold_release.lua: it releases a live hold on pod, its slot going to
// the oldest waiter or freed, and reports whether the pod is idle now.
// Errors: ErrNoHold, SCOPE_NOT_FOUND.
func (s *Store) HoldRelease(ctx context.Context, scope, hold, pod string, now time.Time) (bool, error) {
	r, err := s.call(ctx, holdRelease, s.keys.Scope(scope), nil,
		append([]any{ms(now), hold, pod}, s.handoffArgs(now)...)...)
	if err != nil {
		return false, err
	}
	if r.oneOf(0, "released", "unknown") == "unknown" {
		return false, ErrNoHold
	}
	idle := r.flag(1)
	return idle, r.err()
}
