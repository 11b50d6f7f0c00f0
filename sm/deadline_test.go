package sm_test

import (
	"context"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
)

// A route with a fixed TTL (E2B's create) binds a session that ends that TTL later
// whatever it does: a touch and a route of it keep its expiry, Get tells it; Deadline
// moves it (or, with later, only later) and refuses an unknown or expired session.
// A deploy on the way (the slow path, here a cold scope) binds with the fixed TTL too.
func TestFixedTTLAndDeadline(t *testing.T) {
	h := replicatest.New(t)
	m := replica(h, replicatest.Config{Clock: h.Clock})
	h.Scope("s", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 600 })
	ctx := context.Background()
	start := h.Clock.Now()
	b, err := m.RouteWith(ctx, "s", "sbx", warmpool.RouteOptions{FixedTTL: 30 * time.Second})
	if err != nil || !b.New {
		t.Fatalf("route with a fixed TTL: %+v, %v", b, err)
	}
	want := start.Add(30 * time.Second)
	h.Clock.Advance(10 * time.Second)
	if ok, err := m.Touch(ctx, "s", "sbx"); !ok || err != nil {
		t.Fatalf("touch: %v %v", ok, err)
	}
	mustRoute(t, m, "s", "sbx")
	if got, err := m.Get(ctx, "s", "sbx"); err != nil || !got.ExpiresAt.Equal(want) {
		t.Fatalf("get: expires %v (%v), want %v: touched and routed, still the fixed expiry", got.ExpiresAt, err, want)
	}

	at, err := m.Deadline(ctx, "s", "sbx", 5*time.Second, false)
	if want := h.Clock.Now().Add(5 * time.Second); err != nil || !at.Equal(want) {
		t.Fatalf("deadline 5 s: %v %v, want %v", at, err, want)
	}
	if again, err := m.Deadline(ctx, "s", "sbx", time.Second, true); err != nil || !again.Equal(at) {
		t.Fatalf("deadline later 1 s: %v %v, want %v kept", again, err, at)
	}
	if _, err := m.Deadline(ctx, "s", "nobody", time.Second, false); warmpool.ErrorCode(err) != warmpool.CodeSessionNotFound {
		t.Fatalf("deadline of an unknown session: %v", err)
	}
	if _, err := m.Deadline(ctx, "s", "sbx", -time.Second, false); warmpool.ErrorCode(err) != warmpool.CodeValidation {
		t.Fatalf("negative TTL: %v", err)
	}
	h.Clock.Advance(6 * time.Second)
	if _, err := m.Deadline(ctx, "s", "sbx", time.Hour, true); warmpool.ErrorCode(err) != warmpool.CodeSessionNotFound {
		t.Fatalf("deadline of an expired session: %v, want SESSION_NOT_FOUND", err)
	}
	if _, ok := h.Settled("s").Sessions["sbx"]; ok {
		t.Fatal("the expired session is still bound")
	}
}
