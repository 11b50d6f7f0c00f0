package sweeper_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// The driver's pod events, not the full pass, bring a crashed replica's half-made pods
// to the watch: past OrphanGrace, a pod Redis does not know whose deploy lease is dead
// is deleted (not ready) or adopted (ready, of the current version); a registered pod
// and a pod under a live lease are left alone; and a pod once found registered costs
// no further look at Redis.
func TestWatchHandlesOrphansFromPodEvents(t *testing.T) {
	h := newHarness(t)
	st := h.Scope("a", 8, 2) // max_pods 4
	ctx := t.Context()
	registered := h.route("a", "s1").PodID

	h.Fake.AddExternal(h.externalPod("a", "ready-orphan", 50))
	// A crashed replica's deploy: its lease runs out at leaseEnd, its pod never gets ready.
	grace := sweeper.DefaultOrphanGrace
	now := h.Clock.Now()
	leaseEnd := now.Add(time.Since(now) + 2*grace)
	lease, err := h.Store.PodAcquire(ctx, "a", redisstore.AcquireArgs{Now: now, Claim: "c1", ClaimDeadline: leaseEnd,
		LeaseDeadline: leaseEnd, RoomMargin: time.Second})
	if err != nil || lease.Kind != redisstore.AcquireDeploy {
		t.Fatal(lease, err)
	}
	release := h.Fake.Hold()
	starting := make(chan error, 1)
	go func() {
		_, err := h.Fake.Deploy(context.Background(), warmpool.DeployRequest{ScopeID: "a", DeployVer: st.DeployVer, Fence: lease.Fence, Spec: st.Config.Deploy})
		starting <- err
	}()
	h.WaitInFlight(1)
	halfMade := warmpool.PodName("a", lease.Fence)

	watch := func() {
		t.Helper()
		if err := h.sw.Watch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	watch()
	if got := h.observedAll(); len(got) != 0 || len(h.Fake.Deleted()) != 0 {
		t.Fatalf("within the orphan grace the watch did %v, deleted %v", got, h.Fake.Deleted())
	}

	// Past the grace (the clock jumps past the driver's wall-clock creation times).
	h.Clock.Advance(time.Since(h.Clock.Now()) + grace + time.Second)
	watch()
	s := h.Check("a", false)
	if p, ok := podState(s, "ready-orphan"); !ok || !p.Idle || p.Pod.DeployVer != st.DeployVer {
		t.Fatalf("the ready orphan of the current version was not adopted: %+v %v", p, ok)
	}
	if h.deleted(halfMade) || h.deleted(registered) || h.deleted("ready-orphan") {
		t.Fatalf("deleted %v: a pod under a live lease, a registered or an adopted pod", h.Fake.Deleted())
	}
	if a, d := h.observedCount("adopted"), h.observedCount("deleted_orphan"); a != 1 || d != 0 {
		t.Fatalf("observed %d adopted, %d deleted; want 1, 0", a, d)
	}

	// The lease runs out: the half-made pod goes at the next watch.
	h.Clock.Advance(time.Until(leaseEnd) + time.Second)
	watch()
	if !h.deleted(halfMade) || h.inDriver(halfMade) {
		t.Fatalf("the half-made pod of a dead lease was not deleted (deleted %v)", h.Fake.Deleted())
	}
	if _, ok := podState(h.Snap("a"), registered); !ok || h.deleted(registered) {
		t.Fatal("the registered pod was touched")
	}
	if d := h.observedCount("deleted_orphan"); d != 1 {
		t.Fatalf("observed %d deleted orphans, want 1", d)
	}
	release()
	if err := replicatest.Recv(t, "the held deploy", starting); warmpool.ErrorCode(err) != warmpool.CodeDeployFailed {
		t.Fatalf("deploy of the deleted pod: %v", err)
	}

	// Every pod is settled (once the deleted pod's death is handled): a watch looks none
	// of them up again.
	watch()
	log := &commandLog{}
	h.client.AddHook(log)
	watch()
	if n := log.take()["zscore"]; n != 0 {
		t.Fatalf("a watch with every pod settled sent %d ZSCORE (PodKnown), want 0", n)
	}
	// The adopted pod is routable.
	if b := h.route("a", "s2"); b.PodID != "ready-orphan" && b.PodID != registered {
		t.Fatalf("route after the adoption: %+v", b)
	}
}

// No orphan is judged while the keyspace has no epoch, even once its scopes are
// published again (a rebuild under way): the rebuild adopts the ready pods holding
// their slots, for the sessions Redis lost may still run on them, and deletes nothing.
func TestWatchLeavesOrphansToARebuild(t *testing.T) {
	h := newHarness(t)
	c := h.Scope("a", 4, 2)
	ctx := t.Context()
	h.Fake.AddExternal(h.externalPod("a", "ready-orphan", 50))
	stale := h.externalPod("a", "stale", 51)
	stale.Dead = "Evicted"
	h.Fake.AddExternal(stale)
	h.flush()
	if err := h.Store.ScopePublish(ctx, redisstore.ScopeRecord{ScopeID: "a", Config: c.Config, Version: c.Version, DeployVer: c.DeployVer, ChangedAt: c.UpdatedAt}); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(time.Since(h.Clock.Now()) + sweeper.DefaultOrphanGrace + time.Second)
	if err := h.sw.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	if d := h.Fake.Deleted(); len(d) != 0 {
		t.Fatalf("the watch deleted %v with the keyspace lost", d)
	}
	if _, ok := podState(h.Snap("a"), "ready-orphan"); ok {
		t.Fatal("the watch adopted a pod before the rebuild")
	}
	if err := h.sw.SweepShard(ctx, 0); err != nil { // the due job of shard 0 rebuilds
		t.Fatal(err)
	}
	if p, ok := podState(h.Snap("a"), "ready-orphan"); !ok || p.Slots != 2 { // pod_concurrency 2, all held
		t.Fatalf("the rebuild adopted %+v (%v), want the pod with every slot held", p, ok)
	}
}

// The full pass as a job is an audit: one log line per pass with the fixes by fix, 0
// on a state the events and the due notes kept right; a scope missing from the due
// index is a fix (reindexed), told to OnFix and counted in the line.
func TestAuditPassCountsItsFixes(t *testing.T) {
	var buf syncBuffer
	var mu sync.Mutex
	fixes := map[string]int{}
	h := newHarness(t, func(o *options) {
		o.sweep.Logger = slog.New(slog.NewTextHandler(&buf, nil))
		o.sweep.OnFix = func(job, fix string) { mu.Lock(); fixes[fix]++; mu.Unlock() }
	})
	h.Scope("a", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 60 })
	h.route("a", "s1")
	h.sweepDue()
	audit := func() string {
		t.Helper()
		buf.Reset()
		if err := h.sw.ReconcileJob().Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(buf.String(), "\n") {
			if strings.Contains(line, "full pass (audit) done") {
				return line
			}
		}
		t.Fatalf("no audit line in the log:\n%s", buf.String())
		return ""
	}
	if line := audit(); !strings.Contains(line, "fixes=0") || strings.Contains(line, "fix_") {
		t.Fatalf("audit of a consistent state: %s", line)
	}
	mu.Lock()
	if len(fixes) != 0 {
		t.Fatalf("audit of a consistent state told OnFix %v", fixes)
	}
	mu.Unlock()

	// A replica died between a script's due note and its index write.
	if err := h.Redis.Client.ZRem(t.Context(), h.Store.Keys().DueIndex(redisstore.DueShard("a")), "a").Err(); err != nil {
		t.Fatal(err)
	}
	if line := audit(); !strings.Contains(line, "fixes=1") || !strings.Contains(line, "fix_reindexed=1") || !strings.Contains(line, "level=WARN") {
		t.Fatalf("audit of a scope missing from the due index: %s", line)
	}
	mu.Lock()
	if fixes["reindexed"] != 1 {
		t.Fatalf("OnFix told %v, want reindexed once", fixes)
	}
	mu.Unlock()
	if line := audit(); !strings.Contains(line, "fixes=0") {
		t.Fatalf("the audit after the fix: %s", line)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}
