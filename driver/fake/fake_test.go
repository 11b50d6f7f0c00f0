package fake_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/drivertest"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/await"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the PodDriver contract: Kill marks a pod dead, FailNext fails
// deploys, Hold stalls them.
func TestConformance(t *testing.T) {
	const reason = "image pull failed (injected)"
	drivertest.Run(t, func(t *testing.T, mode drivertest.Mode) *drivertest.Harness {
		f := mustFake(t)
		h := &drivertest.Harness{Driver: f, Kill: func(_ *testing.T, p warmpool.Pod) { f.Kill(p.ID, "OOMKilled") }}
		switch mode {
		case drivertest.Failing:
			f.FailNext(math.MaxInt, reason)
			h.FailReason = reason
		case drivertest.Stalled:
			t.Cleanup(f.Hold())
		}
		return h
	})
}

// TestConformanceShared runs the contract on a driver that keeps its pods in a
// directory.
func TestConformanceShared(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, mode drivertest.Mode) *drivertest.Harness {
		f := mustShared(t, t.TempDir())
		h := &drivertest.Harness{Driver: f, Kill: func(_ *testing.T, p warmpool.Pod) { f.Kill(p.ID, "OOMKilled") }}
		switch mode {
		case drivertest.Failing:
			f.FailNext(math.MaxInt, "injected")
			h.FailReason = "injected"
		case drivertest.Stalled:
			t.Cleanup(f.Hold())
		}
		return h
	})
}

// Two drivers sharing a directory, as the fake drivers of two replicas on one machine:
// each sees, probes and may delete the other's pods, and one name is created once.
func TestSharedDriversSeeOneAnother(t *testing.T) {
	dir := t.TempDir()
	a, b := mustShared(t, dir), mustShared(t, dir)
	pod := mustDeploy(t, a, "s", 1)
	listed, err := b.List(testCtx(t))
	if err != nil || len(listed) != 1 || listed[0] != pod || !listed[0].Ready {
		t.Fatalf("b lists %+v, %v; want a's ready pod %+v", listed, err, pod)
	}
	if err := b.Probe(testCtx(t), pod); err != nil {
		t.Fatalf("b probes a's pod: %v", err)
	}
	if _, err := b.Deploy(testCtx(t), fakeReq("s", 1)); warmpool.ErrorCode(err) != warmpool.CodeDeployFailed {
		t.Fatalf("b deploys a's name again: %v, want DEPLOY_FAILED (already exists)", err)
	}
	a.Kill(pod.ID, "node lost")
	if p := b.Pods(); len(p) != 1 || p[0].Dead != "node lost" || p[0].Ready {
		t.Fatalf("b sees %+v after a killed the pod", p)
	}
	if err := b.Delete(testCtx(t), pod); err != nil {
		t.Fatal(err)
	}
	if p := a.Pods(); len(p) != 0 {
		t.Fatalf("a still lists %+v after b deleted it", p)
	}
	if err := a.Probe(testCtx(t), pod); !errors.Is(err, warmpool.ErrPodNotFound) {
		t.Fatalf("probe of the deleted pod: %v", err)
	}
	// A driver started later on the same directory finds the pods there.
	mustDeploy(t, b, "s", 2)
	if p := mustShared(t, dir).Pods(); len(p) != 1 || p[0].Fence != 2 {
		t.Fatalf("a new driver on the directory lists %+v", p)
	}
}

// TestSharedFaults: faults written to a shared directory reach every driver on it from
// its next deploy on, and clearing them mends the deploys.
func TestSharedFaults(t *testing.T) {
	dir := t.TempDir()
	a, b := mustShared(t, dir), mustShared(t, dir)
	short := func(fence int64) warmpool.DeployRequest {
		r := fakeReq("s", fence)
		r.Spec.ReadyTimeoutS = 1
		return r
	}
	cases := []struct {
		name   string
		faults fake.Faults
		want   string
	}{
		{"create error", fake.Faults{CreateError: "quota exceeded"}, "create: quota exceeded"},
		{"create hangs", fake.Faults{CreateHang: true}, "create did not return within 1s"},
		{"never ready", fake.Faults{NeverReady: true}, "not ready within 1s"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := fake.SetFaults(dir, c.faults); err != nil {
				t.Fatal(err)
			}
			for j, d := range []*fake.Driver{a, b} {
				fence := int64(10*i + j + 1)
				_, err := d.Deploy(testCtx(t), short(fence))
				if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("driver %d: %v, want DEPLOY_FAILED with %q", j, err, c.want)
				}
			}
			if p := a.Pods(); len(p) != 0 {
				t.Fatalf("pods left after failed deploys: %+v", p)
			}
		})
	}
	if err := fake.SetFaults(dir, fake.Faults{}); err != nil {
		t.Fatal(err)
	}
	if p := mustDeploy(t, b, "s", 99); !p.Ready {
		t.Fatalf("deploy after the faults were cleared: %+v", p)
	}
	if p := a.Pods(); len(p) != 1 {
		t.Fatalf("a lists %+v; the faults file must not count as a pod", p)
	}
}

func mustShared(t *testing.T, dir string) *fake.Driver {
	t.Helper()
	f, err := fake.NewShared(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func mustFake(t *testing.T) *fake.Driver {
	t.Helper()
	f := fake.New()
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func fakeReq(scope string, fence int64) warmpool.DeployRequest {
	cfg := warmpool.DefaultScopeConfig()
	if err := cfg.Normalize(); err != nil {
		panic(err)
	}
	return warmpool.DeployRequest{ScopeID: scope, DeployVer: "v1", Fence: fence, Spec: cfg.Deploy}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustDeploy deploys a pod of scope that must come up.
func mustDeploy(t *testing.T, f *fake.Driver, scope string, fence int64) warmpool.Pod {
	t.Helper()
	pod, err := f.Deploy(testCtx(t), fakeReq(scope, fence))
	if err != nil {
		t.Fatalf("Deploy of %s fence %d: %v", scope, fence, err)
	}
	return pod
}

// deployAsync runs Deploy in the background; the channel yields its error.
func deployAsync(ctx context.Context, d warmpool.PodDriver, req warmpool.DeployRequest) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := d.Deploy(ctx, req)
		ch <- err
	}()
	return ch
}

// TestFakeRecords: the records of deploys and deletes, and the duplicate create of one
// fence that fencing relies on.
func TestFakeRecords(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)

	pod := mustDeploy(t, f, "demo", 7)
	name := warmpool.PodName("demo", 7)
	if pod.SSEURL != "http://fake.invalid/"+name+"/sse" || pod.HealthURL != "http://fake.invalid/"+name+"/health" {
		t.Fatalf("urls = %q %q", pod.SSEURL, pod.HealthURL)
	}
	_, err := f.Deploy(ctx, fakeReq("demo", 7))
	drivertest.WantError(t, err, warmpool.CodeDeployFailed, "already exists")
	if n := f.DeployCount(); n != 2 {
		t.Fatalf("DeployCount = %d, want 2", n)
	}
	recs := f.Deploys()
	if recs[0].Err != nil || recs[0].Pod.ID != name || recs[0].End.Before(recs[0].Start) || recs[1].Err == nil {
		t.Fatalf("records = %+v", recs)
	}

	for range 2 {
		if err := f.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Probe(ctx, pod); !errors.Is(err, warmpool.ErrPodNotFound) {
		t.Fatalf("Probe of deleted pod = %v, want ErrPodNotFound", err)
	}
	if got := f.Deleted(); len(got) != 2 || got[0] != name {
		t.Fatalf("Deleted = %v", got)
	}
	// After the delete the name is free again.
	mustDeploy(t, f, "demo", 7)
}

func TestFakeZeroValue(t *testing.T) {
	var f fake.Driver
	if _, err := f.Deploy(testCtx(t), fakeReq("zero", 1)); err != nil {
		t.Fatal(err)
	}
	if len(f.Pods()) != 1 {
		t.Fatal("zero-value Fake lost its pod")
	}
}

func TestFakeHoldAndOverlap(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)

	// Sequential deploys never overlap.
	for i := int64(1); i <= 3; i++ {
		mustDeploy(t, f, "seq", i)
	}
	if got := f.MaxOverlap(); got != 1 {
		t.Fatalf("MaxOverlap after sequential deploys = %d, want 1", got)
	}

	release := f.Hold()
	var errs []<-chan error
	for i := int64(1); i <= 4; i++ {
		errs = append(errs, deployAsync(ctx, f, fakeReq("par", i)))
	}
	if err := f.WaitInFlight(ctx, 4); err != nil {
		t.Fatal(err)
	}
	// Held deploys have created their pods, not ready yet, as a cluster would show them.
	notReady := 0
	for _, p := range f.Pods() {
		if p.ScopeID == "par" && !p.Ready {
			notReady++
		}
	}
	if notReady != 4 {
		t.Fatalf("%d held pods listed not ready, want 4: %+v", notReady, f.Pods())
	}
	if got := f.MaxOverlap(); got != 4 {
		t.Fatalf("MaxOverlap while held = %d, want 4", got)
	}
	release()
	release() // harmless
	for _, ch := range errs {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if f.InFlight() != 0 || f.DeployCount() != 7 || f.MaxOverlap() != 4 {
		t.Fatalf("after release: in flight %d, count %d, overlap %d", f.InFlight(), f.DeployCount(), f.MaxOverlap())
	}
	for _, p := range f.Pods() {
		if !p.Ready {
			t.Fatalf("pod %s not ready after release", p.ID)
		}
	}
}

func TestFakeNestedHold(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)
	r1, r2 := f.Hold(), f.Hold()
	done := deployAsync(ctx, f, fakeReq("nest", 1))
	if err := f.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r1()
	// Still held by r2: the deploy must not finish (its hold channel stays open, so
	// nothing even wakes it).
	select {
	case err := <-done:
		t.Fatalf("deploy finished while a hold remained: %v", err)
	default:
	}
	if f.InFlight() != 1 {
		t.Fatal("deploy left flight while a hold remained")
	}
	r2()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestFakeFailNext(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)
	f.FailNext(2, "image pull backoff")
	for i := int64(1); i <= 2; i++ {
		_, err := f.Deploy(ctx, fakeReq("fail", i))
		drivertest.WantError(t, err, warmpool.CodeDeployFailed, "image pull backoff")
	}
	if pods := f.Pods(); len(pods) != 0 {
		t.Fatalf("failed deploys left pods: %+v", pods)
	}
	mustDeploy(t, f, "fail", 3)
	recs := f.Deploys()
	if len(recs) != 3 || recs[0].Err == nil || recs[1].Err == nil || recs[2].Err != nil {
		t.Fatalf("records = %+v", recs)
	}
}

func TestFakeDelayAndCancel(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)

	f.SetDeployDelay(30 * time.Millisecond)
	mustDeploy(t, f, "slow", 1)
	if r := f.Deploys()[0]; r.End.Sub(r.Start) < 30*time.Millisecond {
		t.Fatalf("deploy took %v, want at least the 30ms delay", r.End.Sub(r.Start))
	}

	// A cancelled ctx cuts the delay short (a held deploy is the conformance suite's
	// case), returns ctx.Err() and removes the pod.
	f.SetDeployDelay(time.Hour)
	dctx, cancel := context.WithCancel(ctx)
	done := deployAsync(dctx, f, fakeReq("slow", 2))
	if err := f.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Deploy after cancel = %v, want context.Canceled", err)
	}
	if pods := f.Pods(); len(pods) != 1 {
		t.Fatalf("cancelled deploy left its pod: %+v", pods)
	}
}

func TestFakeProbeAndExternal(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)
	pod := mustDeploy(t, f, "k", 1)
	unhealthy := errors.New("health answered 500")
	f.SetProbe(pod.ID, unhealthy)
	if err := f.Probe(ctx, pod); !errors.Is(err, unhealthy) {
		t.Fatalf("Probe = %v, want the injected error", err)
	}
	f.SetProbe(pod.ID, nil)
	if err := f.Probe(ctx, pod); err != nil {
		t.Fatalf("Probe after clearing = %v", err)
	}

	f.Kill(pod.ID, "OOMKilled")
	f.Kill("no-such-pod", "x") // no effect
	if pods := f.Pods(); len(pods) != 1 || pods[0].Dead != "OOMKilled" {
		t.Fatalf("pods after Kill = %+v", pods)
	}

	f.AddExternal(warmpool.Pod{ID: "orphan-1", ScopeID: "k", DeployVer: "old", Fence: 9})
	f.AddExternal(warmpool.Pod{ID: "orphan-2", ScopeID: "k", Dead: "Evicted"})
	byID := map[string]warmpool.Pod{}
	for _, p := range f.Pods() {
		byID[p.ID] = p
	}
	if o := byID["orphan-1"]; !o.Ready || o.SSEURL != "http://fake.invalid/orphan-1/sse" || o.CreatedAt == 0 {
		t.Fatalf("external pod = %+v", o)
	}
	if o := byID["orphan-2"]; o.Ready || o.Dead != "Evicted" {
		t.Fatalf("dead external pod = %+v", o)
	}
}

func TestFakeDeleteOrKillWhileDeploying(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)
	release := f.Hold()
	deleted := deployAsync(ctx, f, fakeReq("race", 1))
	killed := deployAsync(ctx, f, fakeReq("race", 2))
	if err := f.WaitInFlight(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx, warmpool.Pod{ID: warmpool.PodName("race", 1)}); err != nil {
		t.Fatal(err)
	}
	f.Kill(warmpool.PodName("race", 2), "Error")
	release()
	drivertest.WantError(t, <-deleted, warmpool.CodeDeployFailed, "deleted")
	drivertest.WantError(t, <-killed, warmpool.CodeDeployFailed, "died")
	if pods := f.Pods(); len(pods) != 0 {
		t.Fatalf("pods left: %+v", pods)
	}
}

func TestFakeClose(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)
	release := f.Hold()
	defer release()
	done := deployAsync(ctx, f, fakeReq("c", 1))
	if err := f.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	drivertest.WantError(t, <-done, warmpool.CodeDeployFailed, "closed")
	_, err := f.Deploy(ctx, fakeReq("c", 2))
	drivertest.WantError(t, err, warmpool.CodeDeployFailed, "closed")
	if err := f.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// TestFakeConcurrent drives every method at once, for the race detector; a fence is
// deployed by two callers, so exactly one of each pair succeeds.
func TestFakeConcurrent(t *testing.T) {
	f := mustFake(t)
	ctx := testCtx(t)
	f.SetDeployDelay(time.Millisecond)
	const fences = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := map[int64]int{}
	for i := range 2 * fences {
		fence := int64(i % fences)
		wg.Go(func() {
			pod, err := f.Deploy(ctx, fakeReq("conc", fence))
			if err == nil {
				mu.Lock()
				ok[fence]++
				mu.Unlock()
				_ = f.Probe(ctx, pod)
				f.Kill(pod.ID, "x")
			}
			_, _ = f.List(ctx)
			_ = f.MaxOverlap()
			_ = f.Deploys()
		})
	}
	wg.Wait()
	for fence := range int64(fences) {
		if ok[fence] != 1 {
			t.Fatalf("fence %d deployed %d times, want exactly 1", fence, ok[fence])
		}
	}
	if f.DeployCount() != 2*fences {
		t.Fatalf("DeployCount = %d", f.DeployCount())
	}
}

// A shared driver reports the pods of the other processes of its directory as its
// watch sees them: those there before (its initial list), one another's deploy, the
// kill and the delete; a memory driver reports its pods at once and its own changes.
func TestPodEventsAcrossASharedDirectory(t *testing.T) {
	dir := t.TempDir()
	a, b := mustShared(t, dir), mustShared(t, dir)
	before := mustDeploy(t, b, "s", 1)

	var mu sync.Mutex
	var events []warmpool.PodEvent
	a.OnPodEvent(func(ev warmpool.PodEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() })
	saw := func(what string, match func(warmpool.PodEvent) bool) {
		t.Helper()
		await.True(t, 10*time.Second, what, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.ContainsFunc(events, match)
		})
	}
	saw("the pod there before, ready", func(ev warmpool.PodEvent) bool { return ev.Pod == before && !ev.Gone })

	other := mustDeploy(t, b, "s", 2)
	saw("the other process's new pod, ready", func(ev warmpool.PodEvent) bool { return ev.Pod == other && !ev.Gone })
	b.Kill(other.ID, "OOMKilled")
	saw("the other process's kill", func(ev warmpool.PodEvent) bool {
		return ev.Pod.ID == other.ID && ev.Pod.Dead == "OOMKilled" && !ev.Pod.Ready && !ev.Gone
	})
	if err := b.Delete(testCtx(t), before); err != nil {
		t.Fatal(err)
	}
	saw("the other process's delete, gone", func(ev warmpool.PodEvent) bool {
		return ev.Pod.ID == before.ID && ev.Gone && ev.Pod.Dead != "" && !ev.Pod.Ready
	})
	mu.Lock()
	for _, ev := range events {
		if ev.Gone && ev.Pod.ID != before.ID {
			t.Errorf("gone reported of a pod still there: %+v", ev)
		}
	}
	mu.Unlock()

	m := mustFake(t)
	kept := mustDeploy(t, m, "s", 3)
	var mine []warmpool.PodEvent
	m.OnPodEvent(func(ev warmpool.PodEvent) { mine = append(mine, ev) })
	m.AddExternal(warmpool.Pod{ID: "ext", ScopeID: "s", DeployVer: "v1", Fence: 4})
	if len(mine) != 2 || mine[0].Pod != kept || mine[1].Pod.ID != "ext" || !mine[1].Pod.Ready || mine[1].Gone {
		t.Fatalf("memory driver's events %+v, want its pod, then the external one ready", mine)
	}
}
