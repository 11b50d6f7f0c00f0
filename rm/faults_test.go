package rm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/warmpool/warmpool/internal/replicatest"
	"github.com/warmpool/warmpool/rm"
)

// A leader whose caller left while its deploy ran (a client gone, a route that gave
// up) keeps no slot: the deploy goes on for the room, and once the pod is registered
// the leader's claim goes back at once, not when the claim expires (ClaimTTL, 30s by
// default). Before, the pod stayed busy, its slot held by nobody, for the whole TTL.
func TestALeaderWhoseCallerLeftGivesItsSlotBack(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 8, 2)
	m := manager(h, rm.Config{})
	hold := h.Fake.Hold()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "s")
		errc <- err
	}()
	h.WaitInFlight(1)
	cancel()
	if err := replicatest.Recv(t, "the acquire's answer", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire after its caller left: %v, want context.Canceled", err)
	}
	hold()
	replicatest.WaitFor(t, "the deployed pod to go idle", func() bool {
		s := h.Snap("s")
		return len(s.Pods) == 1 && s.Pods[0].Idle
	})
	s := h.Settled("s")
	if s.Pods[0].Slots != 0 || len(s.Claims) != 0 {
		t.Fatalf("pod %+v, claims %v: want no slot held", s.Pods[0], s.Claims)
	}
}
