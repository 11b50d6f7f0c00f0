package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// The agent tests (SPEC §11.2) run the binary with the local driver on a redis-server of
// their own, so that one may FLUSHALL it: every pod is a real demo agent process that
// reports to the replica with the token the replica gave it. The tokens are 16
// characters of the base64url alphabet, so that they decode as a report token would.
const (
	agentScope   = "agents"
	reportSecret = "e2e-report-secret"
	gatewayToken = "e2eGatewayToken0"
	adminToken   = "e2eAdminToken000"
	// agentSweep is the replica's sweep and watch interval.
	agentSweep = 200 * time.Millisecond
	// agentFailThreshold is --health-fail-threshold.
	agentFailThreshold = 2
	// localProbeTimeout is the local driver's timeout of one health probe
	// (local.DefaultProbeTimeout): a stopped agent answers none.
	localProbeTimeout = 2 * time.Second
	// localStopGrace is the local driver's grace between SIGTERM and SIGKILL of a pod
	// it deletes (local.DefaultStopGrace).
	localStopGrace = 2 * time.Second
)

// agentRig is one replica with reporting pods, and a view of its Redis as the default
// user.
type agentRig struct {
	t      *testing.T
	base   string
	proc   *proc
	podDir string
	admin  *redis.Client
	keys   redisstore.ScopeKeys
}

// newAgentRig starts a redis-server and `warmpool serve` (local driver, reports on,
// a gateway and an admin token), and stores the scope agentScope with config doc.
func newAgentRig(t *testing.T, doc string) *agentRig {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the binary and its pods; skipped with -short")
	}
	bin := warmpoolBin(t)
	dir := t.TempDir()
	srv := testredis.StartServer(t)
	addr := freeAddr(t)
	r := &agentRig{t: t, base: "http://" + addr, podDir: filepath.Join(dir, "pods"),
		admin: redis.NewClient(&redis.Options{Addr: srv.Addr}), keys: redisstore.NewKeyspace(redisstore.DefaultPrefix).Scope(agentScope)}
	t.Cleanup(func() { _ = r.admin.Close() })
	r.proc = startServe(t, bin, "serve", "--listen", addr, "--redis", srv.URL(), "--driver", "local",
		"--local-state-dir", r.podDir, "--store", filepath.Join(dir, "w.db"), "--log-format", "json",
		"--auth-token", gatewayToken, "--admin-token", adminToken,
		"--report-url", r.base, "--report-secret", reportSecret,
		"--sweep-interval", agentSweep.String(), "--health-fail-threshold", fmt.Sprint(agentFailThreshold))
	r.proc.waitReady(t, r.base, 60*time.Second)
	if st, raw := request(t, http.MethodPut, r.base+"/v1/scopes/"+agentScope+"/config", "Bearer "+adminToken, doc); st != http.StatusOK {
		t.Fatalf("put the scope: %d %s", st, raw)
	}
	return r
}

// call sends a gateway call and decodes its answer into out (when not nil).
func (r *agentRig) call(method, path, body string, out any) int {
	r.t.Helper()
	st, raw := request(r.t, method, r.base+path, "Bearer "+gatewayToken, body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			r.t.Fatalf("%s %s: %d %s: %v", method, path, st, raw, err)
		}
	}
	return st
}

// routed is a route's answer: the binding and its session_ticket.
type routed struct {
	warmpool.Binding
	SessionTicket string `json:"session_ticket"`
}

// route routes a session, which must succeed.
func (r *agentRig) route(session string) routed {
	r.t.Helper()
	var b routed
	if st := r.call(http.MethodPost, "/v1/scopes/"+agentScope+"/sessions", `{"session_id":"`+session+`"}`, &b); st != http.StatusOK {
		r.t.Fatalf("route %s: %d %+v", session, st, b)
	}
	return b
}

// session is the pod a GET of the session names ("" when none) and the GET's status:
// 200, 404, or 503 while the replica rebuilds a Redis that lost its data.
func (r *agentRig) session(session string) (string, int) {
	r.t.Helper()
	var b warmpool.Binding
	st := r.call(http.MethodGet, "/v1/scopes/"+agentScope+"/sessions/"+session, "", &b)
	if st != http.StatusOK && st != http.StatusNotFound && st != http.StatusServiceUnavailable {
		r.t.Fatalf("get %s: %d", session, st)
	}
	return b.PodID, st
}

// pods are the pool's pods by id, with their states.
func (r *agentRig) pods() map[string]string {
	r.t.Helper()
	var p poolStatus
	if st := r.call(http.MethodGet, "/v1/scopes/"+agentScope+"/pool", "", &p); st != http.StatusOK {
		r.t.Fatalf("pool: %d", st)
	}
	out := map[string]string{}
	for _, pod := range p.Pods {
		out[pod.PodID] = pod.State
	}
	return out
}

// bound is the pod Redis binds the session to ("" for none), read without a call that
// could touch the session.
func (r *agentRig) bound(session string) string {
	r.t.Helper()
	pod, err := r.admin.HGet(context.Background(), r.keys.Sessions, session).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		r.t.Fatalf("hget %s: %v", session, err)
	}
	return pod
}

// awaitReported waits until the pod's agent has had a report accepted.
func (r *agentRig) awaitReported(pod string) {
	r.t.Helper()
	await.True(r.t, 15*time.Second, pod+"'s agent reports", func() bool {
		ok, err := r.admin.HExists(context.Background(), r.keys.Agents, pod).Result()
		return err == nil && ok
	})
}

// pid is the process id of the pod's demo agent (the local driver's state file).
func (r *agentRig) pid(pod string) int {
	r.t.Helper()
	raw, err := os.ReadFile(filepath.Join(r.podDir, pod+".json"))
	if err != nil {
		r.t.Fatal(err)
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.PID == 0 {
		r.t.Fatalf("state file of %s: %v %s", pod, err, raw)
	}
	return rec.PID
}

// signal sends sig to the pod's agent process.
func (r *agentRig) signal(pod string, sig syscall.Signal) {
	r.t.Helper()
	if err := syscall.Kill(r.pid(pod), sig); err != nil {
		r.t.Fatalf("%v to %s: %v", sig, pod, err)
	}
}

// token is the report token the replica gave the pod: its agent's WARMPOOL_REPORT_TOKEN.
func (r *agentRig) token(pod string) string {
	r.t.Helper()
	return r.env(pod, "WARMPOOL_REPORT_TOKEN")
}

// env is the value of the variable name in the environment of pod's agent process,
// which must have it.
func (r *agentRig) env(pod, name string) string {
	r.t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", r.pid(pod)))
	if err != nil {
		r.t.Fatal(err)
	}
	for _, kv := range bytes.Split(raw, []byte{0}) {
		if v, ok := strings.CutPrefix(string(kv), name+"="); ok && v != "" {
			return v
		}
	}
	r.t.Fatalf("%s's agent has no %s", pod, name)
	return ""
}

// stream opens the session's SSE stream on its pod as a gateway does (GET
// <sse_url>?session_id=S&session_ticket=T), which the agent then reports with the
// ticket, and reads it until the hello event; it stays open until the returned func or
// the test's end closes it.
func (r *agentRig) stream(b routed) (closeStream func()) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	q := url.Values{"session_id": {b.SessionID}, "session_ticket": {b.SessionTicket}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.SSEURL+"?"+q.Encode(), nil)
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("SSE of %s: %v", b.SessionID, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		r.t.Fatalf("SSE of %s: %s", b.SessionID, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && sc.Text() != "event: hello" {
	}
	if sc.Err() != nil {
		r.t.Fatalf("SSE of %s: %v", b.SessionID, sc.Err())
	}
	go func() {
		defer resp.Body.Close()
		for sc.Scan() { // the heartbeats, until the stream is closed
		}
	}()
	return cancel
}

// logged reports whether the replica logged a JSON line with message msg about pod
// whose reason contains reason.
func (r *agentRig) logged(msg, pod, reason string) bool {
	for _, line := range strings.Split(r.proc.stderr.String(), "\n") {
		var rec struct{ Msg, Pod, Reason string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg && rec.Pod == pod && strings.Contains(rec.Reason, reason) {
			return true
		}
	}
	return false
}

// TestAgentReportsKeepASessionAlive: a session whose agent reports it (its SSE stream
// is open) outlives session_ttl_s although the gateway never calls again, while a
// session on the same pod that the agent does not report expires at session_ttl_s.
// Guards agent_report.lua's ZADD of a listed session's expiry (seen red without it).
func TestAgentReportsKeepASessionAlive(t *testing.T) {
	const ttl = 3 * time.Second
	r := newAgentRig(t, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":4,"pod_concurrency":2,"session_ttl_s":3},
		"agent":{"report_interval_s":1}}`)
	// A warm pod whose agent reports already: its first report comes an agent interval
	// after it starts, later than session_ttl_s.
	warm := r.route("warm")
	if st := r.call(http.MethodDelete, "/v1/scopes/"+agentScope+"/sessions/warm", "", nil); st != http.StatusOK {
		t.Fatalf("end warm: %d", st)
	}
	r.awaitReported(warm.PodID)

	kept := r.route("kept")
	silent := r.route("silent")
	if kept.PodID != warm.PodID || silent.PodID != warm.PodID {
		t.Fatalf("kept on %s, silent on %s: want both on the warm pod %s", kept.PodID, silent.PodID, warm.PodID)
	}
	r.stream(kept)
	routed := time.Now()
	await.True(t, 4*ttl, "the unreported session expired, and 2 x session_ttl_s passed", func() bool {
		if pod := r.bound("kept"); pod != kept.PodID {
			t.Fatalf("kept: bound to %q %v after its route, want %s: the agent's reports did not keep it", pod, time.Since(routed), kept.PodID)
		}
		return r.bound("silent") == "" && time.Since(routed) > 2*ttl
	})
	if pod, st := r.session("kept"); st != http.StatusOK || pod != kept.PodID {
		t.Fatalf("GET kept after %v: %d, pod %q, want %s", time.Since(routed), st, pod, kept.PodID)
	}
	t.Logf("kept alive %v by reports alone (session_ttl_s %v)", time.Since(routed).Round(time.Millisecond), ttl)
}

// TestAgentStoppedIsProbedAndBuried: an agent that stops (SIGSTOP) stops reporting; its
// pod is probed again once three report intervals have passed, and buried when the
// probes fail, within 3 intervals plus the probes of the fail threshold.
// Guards the three intervals of agent_report.lua's spared time (seen red with 300).
func TestAgentStoppedIsProbedAndBuried(t *testing.T) {
	const interval, probePeriod = time.Second, time.Second
	r := newAgentRig(t, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":2,"pod_concurrency":2,"probe_period_s":1},
		"agent":{"report_interval_s":1}}`)
	b := r.route("s1")
	r.awaitReported(b.PodID)
	pid := r.pid(b.PodID)
	r.signal(b.PodID, syscall.SIGSTOP)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	stopped := time.Now()
	// Each failed probe waits out the probe timeout; a watch tick and a sweep tick of
	// slack.
	within := 3*interval + agentFailThreshold*(probePeriod+localProbeTimeout) + 2*agentSweep + time.Second
	await.True(t, within, "the stopped pod buried", func() bool {
		_, ok := r.pods()[b.PodID]
		return !ok
	})
	took := time.Since(stopped)
	// The replica logs the burial once the driver has deleted the pod: SIGTERM, which a
	// stopped process does not take, then SIGKILL after the stop grace.
	await.True(t, localStopGrace+time.Second, b.PodID+" buried for failed probes", func() bool {
		return r.logged("pod buried", b.PodID, "health probe failed")
	})
	if pod, st := r.session("s1"); st != http.StatusNotFound {
		t.Fatalf("s1: %d on %q after its pod was buried, want 404", st, pod)
	}
	t.Logf("buried %v after SIGSTOP (bound %v)", took.Round(time.Millisecond), within)
}

// TestAgentDrainingPodTakesNoNewSession: an agent that drains (SIGTERM) reports it; its
// pod shows as draining, keeps its session but gets no new one (a second pod is
// deployed for it), and is deleted once its session has ended, while its agent still
// waits for its stream to close.
// Guards agent_report.lua's HSET of podver DRAINING, the sweep's reclaim of a drained
// pod (sweeper/pools.go), and the due note of an empty draining pod (free_slot in
// lua/lib/slots.lua, and agent_report.lua's for an idle one: seen red with both
// broken; either alone deletes it within a report interval).
func TestAgentDrainingPodTakesNoNewSession(t *testing.T) {
	r := newAgentRig(t, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":4,"pod_concurrency":2},
		"agent":{"report_interval_s":1}}`)
	first := r.route("s1")
	r.awaitReported(first.PodID)
	r.stream(first) // the agent drains until its streams close (at most 5 s)
	r.signal(first.PodID, syscall.SIGTERM)
	termed := time.Now()
	await.True(t, 5*time.Second, first.PodID+" draining in the pool", func() bool {
		return r.pods()[first.PodID] == "draining"
	})

	second := r.route("s2")
	if second.PodID == first.PodID {
		t.Fatalf("s2 routed to the draining pod %s", first.PodID)
	}
	if again := r.route("s1"); again.PodID != first.PodID || again.New {
		t.Fatalf("s1 again: %+v, want its pod %s, not new", again, first.PodID)
	}

	if st := r.call(http.MethodDelete, "/v1/scopes/"+agentScope+"/sessions/s1", "", nil); st != http.StatusOK {
		t.Fatalf("end s1: %d", st)
	}
	ended := time.Now()
	await.True(t, 3*time.Second, "the drained pod deleted once empty", func() bool {
		_, ok := r.pods()[first.PodID]
		return !ok
	})
	// Logged once the driver has deleted it (SIGTERM, SIGKILL after the stop grace).
	await.True(t, localStopGrace+time.Second, first.PodID+" reclaimed as drained", func() bool {
		return r.logged("reclaimed", first.PodID, "drained")
	})
	if pods := r.pods(); len(pods) != 1 || pods[second.PodID] != "busy" {
		t.Fatalf("pool after the drain: %v, want only %s, busy", pods, second.PodID)
	}
	t.Logf("draining seen %v after SIGTERM; deleted %v after its last session ended",
		time.Since(termed).Round(time.Millisecond), time.Since(ended).Round(time.Millisecond))
}

// TestAgentForgedReportsAre401: a report for a pod with another pod's token, with no
// token, with the gateway token or with the admin token is 401 UNAUTHORIZED and does
// nothing (a forged "draining" report that ends nothing); the pod's own token is taken.
// Guards the pod id in the HMAC (internal/httpx/reportkey.go: another pod's token
// red) and its comparison (the gateway, admin and other pod's tokens red); no token is
// refused by the comparison and by the missing-token check each (red with both gone).
func TestAgentForgedReportsAre401(t *testing.T) {
	r := newAgentRig(t, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":2,"pod_concurrency":1},
		"agent":{"report_interval_s":1,"sessions_from_reports":true}}`)
	p, q := r.route("s1"), r.route("s2")
	if p.PodID == q.PodID {
		t.Fatalf("s1 and s2 on one pod %s with pod_concurrency 1", p.PodID)
	}
	r.stream(p)
	r.awaitReported(p.PodID)
	forged := `{"pod_id":"` + p.PodID + `","scope_id":"` + agentScope + `","sessions":[],"state":"draining"}`
	for _, c := range []struct{ name, auth string }{
		{"another pod's token", "Bearer " + r.token(q.PodID)},
		{"no token", ""},
		{"the gateway token", "Bearer " + gatewayToken},
		{"the admin token", "Bearer " + adminToken},
	} {
		for range 2 { // two reports that leave a session out would end it
			st, raw := request(t, http.MethodPost, r.base+"/v1/agents/report", c.auth, forged)
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			if st != http.StatusUnauthorized || json.Unmarshal(raw, &e) != nil || e.Error.Code != "UNAUTHORIZED" {
				t.Errorf("report of %s with %s: %d %s, want 401 UNAUTHORIZED", p.PodID, c.name, st, raw)
			}
		}
	}
	if state := r.pods()[p.PodID]; state != "busy" {
		t.Fatalf("%s is %q after the forged reports, want busy", p.PodID, state)
	}
	if pod, st := r.session("s1"); st != http.StatusOK || pod != p.PodID {
		t.Fatalf("s1: %d on %q after the forged reports, want %s", st, pod, p.PodID)
	}

	// one session, as many as the pod may hold (pod_concurrency 1): one it does not have
	own := `{"pod_id":"` + p.PodID + `","scope_id":"` + agentScope + `","sessions":["gone"],"state":"ready"}`
	st, raw := request(t, http.MethodPost, r.base+"/v1/agents/report", "Bearer "+r.token(p.PodID), own)
	var ans struct {
		NextReportS     int      `json:"next_report_s"`
		UnknownSessions []string `json:"unknown_sessions"`
	}
	if st != http.StatusOK || json.Unmarshal(raw, &ans) != nil || ans.NextReportS != 1 || len(ans.UnknownSessions) != 1 || ans.UnknownSessions[0] != "gone" {
		t.Fatalf("report with the pod's own token: %d %s, want 200, next_report_s 1, unknown [gone]", st, raw)
	}
}

// TestAgentSessionSurvivesFlushAll: after FLUSHALL, the replica rebuilds the pool from
// the driver, and the session the pod's agent keeps reporting with its session_ticket
// (its stream brought it, as a gateway passes it) is bound to its old pod again; a
// session on the same pod that the agent does not report is lost, and so is one it
// reports without a ticket (its stream brought none): a report proves what it binds
// back (SPEC §12.4). The local driver told the agent its scope's report interval.
// Guards agent_report.lua's take of an adopted claim for a listed session with a valid
// ticket (seen red without it), and the demo agent's tickets (seen red: kept lost).
func TestAgentSessionSurvivesFlushAll(t *testing.T) {
	r := newAgentRig(t, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":6,"pod_concurrency":3,"session_ttl_s":30},
		"agent":{"report_interval_s":1}}`)
	kept := r.route("kept")
	silent := r.route("silent")
	unproven := r.route("unproven")
	if silent.PodID != kept.PodID || unproven.PodID != kept.PodID {
		t.Fatalf("silent on %s, unproven on %s, kept on %s: want one pod", silent.PodID, unproven.PodID, kept.PodID)
	}
	if v := r.env(kept.PodID, "WARMPOOL_REPORT_INTERVAL_S"); v != "1" {
		t.Fatalf("the agent was told WARMPOOL_REPORT_INTERVAL_S=%s, want its scope's 1", v)
	}
	r.stream(kept)
	unproven.SessionTicket = ""
	r.stream(unproven)
	r.awaitReported(kept.PodID)
	if err := r.admin.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	await.True(t, 15*time.Second, "kept bound to its old pod again", func() bool {
		pod, st := r.session("kept")
		return st == http.StatusOK && pod == kept.PodID
	})
	took := time.Since(flushed)
	if again := r.route("kept"); again.PodID != kept.PodID || again.New {
		t.Fatalf("route kept after FLUSHALL: %+v, want its old pod %s, not new", again, kept.PodID)
	}
	if pod, st := r.session("silent"); st != http.StatusNotFound {
		t.Fatalf("silent: %d on %q after FLUSHALL, want 404: its agent never reported it", st, pod)
	}
	if pod, st := r.session("unproven"); st != http.StatusNotFound {
		t.Fatalf("unproven: %d on %q after FLUSHALL, want 404: its agent reported it without a ticket", st, pod)
	}
	t.Logf("kept bound to %s again %v after FLUSHALL", kept.PodID, took.Round(time.Millisecond))
}
