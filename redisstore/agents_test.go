package redisstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// report runs one report of pod's agent at the env's now, with no valid ticket.
func (e *env) report(pod string, draining bool, sessions ...string) (redisstore.AgentAnswer, error) {
	return e.store.AgentReport(context.Background(), redisstore.AgentReport{Scope: e.scope, Pod: pod, Sessions: sessions, Draining: draining, Now: e.now})
}

// reportProven runs one report of pod's agent listing sessions, of which proven came
// with a valid ticket.
func (e *env) reportProven(pod string, proven []string, sessions ...string) (redisstore.AgentAnswer, error) {
	return e.store.AgentReport(context.Background(), redisstore.AgentReport{Scope: e.scope, Pod: pod, Sessions: sessions, Proven: proven, Now: e.now})
}

// route routes a session at the env's now without queueing.
func (e *env) route(sid string) redisstore.RouteResult {
	e.t.Helper()
	res, err := e.store.SessionRoute(context.Background(), e.scope, redisstore.RouteArgs{Now: e.now, Session: sid})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// onePod registers the scope's first pod (its leader's claim given back) and returns it.
func (e *env) onePod() warmpool.Pod {
	e.t.Helper()
	pod, _, err := e.register(e.acquire("leader"), "leader")
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := e.store.ClaimRelease(context.Background(), e.scope, "leader", e.now); err != nil {
		e.t.Fatal(err)
	}
	return pod
}

// A report of a pod the pool does not have, or of a scope Redis does not have, is
// POD_NOT_FOUND: the agent should exit.
func TestReportOfAnUnknownPod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	if _, err := e.report("nobody", false); warmpool.ErrorCode(err) != warmpool.CodePodNotFound {
		t.Fatalf("report of an unknown pod: %v, want POD_NOT_FOUND", err)
	}
	_, err := e.store.AgentReport(context.Background(), redisstore.AgentReport{Scope: "other", Pod: "p", Now: e.now})
	if warmpool.ErrorCode(err) != warmpool.CodePodNotFound {
		t.Fatalf("report in an unknown scope: %v, want POD_NOT_FOUND", err)
	}
	pod := e.onePod()
	if _, err := e.store.PodPurge(context.Background(), e.scope, pod.ID, "dead", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.report(pod.ID, false); warmpool.ErrorCode(err) != warmpool.CodePodNotFound {
		t.Fatalf("report of a purged pod: %v, want POD_NOT_FOUND", err)
	}
}

// Reports alone keep a session past session_ttl_s: each refreshes the TTL of the
// sessions it lists; a listed session the pool does not bind to the pod is answered
// unknown, and nothing else changes.
func TestReportsKeepListedSessionsAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 10 })
	pod := e.onePod()
	if r := e.route("s1"); r.Pod.ID != pod.ID {
		t.Fatalf("s1 routed to %+v", r)
	}
	start := e.now
	for range 6 { // 30 s of reports every 5 s, three session TTLs
		e.now = e.now.Add(5 * time.Second)
		a, err := e.report(pod.ID, false, "s1", "ghost")
		if err != nil {
			t.Fatal(err)
		}
		if a.Interval != 5*time.Second || !slices.Equal(a.Unknown, []string{"ghost"}) {
			t.Fatalf("answer %+v: want the 5 s interval and ghost unknown", a)
		}
	}
	if exp := e.snap().SessExp["s1"]; !exp.Equal(e.now.Add(10 * time.Second)) {
		t.Fatalf("s1 expires %v, want the last report + 10 s (it started at %v)", exp, start)
	}
	if r := e.route("s1"); r.Kind != redisstore.RouteBound || r.Pod.ID != pod.ID {
		t.Fatalf("s1 after 30 s of reports: %+v, want still bound to %s", r, pod.ID)
	}
}

// A report spares its pod the probes until three intervals later; the shard's index
// is written only when less than two intervals of that are left (every other report),
// and an entry whose time has passed no longer spares the pod and is dropped.
func TestReportsSpareThePodTheProbes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	pod := e.onePod()
	ref := redisstore.PodRef{Scope: e.scope, Pod: pod.ID}
	shard := redisstore.DueShard(e.scope)
	spared := func(at time.Time) bool {
		t.Helper()
		got, err := e.store.Spared(context.Background(), shard, []redisstore.PodRef{ref}, at)
		if err != nil {
			t.Fatal(err)
		}
		return got[ref]
	}
	if spared(e.now) {
		t.Fatal("a pod that never reported is spared")
	}
	first := e.now
	var moved []time.Duration
	for i := range 5 {
		e.now = first.Add(time.Duration(i) * 5 * time.Second)
		a, err := e.report(pod.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		if !a.SparedUntil.IsZero() {
			moved = append(moved, a.SparedUntil.Sub(first))
		}
	}
	if want := []time.Duration{15 * time.Second, 25 * time.Second, 35 * time.Second}; !slices.Equal(moved, want) {
		t.Fatalf("spared until %v after the first report, want %v", moved, want)
	}
	if !spared(e.now.Add(14 * time.Second)) {
		t.Fatal("a pod that reported 14 s ago (interval 5 s) is probed")
	}
	if spared(e.now.Add(15 * time.Second)) {
		t.Fatal("a pod whose reports stopped three intervals ago is still spared")
	}
	if _, _, reporting, err := e.store.ProbeWindow(context.Background(), shard, e.now.Add(15*time.Second)); err != nil || reporting {
		t.Fatalf("the next probe window finds pods reporting (%v, %v) when the only one stopped", reporting, err)
	}
	if n, err := e.r.Client.ZCard(context.Background(), e.store.Keys().Reported(shard)).Result(); err != nil || n != 0 {
		t.Fatalf("the index keeps %d entries past their time (%v)", n, err)
	}
}

// A draining pod takes no new session; its sessions stay, and once the last one ends
// the pod is idle, of no current version, and its scope is due at once.
func TestDrainingPodTakesNothingNewAndGoesWhenEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	pod := e.onePod()
	e.route("s1")
	if _, err := e.report(pod.ID, true, "s1"); err != nil {
		t.Fatal(err)
	}
	if r := e.route("s2"); r.Served() {
		t.Fatalf("s2 went to the draining pod: %+v", r)
	}
	if r := e.route("s1"); r.Kind != redisstore.RouteBound || r.Pod.ID != pod.ID {
		t.Fatalf("s1 of the draining pod: %+v, want still bound", r)
	}
	if _, err := e.store.SessionEnd(ctx, e.scope, "s1", e.now); err != nil {
		t.Fatal(err)
	}
	p := e.snap().Pods[0]
	if !p.Draining || !p.Idle {
		t.Fatalf("pod after its last session ended: %+v, want draining and idle", p)
	}
	due, ok, err := e.store.ScopeDue(ctx, e.scope, e.now)
	if err != nil || !ok || due.After(e.now) {
		t.Fatalf("scope due %v %v %v, want due at once to delete the drained pod", due, ok, err)
	}
}

// With sessions_from_reports, a session bound to the pod that two reports in a row
// leave out is ended and its slot freed; one left out once is kept.
func TestSessionsLeftOutTwiceAreEnded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Agent.SessionsFromReports = true })
	pod := e.onePod()
	e.route("s1")
	e.route("s2")
	steps := []struct {
		listed []string
		ended  int
		left   []string
	}{
		{[]string{"s1", "s2"}, 0, []string{"s1", "s2"}},
		{[]string{"s1"}, 0, []string{"s1", "s2"}},
		{[]string{"s1", "s2"}, 0, []string{"s1", "s2"}}, // back: the miss is forgotten
		{[]string{"s1"}, 0, []string{"s1", "s2"}},
		{[]string{"s1"}, 1, []string{"s1"}},
	}
	for i, st := range steps {
		e.now = e.now.Add(5 * time.Second)
		a, err := e.report(pod.ID, false, st.listed...)
		if err != nil {
			t.Fatal(err)
		}
		s := e.snap()
		var left []string
		for sid := range s.Sessions {
			left = append(left, sid)
		}
		slices.Sort(left)
		if a.Ended != st.ended || !slices.Equal(left, st.left) || s.Pods[0].Slots != len(st.left) {
			t.Fatalf("report %d listing %v: ended %d, sessions %v, slots %d; want %d, %v", i+1, st.listed, a.Ended, left, s.Pods[0].Slots, st.ended, st.left)
		}
	}
}

// Without sessions_from_reports, a report that leaves a session out ends nothing.
func TestSessionsLeftOutStayWithoutGroundTruth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	pod := e.onePod()
	e.route("s1")
	for range 3 {
		if a, err := e.report(pod.ID, false); err != nil || a.Ended != 0 {
			t.Fatalf("report: %+v, %v", a, err)
		}
	}
	if _, ok := e.snap().Sessions["s1"]; !ok {
		t.Fatal("s1 ended by reports that do not say sessions")
	}
}

// After Redis lost a pod's sessions, the pod is adopted with every slot held; its
// reports bind the sessions they name with a valid ticket back to it (SPEC §12.4), and
// a route of such a session finds its old pod. A session named without one is
// unknown, and holds no slot: after a data loss, a pod's agent cannot take a session
// by naming it first (issue 31).
func TestReportsBindSessionsBackToAnAdoptedPod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil) // pod_concurrency 2
	pod := warmpool.Pod{ID: "p-adopted", ScopeID: e.scope, DeployVer: e.snapVer(), SSEURL: "http://x/sse", Ready: true}
	if st, err := e.store.PodAdopt(context.Background(), pod, e.now, true); err != nil || st != redisstore.AdoptAdopted {
		t.Fatalf("adopt: %q, %v", st, err)
	}
	a, err := e.reportProven(pod.ID, []string{"s1"}, "s1", "s2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Unknown, []string{"s2"}) {
		t.Fatalf("unknown %v, want s2: its ticket was not proven", a.Unknown)
	}
	if s := e.snap(); s.Sessions["s1"] != pod.ID || s.Sessions["s2"] != "" {
		t.Fatalf("after the first report: sessions %v, want s1 alone bound", s.Sessions)
	}
	// proven, and a session bound already, touched without a ticket
	if a, err = e.reportProven(pod.ID, []string{"s2"}, "s1", "s2"); err != nil || len(a.Unknown) != 0 {
		t.Fatalf("second report: %+v, %v; want none unknown", a, err)
	}
	s := e.snap()
	if s.Sessions["s1"] != pod.ID || s.Sessions["s2"] != pod.ID || s.Pods[0].Slots != 2 || len(s.ClaimPod) != 0 {
		t.Fatalf("after the report: sessions %v, pod %+v, claims %v", s.Sessions, s.Pods[0], s.ClaimPod)
	}
	if r := e.route("s1"); r.Kind != redisstore.RouteBound || r.Pod.ID != pod.ID {
		t.Fatalf("s1 after the rebuild: %+v, want its old pod", r)
	}
}

// snapVer is the scope's published deploy_ver.
func (e *env) snapVer() string {
	e.t.Helper()
	rec, err := e.store.Scope(context.Background(), e.scope)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec.DeployVer
}

// A report lists at most what its pod may hold (SPEC §12.4): the scope's
// pod_concurrency, or the pod's slots when a lowered pod_concurrency left it more.
// One that lists more is VALIDATION and touches nothing: no session's TTL, not the
// pod's spared time. ReportCap answers that bound in one round trip, POD_NOT_FOUND for
// a scope Redis does not have. Before, a report could list 10,000 sessions whatever
// pod_concurrency, each read in the script.
func TestReportsListNoMoreThanThePodHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, nil) // pod_concurrency 2
	pod := e.onePod()
	e.route("s1")
	most := func(want int) {
		t.Helper()
		if n, err := e.store.ReportCap(ctx, e.scope, pod.ID); err != nil || n != want {
			t.Fatalf("ReportCap: %d, %v; want %d", n, err, want)
		}
	}
	most(2)
	before := e.snap().SessExp["s1"]
	e.now = e.now.Add(5 * time.Second)
	if _, err := e.report(pod.ID, false, "s1", "s2", "s3"); warmpool.ErrorCode(err) != warmpool.CodeValidation {
		t.Fatalf("a report of 3 sessions on a pod of 2: %v, want VALIDATION", err)
	}
	agents, err := e.r.Client.HLen(ctx, redisstore.NewKeyspace(e.r.Prefix).Scope(e.scope).Agents).Result()
	if s := e.snap(); err != nil || !s.SessExp["s1"].Equal(before) || agents != 0 {
		t.Fatalf("the refused report touched s1 (%v, was %v) or spared the pod (%d fields, %v)", s.SessExp["s1"], before, agents, err)
	}
	// pod_concurrency lowered to 1 under a pod of 2 sessions: its reports list both
	e.route("s2")
	e.publish(func(c *warmpool.ScopeConfig) { c.Pool.MaxConcurrency, c.Pool.PodConcurrency = 4, 1 })
	most(2)
	if a, err := e.report(pod.ID, false, "s1", "s2"); err != nil || len(a.Unknown) != 0 {
		t.Fatalf("the 2 sessions of a pod over the lowered pod_concurrency: %+v, %v", a, err)
	}
	if _, err := e.report(pod.ID, false, "s1", "s2", "s3"); warmpool.ErrorCode(err) != warmpool.CodeValidation {
		t.Fatalf("3 sessions on a pod of 2: %v, want VALIDATION", err)
	}
	if _, err := e.store.ReportCap(ctx, "other", pod.ID); warmpool.ErrorCode(err) != warmpool.CodePodNotFound {
		t.Fatalf("ReportCap of a scope Redis lacks: %v, want POD_NOT_FOUND", err)
	}
}
