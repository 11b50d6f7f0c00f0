package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestErrorOfTheEnvelope: a refusal is an *Error with everything the answer said,
// matched by errors.Is against its code and by nothing else.
func TestErrorOfTheEnvelope(t *testing.T) {
	_, base := serve(t, answer{status: 429, header: map[string]string{"Retry-After": "7", "X-Request-Id": "req-1"},
		body: `{"error":{"code":"QUOTA_EXCEEDED","message":"tenant t1 is at max_memory","retry_after":3,` +
			`"details":{"tenant":"t1","quota":"max_memory","limit":"8Gi","use":"7.5Gi"}}}`})
	_, err := mustClient(t, base, WithMaxAttempts(1)).Route(context.Background(), "a", "s1")
	e, ok := errors.AsType[*Error](err)
	if !ok {
		t.Fatalf("%T %v, want *Error", err, err)
	}
	if e.Status != 429 || e.Code != CodeQuotaExceeded || e.Message != "tenant t1 is at max_memory" || e.RetryAfter != 7*time.Second || e.RequestID != "req-1" {
		t.Fatalf("%+v", e)
	}
	if q, ok := e.Quota(); !ok || q != (QuotaDetails{Tenant: "t1", Quota: "max_memory", Limit: "8Gi", Use: "7.5Gi"}) {
		t.Fatalf("Quota() = %+v, %v", q, ok)
	}
	if !errors.Is(err, CodeQuotaExceeded) || errors.Is(err, CodeNoPodAvailable) || CodeOf(err) != CodeQuotaExceeded {
		t.Fatalf("errors.Is / CodeOf of %v", err)
	}
	if want := "warmpool: 429 QUOTA_EXCEEDED: tenant t1 is at max_memory (request id req-1)"; err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	if CodeOf(nil) != "" || CodeOf(errors.New("x")) != "" || CodeOf(context.Canceled) != "" {
		t.Fatal("CodeOf of a non-*Error is not empty")
	}
}

// TestErrorDetails: Quota decodes the details of QUOTA_EXCEEDED, limits as numbers or
// quantities, and nothing else.
func TestErrorDetails(t *testing.T) {
	for _, c := range []struct {
		name string
		e    Error
		want QuotaDetails
		ok   bool
	}{
		{"numbers", Error{Code: CodeQuotaExceeded, Details: []byte(`{"tenant":"t","quota":"max_pods","limit":4,"use":4}`)},
			QuotaDetails{Tenant: "t", Quota: "max_pods", Limit: "4", Use: "4"}, true},
		{"no details", Error{Code: CodeQuotaExceeded}, QuotaDetails{}, false},
		{"another code", Error{Code: CodeNoPodAvailable, Details: []byte(`{"tenant":"t"}`)}, QuotaDetails{}, false},
		{"bad shape", Error{Code: CodeQuotaExceeded, Details: []byte(`{"limit":[1]}`)}, QuotaDetails{}, false},
	} {
		if got, ok := c.e.Quota(); got != c.want || ok != c.ok {
			t.Errorf("%s: Quota() = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestErrorWithoutEnvelope: an answer of something in between (a proxy's page) keeps
// its status and the start of its body; the envelope's retry_after stands in for a
// missing header, and an HTTP-date header counts from now.
func TestErrorWithoutEnvelope(t *testing.T) {
	_, base := serve(t, answer{status: 502, body: "<html>" + strings.Repeat("x", 2000) + "</html>"})
	_, err := mustClient(t, base).Get(context.Background(), "a", "s1")
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Status != 502 || e.Code != "" || !strings.HasPrefix(e.Message, "<html>xxx") || len(e.Message) > maxMessage+len("…") {
		t.Fatalf("%+v", err)
	}

	_, base = serve(t, answer{status: 404, body: `{"error":{"code":"SESSION_NOT_FOUND","message":"no","retry_after":2}}`})
	_, err = mustClient(t, base).Get(context.Background(), "a", "s1")
	if e, ok := errors.AsType[*Error](err); !ok || e.RetryAfter != 2*time.Second || !errors.Is(err, CodeSessionNotFound) {
		t.Fatalf("%+v", err)
	}

	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{"3": 3 * time.Second, "-1": 0, now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat): 0} {
		if got, ok := retryAfter(v, now); !ok || got != want {
			t.Errorf("Retry-After %q = %v, %v; want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "soon", "1.5"} {
		if got, ok := retryAfter(v, now); ok {
			t.Errorf("Retry-After %q = %v, want none", v, got)
		}
	}
}

// TestAnswersAreBounded: an answer over 1 MiB is an error, read no further.
func TestAnswersAreBounded(t *testing.T) {
	rec, base := serve(t, answer{status: 200, body: `{"pod_id":"` + strings.Repeat("p", maxResponse) + `"}`})
	_, err := mustClient(t, base).Route(context.Background(), "a", "s1")
	if err == nil || !strings.Contains(err.Error(), "over 1048576 bytes") || rec.count() != 1 {
		t.Fatalf("%v after %d calls", err, rec.count())
	}
	_, base = serve(t, answer{status: 200, body: `not json`})
	if _, err := mustClient(t, base).Route(context.Background(), "a", "s1"); err == nil || CodeOf(err) != "" {
		t.Fatalf("an answer that is not JSON: %v", err)
	}
}

// TestRequests: each call's method, path (ids escaped), headers and body; the
// session_config field only when asked for, and only where it belongs.
func TestRequests(t *testing.T) {
	rec, base := serve(t, answer{status: 200, body: `{"released":true,"idle":true,"touched":true,"hold_until":"2026-01-02T03:04:05.000Z"}`})
	c := mustClient(t, base+"/warmpool/", WithToken("gw-token"), WithUserAgent("gw/1"))
	ctx := context.Background()
	var bodies []string
	body := func(r *http.Request) string {
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	_, _ = c.Route(ctx, "a", "s1")
	_, _ = c.Route(ctx, "a", "s2", WithSessionConfig(SessionConfig{Env: map[string]string{"USER": "u1"},
		SecretRefs: map[string]SecretRef{"TOKEN": {Secret: "s", Key: "k"}}}))
	_, _ = c.Acquire(ctx, "a")
	_, _ = c.Get(ctx, "a", "x/y z")
	touched, err := c.Touch(ctx, "a", "s1")
	if !touched || err != nil {
		t.Fatalf("touch: %v, %v", touched, err)
	}
	released, idle, err := c.Release(ctx, "a", "p1", "h1")
	if !released || !idle || err != nil {
		t.Fatalf("release: %v %v %v", released, idle, err)
	}
	until, err := c.TouchHold(ctx, "a", "p1", "h1")
	if !until.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || err != nil {
		t.Fatalf("touch hold: %v, %v", until, err)
	}
	if _, err := c.End(ctx, "a", "s1"); err != nil {
		t.Fatal(err)
	}
	want := []struct{ method, uri, body string }{
		{"POST", "/warmpool/v1/scopes/a/sessions", `{"session_id":"s1"}`},
		{"POST", "/warmpool/v1/scopes/a/sessions", `{"session_id":"s2","session_config":{"env":{"USER":"u1"},"secret_refs":{"TOKEN":{"secret":"s","key":"k"}}}}`},
		{"POST", "/warmpool/v1/scopes/a/pods/acquire", `{}`},
		{"GET", "/warmpool/v1/scopes/a/sessions/x%2Fy%20z", ``},
		{"POST", "/warmpool/v1/scopes/a/sessions/s1/touch", ``},
		{"POST", "/warmpool/v1/scopes/a/pods/p1/release", `{"hold_id":"h1"}`},
		{"POST", "/warmpool/v1/scopes/a/pods/p1/touch", `{"hold_id":"h1"}`},
		{"DELETE", "/warmpool/v1/scopes/a/sessions/s1", ``},
	}
	calls, _ := rec.sent()
	if len(calls) != len(want) {
		t.Fatalf("%d calls, want %d", len(calls), len(want))
	}
	for i, r := range calls {
		bodies = append(bodies, body(r))
		w := want[i]
		if r.Method != w.method || r.RequestURI != w.uri || bodies[i] != w.body {
			t.Errorf("call %d: %s %s %s, want %s %s %s", i, r.Method, r.RequestURI, bodies[i], w.method, w.uri, w.body)
		}
		if r.Header.Get("Authorization") != "Bearer gw-token" || r.Header.Get("User-Agent") != "gw/1" || r.Header.Get("Accept") != "application/json" {
			t.Errorf("call %d: headers %v", i, r.Header)
		}
		if ct := r.Header.Get("Content-Type"); (w.body != "") != (ct == "application/json") {
			t.Errorf("call %d: Content-Type %q with body %q", i, ct, w.body)
		}
	}

	n := rec.count()
	if _, err := c.Touch(ctx, "a", "s1", WithSessionConfig(SessionConfig{})); !errors.Is(err, errNoSessionConfig) || rec.count() != n {
		t.Fatalf("touch with a session config: %v, sent %d", err, rec.count()-n)
	}
}

// TestNew refuses bad URLs and options, and never changes the caller's http.Client.
func TestNew(t *testing.T) {
	for _, c := range []struct {
		url  string
		opts []Option
	}{
		{"127.0.0.1:8080", nil},
		{"ftp://h", nil},
		{"http://", nil},
		{"http://h?x=1", nil},
		{"http://h\x7f", nil},
		{"http://h", []Option{WithMaxAttempts(0)}},
		{"http://h", []Option{WithRetryBudget(-time.Second)}},
		{"http://h", []Option{WithBackoff(0, time.Second)}},
		{"http://h", []Option{WithBackoff(2*time.Second, time.Second)}},
	} {
		if _, err := New(c.url, c.opts...); err == nil || !strings.HasPrefix(err.Error(), "warmpool client: ") {
			t.Errorf("New(%q) = %v, want an error", c.url, err)
		}
	}
	hc := &http.Client{Timeout: time.Minute}
	c := mustClient(t, "https://h:8443/", WithHTTPClient(hc), WithTransport(roundTripper(nil)))
	if hc.Transport != nil || c.http == hc || c.http.Timeout != time.Minute || c.http.Transport == nil || c.base != "https://h:8443" {
		t.Fatalf("client %+v from %+v", c.http, hc)
	}
}

// TestLogsRetries: each retry is one line of the logger given.
func TestLogsRetries(t *testing.T) {
	_, base := serve(t, refused(503, CodeNoPodAvailable, 0), bound)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	if _, err := mustClient(t, base, fast, WithLogger(log)).Route(context.Background(), "a", "s1"); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "warmpool call retried") || !strings.Contains(out, "attempt=2") || !strings.Contains(out, "NO_POD_AVAILABLE") {
		t.Fatalf("log:\n%s", out)
	}
}
