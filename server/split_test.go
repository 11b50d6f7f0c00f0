package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/syncbuf"
	"github.com/warmpool/warmpool/sqlite"
)

// Two replicas on one Redis but different config stores both store a v1 of a scope,
// with different images. The second publish is refused instead of silently replacing
// the first: its PUT fails naming the cause, the replica logs it as an error and
// counts it, and every replica keeps routing with the first v1.
func TestReplicasOnDifferentStoresDoNotSplitSilently(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	_, a := testserver.Serve(t, b.Config("replica-a"))

	other, err := sqlite.Open(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	var logs syncbuf.Buffer
	cfg := b.Config("replica-b")
	cfg.Store = other
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	_, bsrv := testserver.Serve(t, cfg)

	put := func(base, image string) (int, string) {
		t.Helper()
		doc := `{"deploy":{"image":"` + image + `","ready_timeout_s":10},"pool":{"max_concurrency":4,"pod_concurrency":2}}`
		return request(t, http.MethodPut, base+"/v1/scopes/split/config", doc)
	}
	if st, body := put(a.URL, "registry.example/agent:a"); st != http.StatusOK || !strings.Contains(body, `"version":1`) {
		t.Fatalf("put on replica a: %d %s", st, body)
	}
	st, body := put(bsrv.URL, "registry.example/agent:b")
	if st != http.StatusInternalServerError || !strings.Contains(body, "INTERNAL") || !strings.Contains(body, "config store") {
		t.Fatalf("put of another v1 on replica b: %d %s, want 500 naming the config stores", st, body)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "scope=split") {
		t.Fatalf("replica b's log does not report the conflict:\n%s", logs.String())
	}
	_, metrics := request(t, http.MethodGet, bsrv.URL+"/metrics", "")
	if !strings.Contains(metrics, `warmpool_events_total{event="config_publish",outcome="conflict"} 1`) {
		t.Fatalf("replica b's metrics do not count the conflict:\n%s", grepLines(metrics, "warmpool_events_total"))
	}
	// Both replicas route with replica a's v1: every pod deployed has its image.
	for _, base := range []string{a.URL, bsrv.URL} {
		for _, session := range []string{"s1", "s2"} {
			if st, body := request(t, http.MethodPost, base+"/v1/scopes/split/sessions", `{"session_id":"`+base[len(base)-5:]+session+`"}`); st != http.StatusOK {
				t.Fatalf("route: %d %s", st, body)
			}
		}
	}
	deploys := b.Fake.Deploys()
	if len(deploys) == 0 {
		t.Fatal("no pod deployed")
	}
	for _, d := range deploys {
		if d.Req.Spec.Image != "registry.example/agent:a" {
			t.Fatalf("a pod was deployed with %s, want replica a's image only", d.Req.Spec.Image)
		}
	}
}

// request makes one call, with the request headers hdrs (name, value pairs), and
// returns its status and body.
func request(t *testing.T, method, url, body string, hdrs ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdrs); i += 2 {
		req.Header.Set(hdrs[i], hdrs[i+1])
	}
	res, raw := testserver.Do(t, req)
	return res.StatusCode, string(raw)
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
