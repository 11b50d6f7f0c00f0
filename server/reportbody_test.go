package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/reports"
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
	if st, read := e.sendReport(e.srv.ReportToken("ok", pod+"x"), big, -1); st != http.StatusRequestEntityTooLarge || read > reports.BodyLimit(2)+1 {
		t.Errorf("another pod's token with 1 MiB: %d after %d bytes, want 413 after at most %d", st, read, reports.BodyLimit(2)+1)
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
	limit := reports.BodyLimit(2)
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
