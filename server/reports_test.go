package server_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/server"
)

const reportSecret = "report-secret-1"

// withReportSecret turns reports on: a secret and the replicas' address.
func withReportSecret(c *server.Config) {
	c.ReportSecret, c.ReportURL = reportSecret, "http://127.0.0.1:9/"
}

// report posts one agent report with the bearer token tok ("" for none).
func (e *env) report(tok, scope, pod, state string, sessions ...string) resp {
	e.t.Helper()
	if sessions == nil {
		sessions = []string{}
	}
	h := noAuth
	if tok != "" {
		h = bearer(tok)
	}
	return e.do(http.MethodPost, "/v1/agents/report",
		map[string]any{"pod_id": pod, "scope_id": scope, "sessions": sessions, "state": state}, h)
}

// routedPod routes session in scope and returns its pod id.
func (e *env) routedPod(scope, session string) string {
	e.t.Helper()
	return e.route(scope, session)["pod_id"].(string)
}

// Only a pod's own token reports for it: another pod's, another scope's, the gateway
// and admin tokens, a malformed one and none get 401; a pod the pool does not have
// gets 404 POD_NOT_FOUND even with its own token. The pods' drivers are told where
// to report, with the token the replica checks. Every report is counted by result.
func TestAgentReportTokens(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withTokens("gw-token", "admin-token"), withReportSecret)
	e.ok(http.MethodPut, "/v1/scopes/ok/config", scopeCfg(4, 2, 0, 1), bearer("admin-token"))
	e.ok(http.MethodPut, "/v1/scopes/other/config", scopeCfg(4, 2, 0, 1), bearer("admin-token"))
	pod := e.routedPod("ok", "s1")
	own := e.srv.ReportToken("ok", pod)

	deploys := e.fake.Deploys()
	env := deploys[0].Req.AgentEnv(pod)
	if env[warmpool.EnvReportToken] != own || env[warmpool.EnvPodID] != pod || env[warmpool.EnvScope] != "ok" ||
		env[warmpool.EnvReportURL] != "http://127.0.0.1:9/" || env[warmpool.EnvDeployVer] == "" {
		t.Fatalf("the driver was told %v for pod %s", env, pod)
	}

	ans := e.ok(http.MethodPost, "/v1/agents/report", map[string]any{"pod_id": pod, "scope_id": "ok", "sessions": []string{"s1"}}, bearer(own))
	if num(t, ans, "next_report_s") != warmpool.DefaultReportIntervalS {
		t.Fatalf("answer %v: want next_report_s %d", ans, warmpool.DefaultReportIntervalS)
	}
	for name, tok := range map[string]string{
		"another pod's token":        e.srv.ReportToken("ok", pod+"x"),
		"another scope's token":      e.srv.ReportToken("other", pod),
		"the gateway token":          "gw-token",
		"the admin token":            "admin-token",
		"a token that is not base64": "#!",
		"no token":                   "",
	} {
		r := e.report(tok, "ok", pod, "ready", "s1")
		e.wantErr(r, http.StatusUnauthorized, warmpool.CodeUnauthorized)
		if name == "no token" && r.header.Get("WWW-Authenticate") != "Bearer" {
			t.Fatalf("%s: %v without WWW-Authenticate: Bearer", name, r)
		}
	}
	e.wantErr(e.report(e.srv.ReportToken("ok", "ghost-1"), "ok", "ghost-1", "ready"), http.StatusNotFound, warmpool.CodePodNotFound)
	e.wantErr(e.report(own, "ok", pod, "sleeping"), http.StatusBadRequest, warmpool.CodeValidation, "state")
	e.wantErr(e.report(own, "ok", pod, "ready", "bad id!"), http.StatusBadRequest, warmpool.CodeValidation, "sessions")

	metrics := string(e.do(http.MethodGet, "/metrics", nil).raw)
	for _, line := range []string{
		`warmpool_agent_reports_total{result="ok"} 1`,
		`warmpool_agent_reports_total{result="unauthorized"} 6`,
		`warmpool_agent_reports_total{result="pod_not_found"} 1`,
		`warmpool_agent_reports_total{result="invalid"} 2`,
	} {
		if !strings.Contains(metrics, line) {
			t.Fatalf("/metrics lacks %q", line)
		}
	}
}

// Every pod is told its scope's agent.report_interval_s (WARMPOOL_REPORT_INTERVAL_S,
// SPEC §12.4), the pods a route deploys and those the warm pool's refill deploys alike,
// and a class B change of it reaches the pods deployed after it. Before, the pods were
// told nothing and their agents reported at their own default of 5 s.
func TestPodsAreToldTheReportInterval(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withReportSecret)
	e.putScope("ok", `{"pool":{"max_concurrency":8,"pod_concurrency":1},"agent":{"report_interval_s":2}}`)
	e.routedPod("ok", "s1")
	e.putScope("ok", `{"pool":{"max_concurrency":8,"pod_concurrency":1,"min_idle_pods":1},"agent":{"report_interval_s":3}}`)
	if err := e.srv.Sweeper.Autoscale(context.Background()); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the refill's deploy", func() bool { return len(e.fake.Deploys()) == 2 })
	for i, want := range []string{"2", "3"} {
		if got := e.fake.Deploys()[i].Env[warmpool.EnvReportInterval]; got != want {
			t.Fatalf("deploy %d told %s=%q, want %q (env %v)", i, warmpool.EnvReportInterval, got, want, e.fake.Deploys()[i].Env)
		}
	}
}

// Without a report secret every report is 401 and the pods are told nothing.
func TestAgentReportsOff(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	pod := e.routedPod("ok", "s1")
	if env := e.fake.Deploys()[0].Req.AgentEnv(pod); env != nil {
		t.Fatalf("reports off, yet the pod is told %v", env)
	}
	e.wantErr(e.report("anything", "ok", pod, "ready"), http.StatusUnauthorized, warmpool.CodeUnauthorized, "off")
}

// A session kept alive by its agent's reports alone outlives session_ttl_s many times
// over and keeps its pod; a session of the same pod that the reports do not list
// expires as before.
func TestReportsKeepASessionPastItsTTL(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withReportSecret)
	e.putScope("ok", `{"pool":{"max_concurrency":4,"pod_concurrency":2,"session_ttl_s":10}}`)
	pod := e.routedPod("ok", "kept")
	if other := e.routedPod("ok", "quiet"); other != pod {
		t.Fatalf("quiet went to %s, kept to %s", other, pod)
	}
	tok := e.srv.ReportToken("ok", pod)
	for range 12 { // 60 s: six session TTLs
		e.clock.Advance(5 * time.Second)
		e.ok(http.MethodPost, "/v1/agents/report", map[string]any{"pod_id": pod, "scope_id": "ok", "sessions": []string{"kept"}}, bearer(tok))
	}
	if err := e.srv.Sweeper.ExpireSessions(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.ok(http.MethodGet, "/v1/scopes/ok/sessions/kept", nil); got["pod_id"] != pod {
		t.Fatalf("kept after 60 s of reports: %v, want its pod %s", got, pod)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/ok/sessions/quiet", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
}

// A draining pod shows as draining in the pool and on the pool page, and gets no new
// session: the next route deploys another pod. Its own session stays; once that
// ends, the sweep deletes the pod.
func TestDrainingPodIsDeletedOnceEmpty(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withReportSecret)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	pod := e.routedPod("ok", "s1")
	e.ok(http.MethodPost, "/v1/agents/report", map[string]any{"pod_id": pod, "scope_id": "ok", "sessions": []string{"s1"}, "state": "draining"},
		bearer(e.srv.ReportToken("ok", pod)))
	// The pool and the pool page show it draining, with its session.
	if pp := podsOf(e.pool("ok"))[pod]; pp == nil || pp["state"] != "draining" || num(t, pp, "sessions") != 1 || pp["idle_since"] != nil {
		t.Fatalf("the draining pod in the pool: %v", pp)
	}
	page := e.ok(http.MethodGet, "/v1/ui/state?detail=ok", nil)["scopes"].([]any)[0].(map[string]any)
	if pp := page["pods"].([]any)[0].(map[string]any); pp["pod_id"] != pod || pp["state"] != "draining" || num(t, pp, "sessions") != 1 {
		t.Fatalf("the draining pod on the pool page: %v", pp)
	}
	if other := e.routedPod("ok", "s2"); other == pod {
		t.Fatalf("s2 went to the draining pod %s", pod)
	}
	if again := e.routedPod("ok", "s1"); again != pod {
		t.Fatalf("s1 moved from its draining pod to %s", again)
	}
	e.ok(http.MethodDelete, "/v1/scopes/ok/sessions/s1", nil)
	if err := e.srv.Sweeper.Reclaim(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(e.fake.Deleted(), pod) {
		t.Fatalf("the drained pod %s was not deleted (deleted: %v)", pod, e.fake.Deleted())
	}
	for _, p := range e.pool("ok")["pods"].([]any) {
		if p.(map[string]any)["pod_id"] == pod {
			t.Fatalf("the drained pod %s is still in the pool", pod)
		}
	}
}
