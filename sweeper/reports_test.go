package sweeper_test

import (
	"errors"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// The watch does not probe a pod whose agent reported within three report intervals;
// once its reports stop it is probed as before, and a pod that fails its probes then is
// buried within three intervals plus the probe threshold. A pod that never reports is
// probed throughout.
func TestWatchSkipsPodsThatReport(t *testing.T) {
	var drv *countingDriver
	h := newHarness(t, countingProbes(&drv))
	ctx := t.Context()
	const period, interval, tick = 2 * time.Second, 5 * time.Second, 2 * time.Second
	h.Scope("a", 8, 2, func(c *warmpool.ScopeConfig) {
		c.Pool.ProbePeriodS, c.Agent.ReportIntervalS = int(period/time.Second), int(interval/time.Second)
	})
	h.addPod("a", "reporter", 1)
	h.addPod("a", "silent", 2)
	report := func() {
		t.Helper()
		if _, err := h.Store.AgentReport(ctx, redisstore.AgentReport{Scope: "a", Pod: "reporter", Now: h.Clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	watch := func() map[string]int {
		t.Helper()
		if err := h.sw.Watch(ctx); err != nil {
			t.Fatal(err)
		}
		return drv.take()
	}
	report()
	watch()
	probed := map[string]int{}
	lastReport := h.Clock.Now()
	for range 15 { // 30 s, reports every 4 s (interval 5 s, with jitter)
		h.Clock.Advance(tick)
		if h.Clock.Now().Sub(lastReport) >= 4*time.Second {
			report()
			lastReport = h.Clock.Now()
		}
		for pod, n := range watch() {
			probed[pod] += n
		}
	}
	if probed["reporter"] != 0 || probed["silent"] != 15 {
		t.Fatalf("probes in 30 s: %v; want none of the reporter, one per period (15) of the silent pod", probed)
	}

	// The reporter stops (SIGSTOP) and fails its probes from now on.
	h.Fake.SetProbe("reporter", errors.New("health: connection refused"))
	stopped := lastReport
	bound := reportBound(interval, period, 3)
	var buriedAt time.Duration
	for h.Clock.Now().Sub(stopped) <= bound+tick {
		h.Clock.Advance(tick)
		n := watch()["reporter"]
		since := h.Clock.Now().Sub(stopped)
		if n > 0 && since <= 2*interval {
			t.Fatalf("the reporter probed %v after its last report, within two intervals", since)
		}
		if _, ok := podState(h.Snap("a"), "reporter"); !ok {
			buriedAt = since
			break
		}
	}
	if buriedAt == 0 || buriedAt > bound || !h.deleted("reporter") {
		t.Fatalf("the stopped reporter buried after %v (0: not at all), deleted %v; want within %v", buriedAt, h.deleted("reporter"), bound)
	}
}

// reportBound is how long after its last report a stopped agent's pod may live: three
// report intervals spare it, then threshold probes one period apart fail.
func reportBound(interval, period time.Duration, threshold int) time.Duration {
	return warmpool.ReportFreshIntervals*interval + time.Duration(threshold)*period
}

// After Redis lost its data and the rebuild adopted the pods, the sessions a pod's
// reports name with a valid session_ticket (SPEC §12.4) are bound to it again, up to
// pod_concurrency, and route there; a session named without one is unknown, and a
// report naming more sessions than the pod may hold is refused whole.
func TestReportsRebindSessionsAfterAnEmptyRestart(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.Scope("a", 8, 2)
	p1 := h.route("a", "s1").PodID
	if p := h.route("a", "s2").PodID; p != p1 {
		t.Fatalf("s2 on %s, s1 on %s", p, p1)
	}
	h.waitDeploys()

	h.flush()
	h.reconcile()
	if h.observedCount("rebuilt") != 1 {
		t.Fatalf("no rebuild: %v", h.observedAll())
	}
	report := func(sessions, proven []string) (redisstore.AgentAnswer, error) {
		return h.Store.AgentReport(ctx, redisstore.AgentReport{Scope: "a", Pod: p1, Sessions: sessions, Proven: proven, Now: h.Clock.Now()})
	}
	if _, err := report([]string{"s1", "s2", "s3"}, []string{"s1", "s2", "s3"}); warmpool.ErrorCode(err) != warmpool.CodeValidation {
		t.Fatalf("a report of 3 sessions at pod_concurrency 2: %v, want VALIDATION", err)
	}
	a, err := report([]string{"s1", "s2"}, []string{"s1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Unknown) != 1 || a.Unknown[0] != "s2" {
		t.Fatalf("unknown %v: want s2, named without its ticket", a.Unknown)
	}
	if a, err = report([]string{"s1", "s2"}, []string{"s1", "s2"}); err != nil || len(a.Unknown) != 0 {
		t.Fatalf("the proven report: %+v, %v; want both bound", a, err)
	}
	for _, sid := range []string{"s1", "s2"} {
		if b := h.route("a", sid); b.PodID != p1 || b.New {
			t.Fatalf("%s after the rebuild: %+v, want its old pod %s", sid, b, p1)
		}
	}
	h.Check("a", true)
}
