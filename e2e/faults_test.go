//go:build faults

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/redisstore"
)

// The fault matrix (make faults): each case injects one fault into real processes
// (faults_rig_test.go), drives the API through it, and ends by checking the SPEC §6
// invariants on every snapshot taken while the fault ran and on the settled state
// after it. Each case's figures go to $FAULTS_OUT/matrix.json and matrix.md;
// docs/reliability.md shows the table of the last run.

// caseResult is one row of the matrix.
type caseResult struct {
	Case       string   `json:"case"`
	Injected   string   `json:"injected"`
	Operations int64    `json:"operations"`
	Checks     int      `json:"invariant_checks"`
	Violations []string `json:"violations"`
	RecoverMs  int64    `json:"recover_ms"`
	Notes      string   `json:"notes,omitempty"`
	Passed     bool     `json:"passed"`
}

type faultCase struct {
	name, injected string
	run            func(t *testing.T, res *caseResult)
}

var faultCases = []faultCase{
	{"kill -9 during deploys", "SIGKILL of the replica leading a cold burst's first deploy, 3 routes of the others in its room (8 routes, pod_concurrency 4, 3 replicas)", caseKillDuringDeploys},
	{"kill -9 mid-burst, no full pass", "SIGKILL of the replica leading a cold burst's 4 deploys (pod_concurrency 1, 5s deploys), every replica's full pass an hour away", caseKillMidBurstNoPass},
	{"kill -9 during follower waits", "SIGKILL of the replica whose two routes wait as followers of another replica's deploy", caseKillDuringFollowerWaits},
	{"kill -9 during sweeps", "SIGKILL of the replica whose autoscale job is deploying warm pods", caseKillDuringSweeps},
	{"SIGSTOP of a lease holder", "SIGSTOP of a deploy leader for 2x its 2s lease, a follower waiting, then SIGCONT", caseStopLeaseHolder},
	{"Redis SIGSTOP during register", "SIGSTOP of redis-server for 3.5s from a cold deploy's start (10s deploy lease) until after its pod is ready, a follower waiting", caseRedisStoppedDuringRegister},
	{"Redis CLIENT PAUSE", "CLIENT PAUSE 4000 ALL while routes, holds and touches run", func(t *testing.T, res *caseResult) { caseRedisPaused(t, res, false) }},
	{"Redis SIGSTOP", "SIGSTOP of redis-server for 4s while routes, holds and touches run", func(t *testing.T, res *caseResult) { caseRedisPaused(t, res, true) }},
	{"Redis restarted empty", "SIGKILL of redis-server, a new empty one on its port", caseRedisRestartedEmpty},
	{"failover that lost writes", "primary + replica; replication cut; 2 routes acknowledged on the primary only (one registered a pod); the replica promoted, the primary killed, the replicas restarted on the new primary", caseFailover},
	{"tenant quotas through a failover that lost writes", "a tenant (max_pods 3, max_sessions 6) over 2 scopes (pod_concurrency 2, pod_ttl_s 1) filled to its quotas; primary + replica, replication cut; on the primary only a pod's 2 sessions end (the pod purged) and another scope is granted a pod and 2 sessions; the replica promoted, the primary killed, the replicas restarted; a burst of 8 routes beyond the quotas", caseTenantFailover},
	{"agent reports through a pause and a failover", "agents of 2 pods report every 200ms through CLIENT PAUSE 3000 ALL, then through a failover that lost a route (primary + replica, replication cut, the replica promoted, the replicas restarted); one agent lists, besides the lost one with its ticket, a session no route bound (no ticket)", caseAgentReports},
	{"driver: create errors", "every create call fails (quota exceeded) during a burst of 3 routes, then mends", func(t *testing.T, res *caseResult) {
		caseDriverFault(t, res, fake.Faults{CreateError: "exceeded quota (injected)"})
	}},
	{"driver: create timeouts", "every create call hangs until the 2s ready timeout during a burst of 3 routes, then mends", func(t *testing.T, res *caseResult) {
		caseDriverFault(t, res, fake.Faults{CreateHang: true})
	}},
	{"driver: pods never Ready", "created pods never become Ready (2s ready timeout) during a burst of 3 routes, then mend", func(t *testing.T, res *caseResult) {
		caseDriverFault(t, res, fake.Faults{NeverReady: true})
	}},
}

func TestFaults(t *testing.T) {
	var results []caseResult
	for _, c := range faultCases {
		res := caseResult{Case: c.name, Injected: c.injected}
		ran := false
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			ran = true
			c.run(t, &res)
			for _, v := range res.Violations {
				t.Errorf("violation: %s", v)
			}
			res.Passed = !t.Failed()
		})
		if ran {
			results = append(results, res)
		}
	}
	writeMatrix(t, results)
}

// finish stops the watcher, waits for every scope to settle, and fills the row: the
// recovery time runs from faultEnd until the scopes settled. Then a full pass must find
// nothing left to fix (rig.audit).
func finish(r *rig, res *caseResult, w *watcher, faultEnd time.Time, within time.Duration, scopes ...string) {
	for _, scope := range scopes {
		checks, v := r.settle(scope, within)
		res.Checks += checks
		res.Violations = append(res.Violations, v...)
	}
	res.RecoverMs = time.Since(faultEnd).Milliseconds()
	defer r.audit()
	seen, checks := w.end()
	res.Checks += checks
	res.Violations = append(res.Violations, seen...)
	res.Operations = r.ops.Load()
}

// noAdoptedHolds reports whether no slot is held for a session lost with Redis's data
// (pod_adopt.lua's claims "adopted:<pod>:<n>").
func noAdoptedHolds(s redisstore.Snapshot) bool {
	for c := range s.ClaimPod {
		if strings.HasPrefix(c, "adopted:") {
			return false
		}
	}
	return true
}

// notRetryable appends a violation for a 502 answered where a retry would have served
// the call (SPEC §11.5: 502 DEPLOY_FAILED only when the deploy itself failed; a lost
// leader, a lost lease or a Redis stall answers 503 with retry_after).
func notRetryable(res *caseResult, what string, a answer) {
	if a.err == nil && a.status == http.StatusBadGateway {
		res.Violations = append(res.Violations, fmt.Sprintf("%s answered %s: a retry would have served it", what, a))
	}
}

// goRoute routes in the background; the channel yields the answer.
func goRoute(r *rig, rep *faultReplica, scope, session string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		_, a := r.route(rep, scope, session, "")
		ch <- a
	}()
	return ch
}

// caseKillDuringDeploys kills the replica that leads a cold burst's first deploy while
// three routes of the other replicas wait in its room as followers (and four more on
// a deploy of their own). Its followers learn of it when its lease ends and deploy in
// its place: a 502 there is a violation, since a retry would have served the route.
func caseKillDuringDeploys(t *testing.T, res *caseResult) {
	r := newRig(t, "--fake-deploy-delay", "3s")
	r.scope("a", `"max_concurrency":16,"pod_concurrency":4,"session_ttl_s":120`, 10)
	w := r.watch("a")
	victim := r.replicas[0]
	answers := map[string]<-chan answer{"a0": goRoute(r, victim, "a", "a0")}
	r.waitSnap("a", "the victim's deploy in flight", 10*time.Second, func(s redisstore.Snapshot) bool { return len(s.Deploys) == 1 })
	for i := 1; i < 8; i++ {
		s := fmt.Sprintf("a%d", i)
		answers[s] = goRoute(r, r.replicas[1+i%2], "a", s)
	}
	// The first three fill the victim's room, the fourth leads a deploy, three follow it.
	r.waitSnap("a", "the other replicas' routes in the rooms", 10*time.Second, func(s redisstore.Snapshot) bool { return len(s.Deploys) == 2 && len(s.Followers) == 6 })
	r.kill9(victim)
	killed := time.Now()
	codes := map[string]int{}
	slowest := time.Duration(0)
	for s, ch := range answers {
		a := <-ch
		if s == "a0" {
			if a.err == nil {
				t.Errorf("the route on the killed replica answered: %s", a)
			}
			r.routeRetry(1, "a", s, 30*time.Second)
			continue
		}
		slowest = max(slowest, a.took)
		if a.err != nil {
			t.Errorf("route %s on a live replica: %s", s, a)
			continue
		}
		codes[strings.TrimSpace(fmt.Sprintf("%d %s", a.status, a.code()))]++
		notRetryable(res, "route "+s+" on a live replica", a)
		if a.status != http.StatusOK {
			if a.status < 500 {
				t.Errorf("route %s: %s", s, a)
			}
			r.routeRetry(1, "a", s, 30*time.Second)
		}
	}
	finish(r, res, w, killed, 30*time.Second, "a")
	res.Notes = fmt.Sprintf("the live replicas' 7 routes, 3 of them in the dead leader's room, answered %v, the slowest after %v; the dead replica's route served on retry",
		codes, slowest.Round(time.Millisecond))
}

// caseKillMidBurstNoPass kills the replica leading a cold burst's deploys while its
// pods are created and not yet ready, with every replica's full pass an hour away: the
// driver's pod events bring the dead replica's half-made pods to the other replicas'
// watch, which deletes each once its orphan grace has passed and its deploy lease is
// dead. No unregistered pod may be left beyond grace + lease + a few ticks.
func caseKillMidBurstNoPass(t *testing.T, res *caseResult) {
	r := newRig(t, "--fake-deploy-delay", "5s", "--reconcile-interval", "1h")
	r.scope("m", `"max_concurrency":8,"pod_concurrency":1,"session_ttl_s":120`, 10)
	w := r.watch("m")
	victim := r.replicas[0]
	for i := range 4 {
		goRoute(r, victim, "m", fmt.Sprintf("m%d", i)) // no answer: the replica is killed under them
	}
	halfMade := func() (n int) {
		for _, p := range r.pods.Pods() {
			if p.ScopeID == "m" && !p.Ready {
				n++
			}
		}
		return n
	}
	await.True(t, 10*time.Second, "the victim's 4 pods created, not ready", func() bool { return halfMade() == 4 })
	const passLine = "full pass (audit) done" // the bootstrap of an empty Redis runs one
	passes := map[string]int{}
	for _, rep := range r.replicas {
		passes[rep.name] = logCount(rep, passLine)
	}
	r.kill9(victim)
	killed := time.Now()
	within := rigOrphanGrace + rigLease + 8*rigSweep
	await.True(t, within, "no pod of the killed replica left in the driver", func() bool {
		for _, p := range r.pods.Pods() {
			if p.ScopeID == "m" {
				return false
			}
		}
		return true
	})
	gone := time.Since(killed)
	for _, rep := range r.replicas[1:] {
		if n := logCount(rep, passLine) - passes[rep.name]; n > 0 {
			t.Errorf("%s ran %d full passes after the kill; the orphans must go without one", rep.name, n)
		}
	}
	r.routeRetry(1, "m", "m0", 30*time.Second)
	finish(r, res, w, killed, 30*time.Second, "m")
	res.Notes = fmt.Sprintf("the killed replica's 4 half-made pods deleted %v after the kill (orphan grace %v, deploy lease %v), by the others' watch on pod events; no full pass ran",
		gone.Round(time.Millisecond), rigOrphanGrace, rigLease)
}

func caseKillDuringFollowerWaits(t *testing.T, res *caseResult) {
	r := newRig(t, "--fake-deploy-delay", "2s")
	r.scope("b", `"max_concurrency":8,"pod_concurrency":4,"session_ttl_s":120`, 10)
	w := r.watch("b")
	leader := goRoute(r, r.replicas[1], "b", "lead")
	r.waitSnap("b", "the leader's deploy in flight", 10*time.Second, func(s redisstore.Snapshot) bool { return len(s.Deploys) == 1 })
	victim := r.replicas[0]
	f1, f2 := goRoute(r, victim, "b", "f1"), goRoute(r, victim, "b", "f2")
	r.waitSnap("b", "two followers in the room", 10*time.Second, func(s redisstore.Snapshot) bool { return len(s.Followers) == 2 })
	r.kill9(victim)
	killed := time.Now()
	if a := <-leader; a.err != nil || a.status != http.StatusOK {
		t.Errorf("the leader's route on a live replica: %s", a)
	}
	for _, ch := range []<-chan answer{f1, f2} {
		if a := <-ch; a.err == nil {
			t.Errorf("a follower on the killed replica answered: %s", a)
		}
	}
	r.routeRetry(2, "b", "f1", 30*time.Second)
	r.routeRetry(2, "b", "f2", 30*time.Second)
	finish(r, res, w, killed, 30*time.Second, "b")
	res.Notes = "the leader served; the dead followers' claims expired and their sessions were served on retry"
}

func caseKillDuringSweeps(t *testing.T, res *caseResult) {
	r := newRig(t, "--fake-deploy-delay", "1500ms")
	r.scope("c", `"max_concurrency":8,"pod_concurrency":2,"min_idle_pods":2,"session_ttl_s":120`, 10)
	w := r.watch("c")
	const line = "autoscale: deploying warm pods"
	var victim *faultReplica
	await.True(t, 20*time.Second, "a replica's autoscale job deploys warm pods", func() bool {
		for _, rep := range r.replicas {
			if logCount(rep, line) > 0 {
				victim = rep
				return true
			}
		}
		return false
	})
	r.kill9(victim)
	killed := time.Now()
	r.waitSnap("c", "two warm idle pods again", 30*time.Second, func(s redisstore.Snapshot) bool {
		idle := 0
		for _, p := range s.Pods {
			if p.Idle {
				idle++
			}
		}
		return idle == 2
	})
	r.routeRetry(0, "c", "after", 10*time.Second)
	finish(r, res, w, killed, 30*time.Second, "c")
	res.Notes = fmt.Sprintf("killed %s mid-autoscale; the others refilled the warm pool", victim.name)
}

func caseStopLeaseHolder(t *testing.T, res *caseResult) {
	r := newRig(t, "--fake-deploy-delay", "1500ms")
	// One pod at most: a late register of the stopped leader would be a second.
	r.scope("d", `"max_concurrency":3,"pod_concurrency":3,"session_ttl_s":120`, 10)
	w := r.watch("d")
	holder := r.replicas[0]
	lead := goRoute(r, holder, "d", "lead")
	r.waitSnap("d", "the leader's deploy in flight", 10*time.Second, func(s redisstore.Snapshot) bool { return len(s.Deploys) == 1 })
	follower := goRoute(r, r.replicas[1], "d", "follower")
	r.waitSnap("d", "a follower in the room", 10*time.Second, func(s redisstore.Snapshot) bool { return len(s.Followers) == 1 })
	if err := holder.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	fa := <-follower
	// The follower learns at the lease's end and deploys in the stopped leader's place.
	if fa.took > rigLease+3*time.Second {
		t.Errorf("the follower waited %v for its stopped leader (lease %v)", fa.took, rigLease)
	}
	notRetryable(res, "the stopped leader's follower", fa)
	// Another replica deploys the one pod the scope may have, under a newer fence.
	r.routeRetry(2, "d", "other", 20*time.Second)
	if fa.err != nil || fa.status != http.StatusOK {
		r.routeRetry(1, "d", "follower", 20*time.Second)
	}
	for time.Since(stopped) < 2*rigLease {
		time.Sleep(50 * time.Millisecond) // the stop is the fault: it lasts twice the lease
	}
	if err := holder.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	la := <-lead
	if la.err != nil {
		t.Errorf("the stopped leader's route: %s", la)
	}
	notRetryable(res, "the stopped leader's route", la)
	await.True(t, 10*time.Second, "the late leader gives up its deploy", func() bool { return logCount(holder, "result=failed") > 0 })
	finish(r, res, w, resumed, 30*time.Second, "d")
	cancelled := logCount(holder, "deploy lease lost; the deploy was cancelled")
	fenced := logCount(holder, "result=failed") - cancelled
	res.Notes = fmt.Sprintf("follower answered %d after %v; late leader answered %d %s; its commit refused by the fence %d time(s), cancelled by its lease keep-alive %d time(s)",
		fa.status, fa.took.Round(time.Millisecond), la.status, la.code(), fenced, cancelled)
}

// caseRedisStoppedDuringRegister stops redis-server from the start of a cold deploy
// (a leader and a follower waiting) until after its pod is ready, so that the pod's
// register meets a stopped Redis. With a 10s deploy lease the stall is shorter than
// the leader keeps its lease without Redis (half of it): the register is tried again
// once Redis is back, and both routes get the pod.
func caseRedisStoppedDuringRegister(t *testing.T, res *caseResult) {
	const stall = 3500 * time.Millisecond
	r := newRig(t, "--fake-deploy-delay", "2s", "--deploy-lease", "10s")
	r.scope("i", `"max_concurrency":4,"pod_concurrency":2,"session_ttl_s":120`, 10)
	w := r.watch("i")
	leader := r.replicas[0]
	lead := goRoute(r, leader, "i", "lead")
	r.waitSnap("i", "the leader's deploy in flight", 10*time.Second, func(s redisstore.Snapshot) bool { return len(s.Deploys) == 1 })
	follower := goRoute(r, r.replicas[1], "i", "follow")
	r.waitSnap("i", "a follower in the room", 10*time.Second, func(s redisstore.Snapshot) bool { return len(s.Followers) == 1 })
	r.redis.Pause(t)
	stopped := time.Now()
	await.True(t, 10*time.Second, "the pod ready while Redis is stopped", func() bool {
		for _, p := range r.pods.Pods() {
			if p.ScopeID == "i" && p.Ready {
				return true
			}
		}
		return false
	})
	ready := time.Since(stopped)
	for time.Since(stopped) < stall {
		time.Sleep(20 * time.Millisecond) // the stall is the fault: it lasts its length
	}
	r.redis.Resume(t)
	resumed := time.Now()
	pods := map[string]bool{}
	for name, ch := range map[string]<-chan answer{"the leader's route": lead, "the follower's route": follower} {
		a := <-ch
		notRetryable(res, name, a)
		if a.err != nil || a.status != http.StatusOK {
			t.Errorf("%s: %s; want the pod registered once Redis is back", name, a)
			continue
		}
		var b binding
		if err := json.Unmarshal(a.body, &b); err != nil {
			t.Fatal(err)
		}
		pods[b.PodID] = true
	}
	if len(pods) > 1 {
		t.Errorf("leader and follower got pods %v; want one", pods)
	}
	retried := logCount(leader, "register of a ready pod missed Redis")
	if retried == 0 {
		t.Errorf("the leader's register never missed Redis (pod ready %v into the %v stall): the case did not stop Redis during the register", ready.Round(time.Millisecond), stall)
	}
	finish(r, res, w, resumed, 20*time.Second, "i")
	res.Notes = fmt.Sprintf("pod ready %v into the stall; the register missed Redis and was tried again until Redis was back; leader and follower served on %v", ready.Round(time.Millisecond), slices.Sorted(maps.Keys(pods)))
}

// caseRedisPaused pauses Redis (CLIENT PAUSE, or SIGSTOP of the server) for 4s while
// a hold, a route and a touch run; each must answer STORE_UNAVAILABLE within a bound,
// and their retries with the same request ids succeed once.
func caseRedisPaused(t *testing.T, res *caseResult, sigstop bool) {
	const pause = 4 * time.Second
	const bound = 5 * time.Second
	r := newRig(t)
	r.scope("e", `"max_concurrency":4,"pod_concurrency":2,"session_ttl_s":120`, 10)
	w := r.watch("e")
	r.routeRetry(0, "e", "before", 10*time.Second)
	start := time.Now()
	if sigstop {
		r.redis.Pause(t)
	} else if err := r.redis.admin.Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	calls := []struct {
		rep          *faultReplica
		method, path string
		body         string
	}{
		{r.replicas[0], http.MethodPost, "/v1/scopes/e/pods/acquire", `{"request_id":"hold-1"}`},
		{r.replicas[1], http.MethodPost, "/v1/scopes/e/sessions", `{"session_id":"during","request_id":"route-1"}`},
		{r.replicas[2], http.MethodPost, "/v1/scopes/e/sessions/before/touch", ""},
	}
	slowest := time.Duration(0)
	var mu sync.Mutex
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := r.call(c.rep, c.method, c.path, c.body)
			mu.Lock()
			slowest = max(slowest, a.took)
			mu.Unlock()
			if a.err != nil || a.status != http.StatusServiceUnavailable || a.code() != "STORE_UNAVAILABLE" || a.took > bound {
				t.Errorf("%s %s while Redis is paused: %s; want 503 STORE_UNAVAILABLE within %v", c.method, c.path, a, bound)
			}
		}()
	}
	wg.Wait()
	for time.Since(start) < pause {
		time.Sleep(20 * time.Millisecond) // the pause is the fault: it lasts its length
	}
	if sigstop {
		r.redis.Resume(t)
	}
	resumed := time.Now()
	hold := func(rep *faultReplica) string {
		var h struct {
			HoldID string `json:"hold_id"`
			PodID  string `json:"pod_id"`
		}
		var a answer
		await.True(t, 20*time.Second, "the hold is served on retry", func() bool {
			a = r.call(rep, http.MethodPost, "/v1/scopes/e/pods/acquire", `{"request_id":"hold-1"}`)
			return a.err == nil && a.status == http.StatusOK
		})
		if err := json.Unmarshal(a.body, &h); err != nil || h.HoldID == "" {
			t.Fatalf("acquire: %s", a)
		}
		return h.HoldID + "@" + h.PodID
	}
	first := hold(r.replicas[1])
	recovered := time.Since(resumed)
	if again := hold(r.replicas[2]); again != first {
		t.Errorf("the same request id made a second hold: %s, then %s", first, again)
	}
	await.True(t, 20*time.Second, "the route is served on retry", func() bool {
		_, a := r.route(r.replicas[2], "e", "during", "route-1")
		return a.err == nil && a.status == http.StatusOK
	})
	s, err := r.snap("e")
	if err != nil {
		t.Fatal(err)
	}
	holds := 0
	for c, pod := range s.ClaimPod {
		if !strings.HasPrefix(pod, "!") {
			holds++
			if c+"@"+pod != first {
				t.Errorf("claim %s on %s besides the hold %s", c, pod, first)
			}
		}
	}
	if holds != 1 {
		t.Errorf("%d holds after the retries of one request id; want 1", holds)
	}
	holdID, podID, _ := strings.Cut(first, "@")
	if a := r.call(r.replicas[0], http.MethodPost, "/v1/scopes/e/pods/"+podID+"/release", `{"hold_id":"`+holdID+`"}`); a.status != http.StatusOK {
		t.Errorf("release: %s", a)
	}
	for _, rep := range r.replicas {
		if a := r.call(rep, http.MethodGet, "/readyz", ""); a.status != http.StatusOK {
			t.Errorf("%s /readyz after the pause: %s", rep.name, a)
		}
	}
	finish(r, res, w, resumed, 20*time.Second, "e")
	res.Notes = fmt.Sprintf("calls during the pause answered 503 STORE_UNAVAILABLE within %v; first retry served %v after the resume; one hold for one request id",
		slowest.Round(time.Millisecond), recovered.Round(time.Millisecond))
}

func caseRedisRestartedEmpty(t *testing.T, res *caseResult) {
	r := newRig(t)
	const ttl = 5 * time.Second
	r.scope("f", fmt.Sprintf(`"max_concurrency":8,"pod_concurrency":2,"session_ttl_s":%d`, int(ttl.Seconds())), 10)
	p1 := r.routeRetry(0, "f", "f1", 10*time.Second).PodID
	if b := r.routeRetry(1, "f", "f2", 10*time.Second); b.PodID != p1 {
		t.Fatalf("f2 on %s, want %s", b.PodID, p1)
	}
	p2 := r.routeRetry(2, "f", "f3", 10*time.Second).PodID
	w := r.watch("f")
	r.redis.Kill()
	r.redis = startRedisServer(t, r.redis.port)
	r.useRedis(r.redis)
	restarted := time.Now()
	refused := map[string]int{}
	var after binding
	await.True(t, 20*time.Second, "a new session is served after the rebuild", func() bool {
		b, a := r.route(r.replicas[1], "f", "f4", "")
		if a.err == nil && a.status == http.StatusOK {
			after = b
			return true
		}
		refused[fmt.Sprintf("%d %s", a.status, a.code())]++
		return false
	})
	recovered := time.Since(restarted)
	if after.PodID == p1 || after.PodID == p2 {
		t.Errorf("f4 went to %s, a pod whose lost sessions may still run", after.PodID)
	}
	s, err := r.snap("f")
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, p := range s.Pods {
		if p.Pod.ID == p1 || p.Pod.ID == p2 {
			kept++
			if p.Idle {
				t.Errorf("rebuilt pod %s is idle while its lost sessions may still run", p.Pod.ID)
			}
		}
	}
	if kept != 2 {
		t.Errorf("%d of the 2 pods with sessions kept after the rebuild", kept)
	}
	// The lost sessions end when session_ttl_s passes without a touch; their pods'
	// slots are held until then, and freed after.
	r.waitSnap("f", "the held slots of the rebuilt pods expire", 3*ttl, noAdoptedHolds)
	finish(r, res, w, restarted, 20*time.Second, "f")
	res.Notes = fmt.Sprintf("answers before the rebuild: %v; first new session served %v after the restart, on a new pod; both pods with lost sessions kept, held until session_ttl_s",
		refused, recovered.Round(time.Millisecond))
}

func caseFailover(t *testing.T, res *caseResult) {
	const ttl = 10 * time.Second
	r := newRig(t)
	replica := startRedisServer(t, freePort(t), "--replicaof", "127.0.0.1", strconv.Itoa(r.redis.port))
	r.scope("h", fmt.Sprintf(`"max_concurrency":8,"pod_concurrency":2,"session_ttl_s":%d`, int(ttl.Seconds())), 10)
	p1 := r.routeRetry(0, "h", "h1", 10*time.Second).PodID
	// The primary took a new replication id when the replica attached; reconcile
	// records it, and the replica gets the record.
	r.cutReplication(t, replica)
	// Writes the primary acknowledges and the replica never gets.
	if b := r.routeRetry(1, "h", "h2", 10*time.Second); b.PodID != p1 {
		t.Fatalf("h2 on %s, want the free slot of %s", b.PodID, p1)
	}
	p2 := r.routeRetry(2, "h", "h3", 10*time.Second).PodID
	promoted := r.promote(t, replica)
	w := r.watch("h")
	r.restartReplicas()
	var placed []string
	for i := 4; i < 7; i++ {
		b := r.routeRetry(i, "h", fmt.Sprintf("h%d", i), 20*time.Second)
		placed = append(placed, b.PodID)
	}
	recovered := time.Since(promoted)
	detected := 0
	for _, rep := range r.replicas {
		detected += logCount(rep, "another replication history")
	}
	if detected == 0 {
		t.Errorf("no replica reported the failover")
	}
	// The lost sessions end when session_ttl_s passes without a touch; the held slots
	// are freed then.
	r.waitSnap("h", "the held slots expire", 3*ttl, noAdoptedHolds)
	finish(r, res, w, promoted, 20*time.Second, "h")
	res.Notes = fmt.Sprintf("failover reported %d time(s); new sessions served %v after the promotion, on %v; pods with lost sessions %s, %s (held until session_ttl_s)",
		detected, recovered.Round(time.Millisecond), placed, p1, p2)
}

func caseDriverFault(t *testing.T, res *caseResult, f fake.Faults) {
	r := newRig(t)
	r.scope("g", `"max_concurrency":4,"pod_concurrency":2,"session_ttl_s":120`, 2)
	w := r.watch("g")
	if err := fake.SetFaults(r.podDir, f); err != nil {
		t.Fatal(err)
	}
	var chs []<-chan answer
	for i := range 3 {
		chs = append(chs, goRoute(r, r.replicas[i], "g", fmt.Sprintf("g%d", i)))
	}
	codes := map[string]int{}
	slowest := time.Duration(0)
	for _, ch := range chs {
		a := <-ch
		slowest = max(slowest, a.took)
		if a.err != nil || a.status < 500 {
			t.Errorf("route while the driver fails: %s; want a 5xx", a)
			continue
		}
		codes[a.code()]++
	}
	if bound := 2*time.Second + 12*time.Second; slowest > bound {
		t.Errorf("a route waited %v for a failing driver (bound %v)", slowest, bound)
	}
	if err := fake.SetFaults(r.podDir, fake.Faults{}); err != nil {
		t.Fatal(err)
	}
	mended := time.Now()
	for i := range 3 {
		r.routeRetry(i, "g", fmt.Sprintf("g%d", i), 20*time.Second)
	}
	finish(r, res, w, mended, 20*time.Second, "g")
	res.Notes = fmt.Sprintf("answers while failing: %v, the slowest after %v; all 3 served once mended", codes, slowest.Round(time.Millisecond))
}

// writeMatrix writes the rows to $FAULTS_OUT as JSON and as the markdown table of
// docs/reliability.md.
func writeMatrix(t *testing.T, results []caseResult) {
	dir := os.Getenv("FAULTS_OUT")
	if dir == "" {
		t.Log("FAULTS_OUT is not set: the matrix is not written")
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	fmt.Fprintf(&md, "Run of %s (`make faults`).\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	md.WriteString("| case | injected | operations | invariant checks | violations | time to recover | result | notes |\n")
	md.WriteString("|---|---|---:|---:|---:|---:|---|---|\n")
	for _, c := range results {
		result := "pass"
		if !c.Passed {
			result = "**FAIL**"
		}
		fmt.Fprintf(&md, "| %s | %s | %d | %d | %d | %.2f s | %s | %s |\n", c.Case, c.Injected, c.Operations, c.Checks,
			len(c.Violations), float64(c.RecoverMs)/1000, result, strings.ReplaceAll(c.Notes, "|", "/"))
	}
	for _, f := range []struct{ name, body string }{{"matrix.json", string(raw) + "\n"}, {"matrix.md", md.String()}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("matrix written to %s:\n%s", dir, md.String())
}

// cutReplication waits until replica has everything the primary has, the record of
// the primary's replication id included (reconcile writes it), then cuts replication:
// the replica follows a primary that is not there, keeping its data, and what the
// primary acknowledges from now on it never gets.
func (r *rig) cutReplication(t *testing.T, replica *redisServer) {
	t.Helper()
	ctx := context.Background()
	await.True(t, 10*time.Second, "the replica has the pool and the primary's replication id", func() bool {
		n, err := r.redis.admin.Do(ctx, "WAIT", 1, 1000).Int()
		recorded, gerr := replica.admin.Get(ctx, rigPrefix+"replid").Result()
		info, ierr := r.redis.admin.Info(ctx, "replication").Result()
		return err == nil && n == 1 && gerr == nil && ierr == nil && strings.Contains(info, "master_replid:"+recorded+"\r")
	})
	if err := replica.admin.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(freePort(t))).Err(); err != nil {
		t.Fatal(err)
	}
}
