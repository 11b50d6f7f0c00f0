package rm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/rm"
)

// wantHeldBack checks an acquire the refill backoff held back: 502 DEPLOY_FAILED with
// the last failure's reason and retry_after, answered at once, no deploy started.
func wantHeldBack(t *testing.T, h *replicatest.Harness, m *rm.Manager, scope string, retry int) {
	t.Helper()
	deploys := h.Fake.DeployCount()
	start := time.Now()
	_, err := m.Acquire(context.Background(), scope)
	took := time.Since(start)
	var e *warmpool.Error
	if !errors.As(err, &e) || e.Code != warmpool.CodeDeployFailed || e.RetryAfter != retry ||
		!strings.Contains(e.Message, "image pull failed") || !strings.Contains(e.Message, "backs off") {
		t.Fatalf("acquire during the backoff = %v (%+v), want DEPLOY_FAILED backing off with the reason, retry_after %d", err, e, retry)
	}
	if took > time.Second {
		t.Fatalf("the held-back acquire took %v, want under a second", took)
	}
	if n := h.Fake.DeployCount(); n != deploys {
		t.Fatalf("%d deploys started during the backoff", n-deploys)
	}
}

// wantBackoff checks the backoff as GET …/pool shows it.
func wantBackoff(t *testing.T, m *rm.Manager, scope string, failures int, until time.Time) {
	t.Helper()
	p, err := m.Pool(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	b := p.Backoff
	switch {
	case failures == 0 && (b.Failures != 0 || b.Until != nil || b.LastError != ""):
		t.Fatalf("backoff = %+v, want none", b)
	case failures > 0 && (b.Failures != failures || b.Until == nil || !b.Until.Equal(until) || !strings.Contains(b.LastError, "image pull failed")):
		t.Fatalf("backoff = %+v, want %d failures until %v with the reason", b, failures, until)
	}
}

// wantDeployFailed checks an acquire that led a deploy which failed by itself.
func wantDeployFailed(t *testing.T, h *replicatest.Harness, m *rm.Manager, scope string) {
	t.Helper()
	deploys := h.Fake.DeployCount()
	_, err := m.Acquire(context.Background(), scope)
	var e *warmpool.Error
	if !errors.As(err, &e) || e.Code != warmpool.CodeDeployFailed || e.RetryAfter != 0 || strings.Contains(e.Message, "backs off") {
		t.Fatalf("acquire = %v, want the deploy's own DEPLOY_FAILED", err)
	}
	if n := h.Fake.DeployCount(); n != deploys+1 {
		t.Fatalf("%d deploys, want one", n-deploys)
	}
}

// SPEC §11.3: three failed deploys back off 5, 10 and 20 s, one backoff for the scope
// whichever replica deploys or asks; a class A change ends it. The clock is the
// harness's, moved by the test: nothing sleeps.
func TestRefillBackoffAcrossReplicas(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("bo", 4, 2)
	a := h.Replica(replicatest.Config{Clock: h.Clock}).RM
	b := h.Replica(replicatest.Config{Clock: h.Clock}).RM
	h.Fake.FailNext(3, "image pull failed")

	t0 := h.Clock.Now()
	wantDeployFailed(t, h, a, "bo")
	wantBackoff(t, b, "bo", 1, t0.Add(5*time.Second))
	h.Clock.Advance(time.Second)
	wantHeldBack(t, h, b, "bo", 4)
	if n, err := b.Fill(context.Background(), "bo"); err != nil || n != 0 {
		t.Fatalf("refill during the backoff started %d deploys, %v", n, err)
	}

	h.Clock.Advance(4 * time.Second) // t0+5s: the backoff has ended
	wantDeployFailed(t, h, b, "bo")
	wantBackoff(t, a, "bo", 2, t0.Add(15*time.Second))
	h.Clock.Advance(9 * time.Second)
	wantHeldBack(t, h, a, "bo", 1)

	h.Clock.Advance(time.Second) // t0+15s
	wantDeployFailed(t, h, a, "bo")
	wantBackoff(t, b, "bo", 3, t0.Add(35*time.Second))
	h.Clock.Advance(time.Second)
	wantHeldBack(t, h, b, "bo", 19)

	// A class B change keeps it; a class A change (a new image) ends it at once.
	h.Scope("bo", 6, 2)
	wantBackoff(t, a, "bo", 3, t0.Add(35*time.Second))
	h.Scope("bo", 6, 2, func(c *warmpool.ScopeConfig) { c.Deploy.Image = "agent:2" })
	wantBackoff(t, a, "bo", 0, time.Time{})
	l, err := b.Acquire(context.Background(), "bo")
	if err != nil || l.Source != warmpool.SourceDeployed {
		t.Fatalf("acquire after the class A change = %+v, %v; want a deploy", l, err)
	}
	h.Check("bo", false)
}

// A warm pod is used during a backoff, and a deploy that succeeds ends it.
func TestRefillBackoffKeepsWarmPods(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("warm", 4, 1)
	m := h.Replica(replicatest.Config{Clock: h.Clock}).RM
	ctx := context.Background()
	first, err := m.Acquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	h.Fake.FailNext(1, "image pull failed")
	wantDeployFailed(t, h, m, "warm")
	wantBackoff(t, m, "warm", 1, h.Clock.Now().Add(5*time.Second))
	if err := m.ReleaseClaim(ctx, "warm", first.Claim); err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(ctx, "warm")
	if err != nil || l.Source != warmpool.SourceWarm || l.Pod.ID != first.Pod.ID {
		t.Fatalf("acquire with a warm pod during the backoff = %+v, %v; want the warm pod", l, err)
	}
	before := h.Snap("warm")
	wantHeldBack(t, h, m, "warm", 5)
	if v := invariant.WarmBeforeBackoff(before, h.Current("warm").DeployVer, 4, h.Clock.Now()); len(v) != 0 {
		t.Fatal(v)
	}
	h.Clock.Advance(5 * time.Second)
	if l, err := m.Acquire(ctx, "warm"); err != nil || l.Source != warmpool.SourceDeployed {
		t.Fatalf("acquire at the end of the backoff = %+v, %v; want a deploy", l, err)
	}
	wantBackoff(t, m, "warm", 0, time.Time{})
}
