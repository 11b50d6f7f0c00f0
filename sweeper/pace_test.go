package sweeper_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/sweeper"
)

// paceLog drives the full pass's time in a test: each round trip of the replica to
// Redis (a command, or a pipeline) is perCall of work on a clock of its own, and each
// wait moves that clock by its length. It records each wait with the calls made since
// the one before; it is a go-redis hook.
type paceLog struct {
	clock   *testredis.Clock
	perCall time.Duration
	sleep   func(ctx context.Context, d time.Duration) error

	mu    sync.Mutex
	calls int // since the last wait
	waits []pacedStep
}

type pacedStep struct {
	calls int
	wait  time.Duration
}

// newPaceLog paces the harness's full pass on a paceLog.
func newPaceLog(h *harness, perCall time.Duration) *paceLog {
	l := &paceLog{clock: testredis.NewClock(), perCall: perCall,
		sleep: func(context.Context, time.Duration) error { return nil }}
	sweeper.SetPace(h.sw, l.clock.Now, l.wait)
	h.client.AddHook(l)
	return l
}

func (l *paceLog) call() {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
	l.clock.Advance(l.perCall)
}

func (l *paceLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *paceLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.call()
		return next(ctx, cmd)
	}
}

func (l *paceLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.call()
		return next(ctx, cmds)
	}
}

func (l *paceLog) wait(ctx context.Context, d time.Duration) error {
	l.mu.Lock()
	l.waits, l.calls = append(l.waits, pacedStep{l.calls, d}), 0
	l.mu.Unlock()
	l.clock.Advance(d)
	return l.sleep(ctx, d)
}

// steps are the waits so far and the calls made after the last.
func (l *paceLog) steps() ([]pacedStep, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]pacedStep(nil), l.waits...), l.calls
}

// The full pass run as a job works at most PassDuty of its wall time, a scope at a
// time: before each scope of each of its loops (stored configs, reconcile, repair,
// reindex) it waits (1-duty)/duty times the work since its last wait, so it never
// works long without letting the routes have the machine.
func TestFullPassKeepsItsDuty(t *testing.T) {
	h := newHarness(t, func(o *options) { o.sweep.PassDuty = 0.25 })
	const scopes = 20
	for i := range scopes {
		h.Scope(fmt.Sprintf("s%02d", i), 2, 1)
	}
	h.addPod("s00", "p1", 1)
	l := newPaceLog(h, time.Millisecond)
	if err := h.sw.ReconcileJob().Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	waits, tail := l.steps()
	// A step is a few calls (reconcile reads a scope and its pool), or the pass's start,
	// or the end of reconcile; a loop left unpaced is a call per scope at least.
	const maxStep = 10
	if len(waits) < 4*scopes {
		t.Fatalf("%d waits in a pass over %d scopes, want one per scope in each of its 4 loops", len(waits), scopes)
	}
	for i, w := range waits {
		if want := time.Duration(3*w.calls) * time.Millisecond; w.wait != want {
			t.Errorf("wait %d: %v after %d ms of work, want %v (duty 0.25)", i, w.wait, w.calls, want)
		}
		if w.calls > maxStep {
			t.Errorf("wait %d: after %d calls to Redis, want at most %d: the pass worked on without waiting", i, w.calls, maxStep)
		}
	}
	if tail > maxStep {
		t.Errorf("%d calls to Redis after the last wait, want at most %d", tail, maxStep)
	}
}

// A paced pass stops while it waits as soon as its job's context ends (shutdown, or
// its lease lost), however long the wait was to be.
func TestPacedPassStopsWhenCancelled(t *testing.T) {
	h := newHarness(t, func(o *options) { o.sweep.PassDuty = 0.25 })
	h.Scope("a", 2, 1)
	h.Scope("b", 2, 1)
	l := newPaceLog(h, time.Hour) // each wait is hours long
	waiting := make(chan struct{})
	var once sync.Once
	l.sleep = func(ctx context.Context, d time.Duration) error {
		once.Do(func() { close(waiting) })
		return sweeper.Sleep(ctx, d)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.sw.ReconcileJob().Run(ctx) }()
	replicatest.Recv(t, "the pass to wait", waiting)
	cancel()
	if err := replicatest.Recv(t, "the cancelled pass to return", done); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled pass returned %v, want context.Canceled", err)
	}
}

// A pass that finds the keyspace lost rebuilds it and reindexes every scope flat out:
// until then no scope's due work is found.
func TestRebuildingPassIsNotPaced(t *testing.T) {
	h := newHarness(t, func(o *options) { o.sweep.PassDuty = 0.25 })
	h.Scope("a", 2, 1)
	h.Scope("b", 2, 1)
	h.flush()
	l := newPaceLog(h, time.Millisecond)
	if err := h.sw.ReconcileJob().Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if waits, _ := l.steps(); len(waits) != 0 {
		t.Fatalf("the rebuilding pass waited %d times: %v", len(waits), waits)
	}
	if live, err := h.Store.EpochLive(t.Context()); err != nil || !live {
		t.Fatalf("keyspace not rebuilt: live %v, %v", live, err)
	}
}
