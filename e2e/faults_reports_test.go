//go:build faults

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/testing/await"
)

// rigReportSecret is the --report-secret of the replicas of the report case; the case
// makes each pod's token under it, as a replica gives it to the pod.
const rigReportSecret = "faults-report-secret"

// simAgent is the agent of one fake pod, which runs none: it lists the same sessions
// in every report and, stubborn, keeps listing those the answers call unknown, with
// the session_tickets it was given (agents.give, as a gateway passes a route's).
type simAgent struct {
	pod, token string
	sessions   []string
	tickets    map[string]string // guarded by agents.mu
}

// agentRound is one report of every agent: the sessions each report was answered to
// have on its pod (nil when the report was not answered 200).
type agentRound map[string][]string

// agents report for the fake pods of one scope, a round every roundGap through the
// replicas in turn, and check every round: no session accepted by two pods' reports,
// none on a pod beyond pod_concurrency, no answer but 200, 503 STORE_UNAVAILABLE or a
// transport error (a replica away).
type agents struct {
	r      *rig
	scope  string
	pc     int
	list   []*simAgent
	mu     sync.Mutex
	status map[string]int
	bad    map[string]bool
	last   agentRound
	// lastAt is when the last round began.
	lastAt time.Time
	rounds int
	stop   chan struct{}
	done   chan struct{}
}

const roundGap = 200 * time.Millisecond

func (r *rig) agents(scope string, pc int, pods map[string][]string) *agents {
	key := httpx.NewReportKey(httpx.FixedToken(rigReportSecret))
	g := &agents{r: r, scope: scope, pc: pc, status: map[string]int{}, bad: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, pod := range slices.Sorted(maps.Keys(pods)) {
		g.list = append(g.list, &simAgent{pod: pod, token: key.Token(scope, pod), sessions: pods[pod], tickets: map[string]string{}})
	}
	go func() {
		defer close(g.done)
		for i := 0; ; i++ {
			g.round(r.replicas[i%len(r.replicas)])
			select {
			case <-g.stop:
				return
			case <-time.After(roundGap):
			}
		}
	}()
	return g
}

// round sends every agent's report through rep at once and checks the answers.
func (g *agents) round(rep *faultReplica) agentRound {
	began := time.Now()
	out := agentRound{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range g.list {
		wg.Go(func() {
			ans := g.report(rep, a, a.sessions)
			mu.Lock()
			out[a.pod] = ans
			mu.Unlock()
		})
	}
	wg.Wait()
	owner := map[string]string{}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rounds++
	g.last, g.lastAt = out, began
	for pod, accepted := range out {
		if len(accepted) > g.pc {
			g.bad[fmt.Sprintf("over pod_concurrency: the reports of %s were answered %d sessions on it (%v) > %d", pod, len(accepted), accepted, g.pc)] = true
		}
		for _, s := range accepted {
			if o, ok := owner[s]; ok {
				g.bad[fmt.Sprintf("bound twice: session %s accepted by the reports of %s and %s in one round", s, min(o, pod), max(o, pod))] = true
			}
			owner[s] = pod
		}
	}
	return out
}

// give hands the agent of pod the session_ticket of session, as a route answered it.
func (g *agents) give(pod, session string, b binding) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.list {
		if a.pod == pod {
			a.tickets[session] = b.SessionTicket
		}
	}
}

// report sends one report of a; it returns the sessions the answer leaves on the pod
// (listed less unknown), nil when it was not answered 200.
func (g *agents) report(rep *faultReplica, a *simAgent, listed []string) []string {
	g.mu.Lock()
	tickets := maps.Clone(a.tickets)
	g.mu.Unlock()
	body, err := json.Marshal(map[string]any{"pod_id": a.pod, "scope_id": g.scope, "sessions": listed, "tickets": tickets, "state": "ready"})
	if err != nil {
		g.r.t.Error(err)
		return nil
	}
	g.r.ops.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rep.base()+"/v1/agents/report", strings.NewReader(string(body)))
	if err != nil {
		g.r.t.Error(err)
		return nil
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	var ans answer
	if err != nil {
		ans = answer{err: err, took: time.Since(start)}
	} else {
		raw, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		ans = answer{status: resp.StatusCode, body: raw, err: rerr, took: time.Since(start)}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case ans.err != nil:
		g.status["transport error"]++
		return nil
	case ans.status == http.StatusOK:
		g.status["200"]++
	case ans.status == http.StatusServiceUnavailable && ans.code() == "STORE_UNAVAILABLE":
		g.status["503 STORE_UNAVAILABLE"]++
		return nil
	default:
		g.status[fmt.Sprintf("%d %s", ans.status, ans.code())]++
		g.bad[fmt.Sprintf("report of %s through %s answered %s", a.pod, rep.name, ans)] = true
		return nil
	}
	var out struct {
		Unknown []string `json:"unknown_sessions"`
	}
	if err := json.Unmarshal(ans.body, &out); err != nil {
		g.bad[fmt.Sprintf("report of %s: %v in %s", a.pod, err, ans)] = true
		return nil
	}
	accepted := []string{}
	for _, s := range listed {
		if !slices.Contains(out.Unknown, s) {
			accepted = append(accepted, s)
		}
	}
	return accepted
}

// awaitAccepted waits until a round begun after the call accepts exactly want on pod;
// when none does within, the test fails with what the rounds found.
func (g *agents) awaitAccepted(t *testing.T, pod string, want []string, within time.Duration) {
	t.Helper()
	since := time.Now()
	deadline := since.Add(within)
	for {
		g.mu.Lock()
		ok := g.lastAt.After(since) && slices.Equal(g.last[pod], want)
		if !ok && time.Now().After(deadline) {
			defer g.mu.Unlock()
			t.Fatalf("not within %v: the reports of %s are answered %v; the last round answered %v; found: %v; answers: %v",
				within, pod, want, g.last, slices.Sorted(maps.Keys(g.bad)), g.status)
		}
		g.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(await.Poll)
	}
}

// end stops the rounds and returns what they found.
func (g *agents) end() (violations []string, statuses map[string]int, rounds int) {
	close(g.stop)
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.bad)), maps.Clone(g.status), g.rounds
}

// caseAgentReports runs agents' reports through a Redis pause and a failover that lost
// writes. Pod p1 holds a1, a2 and a3, which its agent lists; p2 holds b1 and its agent
// lists a4, routed to it only while replication is cut, and a8, which no route ever
// bound (so no agent has its session_ticket). Every agent lists at most
// pod_concurrency sessions (3), with the tickets of those routed to its pod. Through
// the pause the reports answer 503 or wait it out, and change nothing; after the
// failover the new primary lacks a4, the rebuild holds p2's free slots for the
// sessions it may have lost, and p2's reports bind a4 back to it with its ticket; a8,
// with none, stays unknown though a held slot is free.
func caseAgentReports(t *testing.T, res *caseResult) {
	const ttl = 10 * time.Second
	const pause = 3 * time.Second
	ctx := context.Background()
	r := newRig(t, "--report-secret", rigReportSecret)
	replica := startRedisServer(t, freePort(t), "--replicaof", "127.0.0.1", strconv.Itoa(r.redis.port))
	r.scope("ar", fmt.Sprintf(`"max_concurrency":12,"pod_concurrency":3,"session_ttl_s":%d`, int(ttl.Seconds())), 10)
	routes := map[string]binding{}
	for i, s := range []string{"a1", "a2", "a3", "b1"} {
		routes[s] = r.routeRetry(i, "ar", s, 10*time.Second)
	}
	p1, p2 := routes["a1"].PodID, routes["b1"].PodID
	if routes["a2"].PodID != p1 || routes["a3"].PodID != p1 || p2 == p1 {
		t.Fatalf("routes %v: want a1, a2 and a3 on one pod, b1 on another", routes)
	}
	w := r.watch("ar")
	g := r.agents("ar", 3, map[string][]string{p1: {"a1", "a2", "a3"}, p2: {"b1", "a4", "a8"}})
	for s, b := range routes {
		g.give(b.PodID, s, b)
	}
	g.awaitAccepted(t, p1, []string{"a1", "a2", "a3"}, 10*time.Second)
	g.awaitAccepted(t, p2, []string{"b1"}, 10*time.Second)

	// The pause: reports keep coming; each answers 503 within the bound, or 200 when
	// Redis ran it before or after.
	if err := r.redis.admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	during := g.round(r.replicas[0])
	for time.Since(paused) < pause {
		time.Sleep(20 * time.Millisecond) // the pause is the fault: it lasts its length
	}
	g.awaitAccepted(t, p1, []string{"a1", "a2", "a3"}, 10*time.Second)
	g.awaitAccepted(t, p2, []string{"b1"}, 10*time.Second)

	// The failover: the replica has everything so far, then replication is cut and a4
	// is routed to p2 on the primary alone.
	r.cutReplication(t, replica)
	b4 := r.routeRetry(0, "ar", "a4", 10*time.Second)
	if b4.PodID != p2 {
		t.Fatalf("a4 on %s, want a free slot of %s", b4.PodID, p2)
	}
	g.give(p2, "a4", b4)
	g.awaitAccepted(t, p2, []string{"b1", "a4"}, 10*time.Second)
	promoted := r.promote(t, replica)
	r.restartReplicas()
	// p2's reports bind a4 back to it; a8, without a ticket, takes no held slot.
	g.awaitAccepted(t, p2, []string{"b1", "a4"}, 20*time.Second)
	recovered := time.Since(promoted)
	g.awaitAccepted(t, p1, []string{"a1", "a2", "a3"}, 10*time.Second)
	var placed []string
	for i := 5; i < 7; i++ {
		b := r.routeRetry(i, "ar", fmt.Sprintf("a%d", i), 20*time.Second)
		if b.PodID == p1 || b.PodID == p2 {
			t.Errorf("a%d went to %s, which its agent's reports fill", i, b.PodID)
		}
		placed = append(placed, b.PodID)
	}
	s, err := r.snap("ar")
	if err != nil {
		t.Fatal(err)
	}
	for sid, want := range map[string]string{"a1": p1, "a2": p1, "a3": p1, "b1": p2, "a4": p2} {
		if s.Sessions[sid] != want {
			t.Errorf("after the failover %s is bound to %q, want %s (its agent reports it)", sid, s.Sessions[sid], want)
		}
	}
	if pod, ok := s.Sessions["a8"]; ok {
		t.Errorf("a8, which no route bound, is bound to %s", pod)
	}
	seen, statuses, rounds := g.end()
	res.Violations = append(res.Violations, seen...)
	if during[p1] != nil || during[p2] != nil {
		t.Logf("a report during the pause was answered 200 (run by Redis before it): %v", during)
	}
	if statuses["503 STORE_UNAVAILABLE"] == 0 {
		t.Errorf("no report answered 503 during the pause or the failover: %v", statuses)
	}
	// The reports stopped: the sessions only they kept end at session_ttl_s, and the
	// claims of the adoption are gone (taken by the rebinds, or expired).
	r.waitSnap("ar", "the adopted holds are gone", 3*ttl, noAdoptedHolds)
	finish(r, res, w, promoted, 20*time.Second, "ar")
	res.Notes = fmt.Sprintf("%d report rounds of 2 agents, answered %v; after the failover p2's reports bound a4 back to it with its ticket %v after the promotion, a8 (no ticket) stayed unknown beside a free held slot; new sessions on %v",
		rounds, statuses, recovered.Round(time.Millisecond), placed)
}
