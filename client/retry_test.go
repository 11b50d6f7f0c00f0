package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestWait: the wait before a retry is the larger of the Retry-After and the doubled
// backoff (capped), plus up to a quarter of it at random, never less.
func TestWait(t *testing.T) {
	p := retryPolicy{base: 100 * time.Millisecond, max: time.Second}
	for _, c := range []struct {
		n          int
		retryAfter time.Duration
		want       time.Duration // before jitter
	}{
		{1, 0, 100 * time.Millisecond},
		{2, 0, 200 * time.Millisecond},
		{4, 0, 800 * time.Millisecond},
		{5, 0, time.Second}, // capped
		{64, 0, time.Second},
		{1000, 0, time.Second},
		{1, 2 * time.Second, 2 * time.Second}, // Retry-After over the cap is honoured
		{3, 300 * time.Millisecond, 400 * time.Millisecond},
	} {
		p.jitter = func(int64) int64 { return 0 }
		if got := p.wait(c.n, c.retryAfter); got != c.want {
			t.Errorf("wait(%d, %v) without jitter = %v, want %v", c.n, c.retryAfter, got, c.want)
		}
		var bound int64
		p.jitter = func(n int64) int64 { bound = n; return n - 1 }
		if got := p.wait(c.n, c.retryAfter); got != c.want+c.want/4 {
			t.Errorf("wait(%d, %v) with the largest jitter = %v, want %v", c.n, c.retryAfter, got, c.want+c.want/4)
		}
		if bound != int64(c.want/4)+1 {
			t.Errorf("wait(%d, %v) drew jitter below %d, want below %d", c.n, c.retryAfter, bound, c.want/4+1)
		}
	}
}

// TestWaitSpreads: with the real random source the waits of many clients differ.
func TestWaitSpreads(t *testing.T) {
	c := mustClient(t, "http://127.0.0.1:1")
	seen := map[time.Duration]bool{}
	for range 100 {
		w := c.retry.wait(1, time.Second)
		if w < time.Second || w > time.Second+time.Second/4 {
			t.Fatalf("wait %v: want within [1s, 1.25s]", w)
		}
		seen[w] = true
	}
	if len(seen) < 50 {
		t.Fatalf("100 waits took %d values: no jitter", len(seen))
	}
}

// recorder is a test server that answers from a script of answers, the last one
// for every call past it, and records what each call sent.
type recorder struct {
	mu      sync.Mutex
	answers []answer
	calls   []*http.Request
	at      []time.Time
}

type answer struct {
	status int
	body   string
	header map[string]string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	sent := req.Clone(context.Background())
	sent.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.calls = append(r.calls, sent)
	r.at = append(r.at, time.Now())
	a := r.answers[min(len(r.calls), len(r.answers))-1]
	r.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write([]byte(a.body))
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// sent returns the calls so far and when each came.
func (r *recorder) sent() ([]*http.Request, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls), slices.Clone(r.at)
}

func (r *recorder) keys() []string {
	calls, _ := r.sent()
	var keys []string
	for _, c := range calls {
		keys = append(keys, c.Header.Get("Idempotency-Key"))
	}
	return keys
}

// serve starts a recorder server with answers.
func serve(t *testing.T, answers ...answer) (*recorder, string) {
	t.Helper()
	r := &recorder{answers: answers}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func mustClient(t *testing.T, base string, opts ...Option) *Client {
	t.Helper()
	c, err := New(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refused is an error answer of code with status, and a Retry-After of ra seconds
// when ra > 0.
func refused(status int, code Code, ra int) answer {
	a := answer{status: status, body: fmt.Sprintf(`{"error":{"code":%q,"message":"no"}}`, code)}
	if ra > 0 {
		a.body = fmt.Sprintf(`{"error":{"code":%q,"message":"no","retry_after":%d}}`, code, ra)
		a.header = map[string]string{"Retry-After": strconv.Itoa(ra)}
	}
	return a
}

var bound = answer{status: 200, body: `{"scope_id":"a","session_id":"s1","pod_id":"p1","pod_sse_url":"http://p1/sse","deploy_ver":"0123456789abcdef","new":true}`}

// fast is the retry policy of the loop tests: retries at once, nearly.
var fast = WithBackoff(time.Millisecond, time.Millisecond)

// TestRetriesWhatMaySucceed: each retryable refusal is sent again, under one
// Idempotency-Key, until it succeeds; nothing else is sent twice.
func TestRetriesWhatMaySucceed(t *testing.T) {
	for _, a := range []answer{refused(503, CodeNoPodAvailable, 0), refused(503, CodeQueueFull, 0),
		refused(503, CodeStoreUnavailable, 0), refused(429, CodeQuotaExceeded, 0)} {
		rec, base := serve(t, a, a, bound)
		b, err := mustClient(t, base, fast).Route(context.Background(), "a", "s1")
		if err != nil || b.PodID != "p1" || !b.New {
			t.Fatalf("after %s: %+v, %v", a.body, b, err)
		}
		keys := rec.keys()
		if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
			t.Fatalf("after %s: Idempotency-Keys %q, want one key three times", a.body, keys)
		}
	}
	for _, a := range []answer{refused(400, CodeValidation, 0), refused(401, CodeUnauthorized, 0), refused(403, CodeForbidden, 0),
		refused(404, CodeScopeNotFound, 0), refused(422, CodeIdempotencyMismatch, 0), refused(500, CodeInternal, 0),
		refused(502, CodeDeployFailed, 0), refused(504, CodeWaitTimeout, 0), refused(409, CodeConfigSyncBusy, 1),
		{status: 503, body: "<html>bad gateway</html>"}} {
		rec, base := serve(t, a, bound)
		_, err := mustClient(t, base, fast).Route(context.Background(), "a", "s1")
		if e, ok := errors.AsType[*Error](err); !ok || e.Status != a.status || rec.count() != 1 {
			t.Fatalf("after %d %s: %v in %d calls, want that answer after one", a.status, a.body, err, rec.count())
		}
	}
}

// TestGivesUpAfterMaxAttempts: a call refused every time is sent MaxAttempts times and
// returns the last refusal.
func TestGivesUpAfterMaxAttempts(t *testing.T) {
	rec, base := serve(t, refused(503, CodeNoPodAvailable, 0))
	_, err := mustClient(t, base, fast, WithMaxAttempts(3)).Acquire(context.Background(), "a")
	if !errors.Is(err, CodeNoPodAvailable) || rec.count() != 3 {
		t.Fatalf("%v after %d calls, want NO_POD_AVAILABLE after 3", err, rec.count())
	}
	rec, base = serve(t, refused(503, CodeNoPodAvailable, 0))
	if _, err := mustClient(t, base, fast, WithMaxAttempts(1)).Acquire(context.Background(), "a"); !errors.Is(err, CodeNoPodAvailable) || rec.count() != 1 {
		t.Fatalf("max attempts 1: %v after %d calls, want one call", err, rec.count())
	}
}

// TestHonoursRetryAfter: the retry waits the Retry-After the server named, more than
// the backoff would.
func TestHonoursRetryAfter(t *testing.T) {
	rec, base := serve(t, refused(503, CodeQueueFull, 1), bound)
	if _, err := mustClient(t, base, fast).Route(context.Background(), "a", "s1"); err != nil {
		t.Fatal(err)
	}
	_, at := rec.sent()
	if gap := at[1].Sub(at[0]); gap < time.Second || gap > 2*time.Second {
		t.Fatalf("retried %v after a Retry-After of 1s: want 1-1.25s", gap)
	}
}

// TestGivesUpBeforeTheDeadline: a wait that would end past the context's deadline or
// past the retry budget is not begun: the call returns the refusal at once.
func TestGivesUpBeforeTheDeadline(t *testing.T) {
	rec, base := serve(t, refused(503, CodeNoPodAvailable, 5), bound)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := mustClient(t, base).Route(ctx, "a", "s1")
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Code != CodeNoPodAvailable || e.RetryAfter != 5*time.Second || rec.count() != 1 {
		t.Fatalf("%v after %d calls, want NO_POD_AVAILABLE with its Retry-After 5s after one", err, rec.count())
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %v: it waited instead of giving up", took)
	}

	rec, base = serve(t, refused(503, CodeNoPodAvailable, 1), bound)
	start = time.Now()
	if _, err := mustClient(t, base, WithRetryBudget(900*time.Millisecond)).Route(context.Background(), "a", "s1"); !errors.Is(err, CodeNoPodAvailable) || rec.count() != 1 {
		t.Fatalf("budget 900ms, Retry-After 1s: %v after %d calls, want the refusal after one", err, rec.count())
	}
	if took := time.Since(start); took > 800*time.Millisecond {
		t.Fatalf("took %v: it waited instead of giving up", took)
	}
}

// TestCancelledWhileWaiting: a context cancelled during the wait ends the call with
// the refusal and the context's error.
func TestCancelledWhileWaiting(t *testing.T) {
	_, base := serve(t, refused(503, CodeQueueFull, 30), bound)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelAfter := roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(req)
		cancel()
		return resp, err
	})
	start := time.Now()
	_, err := mustClient(t, base, WithRetryBudget(0), WithTransport(cancelAfter)).Route(ctx, "a", "s1")
	if !errors.Is(err, CodeQueueFull) || !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %v, want QUEUE_FULL and context.Canceled at once", err, time.Since(start))
	}
}

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// failing fails its first n round trips before any answer, then passes them on.
type failing struct {
	mu   sync.Mutex
	n    int
	keys []string
}

func (f *failing) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.keys = append(f.keys, req.Header.Get("Idempotency-Key"))
	fail := len(f.keys) <= f.n
	f.mu.Unlock()
	if fail {
		return nil, errors.New("connection reset (injected)")
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestRetriesTransportErrors: a call that got no answer is sent again, under its key;
// the caller's key is the one sent.
func TestRetriesTransportErrors(t *testing.T) {
	rec, base := serve(t, bound)
	rt := &failing{n: 2}
	b, err := mustClient(t, base, fast, WithTransport(rt)).Route(context.Background(), "a", "s1", WithIdempotencyKey("gw-1"))
	if err != nil || b.PodID != "p1" {
		t.Fatalf("%+v, %v", b, err)
	}
	if len(rt.keys) != 3 || rt.keys[0] != "gw-1" || rt.keys[1] != "gw-1" || rt.keys[2] != "gw-1" || rec.count() != 1 {
		t.Fatalf("sent keys %q, %d answered: want gw-1 three times, one answered", rt.keys, rec.count())
	}

	rt = &failing{n: 10}
	_, err = mustClient(t, base, fast, WithTransport(rt), WithMaxAttempts(4)).End(context.Background(), "a", "s1")
	if err == nil || CodeOf(err) != "" || len(rt.keys) != 4 {
		t.Fatalf("%v after %d tries, want the transport error after 4", err, len(rt.keys))
	}
}

// TestEveryMutatingCallHasAKey: each mutating call sends a fresh Idempotency-Key (a
// valid request id), Get none.
func TestEveryMutatingCallHasAKey(t *testing.T) {
	rec, base := serve(t, answer{status: 200, body: `{}`})
	c := mustClient(t, base)
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := c.Route(ctx, "a", "s1")
	check("route", err)
	_, err = c.Touch(ctx, "a", "s1")
	check("touch", err)
	_, err = c.End(ctx, "a", "s1")
	check("end", err)
	_, err = c.Acquire(ctx, "a")
	check("acquire", err)
	_, err = c.TouchHold(ctx, "a", "p1", "h1")
	check("touch hold", err)
	_, _, err = c.Release(ctx, "a", "p1", "h1")
	check("release", err)
	_, err = c.Get(ctx, "a", "s1")
	check("get", err)
	keys := rec.keys()
	calls, _ := rec.sent()
	seen := map[string]bool{}
	for i, k := range keys[:6] {
		if len(k) < 16 || len(k) > 128 || seen[k] {
			t.Fatalf("call %d (%s %s): Idempotency-Key %q: want a fresh one", i, calls[i].Method, calls[i].URL.Path, k)
		}
		seen[k] = true
	}
	if keys[6] != "" {
		t.Fatalf("GET sent Idempotency-Key %q", keys[6])
	}
}
