package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
)

// countingReader is a request body that counts the bytes read of it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// sendReport serves one report with the bearer token tok ("" for none) and body on the
// replica's handler; length is its declared Content-Length (-1: none). It returns the
// status answered and how many bytes of the body the replica read.
func (e *env) sendReport(tok, body string, length int64) (int, int64) {
	e.t.Helper()
	cr := &countingReader{r: strings.NewReader(body)}
	req := httptest.NewRequest(http.MethodPost, "/v1/agents/report", cr)
	req.ContentLength = length
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, req)
	return rec.Code, cr.n
}

// reportBody is the body of a report of pod in scope ok listing n sessions.
func reportBody(pod string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"pod_id":%q,"scope_id":"ok","sessions":[`, pod)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"s%d"`, i)
	}
	b.WriteString("]}")
	return b.String()
}

// The report route checks the token before it reads a byte of the body (issue 31): the
// token names the pod it speaks for. A wrong token, a gateway or admin token, the bare
// MAC that an older warmpool's tokens were, or none, is 401 with nothing of a 1 MiB
// body read. Before, every such body was read and decoded whole (100 at once took a
// replica to 652 MB), and only then was the token checked against the pod the body
// named.
func TestReportTokenIsCheckedBeforeTheBody(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withTokens("gw-token", "admin-token"), withReportSecret)
	e.ok(http.MethodPut, "/v1/scopes/ok/config", scopeCfg(4, 2, 0, 1), bearer("admin-token"))
	pod := e.routedPod("ok", "s1")
	own := e.srv.ReportToken("ok", pod)
	mac := own[strings.LastIndex(own, "~")+1:]
	big := reportBody(pod, 1) + strings.Repeat(" ", 1<<20-len(reportBody(pod, 1)))
	for name, tok := range map[string]string{
		"a wrong MAC":                   own[:len(own)-2] + "AA",
		"the bare MAC (older warmpool)": mac,
		"the gateway token":             "gw-token",
		"the admin token":               "admin-token",
		"none":                          "",
	} {
		for _, length := range []int64{int64(len(big)), -1} {
			if st, read := e.sendReport(tok, big, length); st != http.StatusUnauthorized || read != 0 {
				t.Errorf("%s, Content-Length %d: %d with %d bytes of the body read, want 401 with none", name, length, st, read)
			}
		}
	}
	if st, _ := e.sendReport(own, reportBody(pod, 1), -1); st != http.StatusOK {
		t.Fatalf("the pod's own token: %d", st)
	}
	// another pod's token (which only the secret makes) with this pod's body: refused,
	// read no further than a report of its scope may be
	if st, read := e.sendReport(e.srv.ReportToken("ok", pod+"x"), big, -1); st != http.StatusRequestEntityTooLarge || read > warmpool.ReportBodyLimit(2)+1 {
		t.Errorf("another pod's token with 1 MiB: %d after %d bytes, want 413 after at most %d", st, read, warmpool.ReportBodyLimit(2)+1)
	}
	if st, _ := e.sendReport(e.srv.ReportToken("ok", pod+"x"), reportBody(pod, 1), -1); st != http.StatusUnauthorized {
		t.Errorf("another pod's token with this pod's report: %d, want 401", st)
	}
}

// A report's body is bounded by its scope's pod_concurrency (issue 31, SPEC §12.4),
// read before the body: a report listing more sessions is 400 VALIDATION, and a body
// longer than a report of pod_concurrency sessions can be is 413 after at most that
// many bytes (at once when its Content-Length says so). Before, a report could list
// 10,000 sessions whatever pod_concurrency, every one of them read in the script, and
// its body took up to 1 MiB.
func TestReportBodyIsBoundedByPodConcurrency(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withReportSecret)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	pod := e.routedPod("ok", "s1")
	own := e.srv.ReportToken("ok", pod)
	limit := warmpool.ReportBodyLimit(2)
	e.wantErr(e.report(own, "ok", pod, "ready", "s1", "s2", "s3"), http.StatusBadRequest, warmpool.CodeValidation, "at most 2")
	huge := reportBody(pod, 10_000)
	if st, read := e.sendReport(own, huge, -1); st != http.StatusRequestEntityTooLarge || read > limit+1 {
		t.Errorf("10,000 sessions: %d after %d bytes read, want 413 after at most %d", st, read, limit+1)
	}
	if st, read := e.sendReport(own, huge, int64(len(huge))); st != http.StatusRequestEntityTooLarge || read != 0 {
		t.Errorf("10,000 sessions, Content-Length %d: %d after %d bytes read, want 413 at once", len(huge), st, read)
	}
	e.ok(http.MethodPost, "/v1/agents/report", map[string]any{"pod_id": pod, "scope_id": "ok", "sessions": []string{"s1", "s2"}}, bearer(own))
}

// A pod's reports are bounded by what its last report was answered (no Redis read
// before the body), yet a raise of pod_concurrency is honoured at once: a report
// listing more sessions than the cached cap asks Redis and goes through, and a body
// longer than the cached bound is refused once, the next report asking Redis first.
func TestReportAfterARaiseOfPodConcurrency(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withReportSecret)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	pod := e.routedPod("ok", "s1")
	own := e.srv.ReportToken("ok", pod)
	e.ok(http.MethodPost, "/v1/agents/report", map[string]any{"pod_id": pod, "scope_id": "ok", "sessions": []string{"s1"}}, bearer(own))
	e.putScope("ok", scopeCfg(8, 4, 0, 1))
	e.ok(http.MethodPost, "/v1/agents/report", map[string]any{"pod_id": pod, "scope_id": "ok", "sessions": []string{"s1", "s2", "s3"}}, bearer(own))
	e.putScope("ok", scopeCfg(16, 8, 0, 1))
	// a report padded past the bound of 4 sessions, within that of 8
	padded := func(n int64) string {
		b := reportBody(pod, 1)
		return b[:len(b)-1] + strings.Repeat(" ", int(n)-len(b)) + "}"
	}
	between := padded((warmpool.ReportBodyLimit(4) + warmpool.ReportBodyLimit(8)) / 2)
	if st, _ := e.sendReport(own, between, -1); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body past the cached bound of 4 sessions: %d, want 413 once", st)
	}
	if st, _ := e.sendReport(own, between, -1); st != http.StatusOK {
		t.Fatalf("the same report again, its bound read from Redis (8 sessions): %d, want 200", st)
	}
	if st, _ := e.sendReport(own, padded(warmpool.ReportBodyLimit(8)+100), -1); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body past the bound of 8 sessions: %d, want 413", st)
	}
}

// After a Redis data loss only a session whose session_ticket proves it was routed to
// the pod is bound to it again from the pod's reports (issue 31, SPEC §12.4): the
// route and GET answers carry the ticket; pod 2's agent naming pod 1's sessions first
// (no ticket, pod 1's tickets, a made-up one) gets them answered unknown, and pod 1's
// agent, with their tickets, takes them back. A session bound to the pod already is
// kept alive without its ticket. Before, the first report that named a session bound
// it, whichever pod it came from.
func TestTicketsProveARebuiltBinding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := mustEnv(t, withReportSecret)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	routes := map[string]map[string]any{}
	for _, s := range []string{"s1", "s2", "s3"} {
		routes[s] = e.route("ok", s)
	}
	pod1, pod2 := routes["s1"]["pod_id"].(string), routes["s3"]["pod_id"].(string)
	if routes["s2"]["pod_id"] != pod1 || pod2 == pod1 {
		t.Fatalf("routes %v: want s1 and s2 on one pod, s3 on another", routes)
	}
	ticket := func(s string) string { return routes[s]["session_ticket"].(string) }
	if got := e.ok(http.MethodGet, "/v1/scopes/ok/sessions/s1", nil)["session_ticket"]; got != ticket("s1") || len(ticket("s1")) != 43 {
		t.Fatalf("GET s1's ticket %v, the route's %q", got, ticket("s1"))
	}
	report := func(pod string, tickets map[string]string, sessions ...string) []any {
		t.Helper()
		body := map[string]any{"pod_id": pod, "scope_id": "ok", "sessions": sessions, "tickets": tickets}
		return e.ok(http.MethodPost, "/v1/agents/report", body, bearer(e.srv.ReportToken("ok", pod)))["unknown_sessions"].([]any)
	}
	tok := bearer(e.srv.ReportToken("ok", pod1))
	for _, c := range []struct {
		tickets map[string]string
		msg     string
	}{{map[string]string{"s9": ticket("s1")}, "not listed"}, {map[string]string{"s1": "short"}, "43 characters"}} {
		body := map[string]any{"pod_id": pod1, "scope_id": "ok", "sessions": []string{"s1"}, "tickets": c.tickets}
		e.wantErr(e.do(http.MethodPost, "/v1/agents/report", body, tok), http.StatusBadRequest, warmpool.CodeValidation, "tickets", c.msg)
	}
	if err := e.r.DeleteAll(ctx); err != nil {
		t.Fatal(err)
	}
	if ran, err := e.srv.Runner.RunOnce(ctx, e.srv.Sweeper.ReconcileJob()); !ran || err != nil {
		t.Fatalf("reconcile: ran %v, %v", ran, err)
	}
	made := strings.Repeat("A", 43)
	for name, tickets := range map[string]map[string]string{
		"no ticket":       nil,
		"pod 1's tickets": {"s1": ticket("s1"), "s2": ticket("s2")},
		"made-up tickets": {"s1": made, "s2": made},
	} {
		if unknown := report(pod2, tickets, "s1", "s2"); len(unknown) != 2 {
			t.Fatalf("pod 2 naming pod 1's sessions with %s: unknown %v, want both", name, unknown)
		}
	}
	if unknown := report(pod1, map[string]string{"s1": ticket("s1"), "s2": ticket("s2")}, "s1", "s2"); len(unknown) != 0 {
		t.Fatalf("pod 1 with its tickets: unknown %v", unknown)
	}
	if unknown := report(pod2, map[string]string{"s3": ticket("s3")}, "s3"); len(unknown) != 0 {
		t.Fatalf("pod 2 with s3's ticket: unknown %v", unknown)
	}
	for s, pod := range map[string]string{"s1": pod1, "s2": pod1, "s3": pod2} {
		if got := e.ok(http.MethodGet, "/v1/scopes/ok/sessions/"+s, nil)["pod_id"]; got != pod {
			t.Fatalf("%s after the rebuild on %v, want %s", s, got, pod)
		}
	}
	if unknown := report(pod1, nil, "s1", "s2"); len(unknown) != 0 {
		t.Fatalf("pod 1 without tickets, its sessions bound again: unknown %v", unknown)
	}
}
