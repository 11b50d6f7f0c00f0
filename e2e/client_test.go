package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warmpool/warmpool/client"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// The Go client (package client) against the built binary: one replica with the fake
// driver (its pods in a directory, so that the test injects deploy failures), a real
// redis-server of the test's own (killed at the end for STORE_UNAVAILABLE) and both
// tokens on. Every call goes through a gwTap, the client's RoundTripper hook, which
// records each attempt: how many were sent and with which Idempotency-Key.

// gwRig is the replica under test.
type gwRig struct {
	t      *testing.T
	base   string
	podDir string
	redis  *testredis.Server
}

func newGWRig(t *testing.T) *gwRig {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	bin := warmpoolBin(t)
	dir := t.TempDir()
	r := &gwRig{t: t, base: "http://" + freeAddr(t), podDir: filepath.Join(dir, "pods"), redis: testredis.StartServer(t)}
	p := startServe(t, bin, "serve", "--listen", strings.TrimPrefix(r.base, "http://"), "--redis", r.redis.URL(),
		"--driver", "fake", "--fake-state-dir", r.podDir, "--store", filepath.Join(dir, "w.db"), "--log-format", "json",
		"--auth-token", gatewayToken, "--admin-token", adminToken)
	p.waitReady(t, r.base, 60*time.Second)
	return r
}

// scope stores a scope whose pool is the JSON object's fields pool.
func (r *gwRig) scope(id, pool string) {
	r.t.Helper()
	if st, raw := request(r.t, http.MethodPut, r.base+"/v1/scopes/"+id+"/config", "Bearer "+adminToken, `{"pool":{`+pool+`}}`); st != http.StatusOK {
		r.t.Fatalf("put %s: %d %s", id, st, raw)
	}
}

// client is a client of the replica with the gateway token, its calls through tap.
func (r *gwRig) client(tap *gwTap, opts ...client.Option) *client.Client {
	r.t.Helper()
	c, err := client.New(r.base, append([]client.Option{client.WithToken(gatewayToken), client.WithTransport(tap)}, opts...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// gwTap records every attempt a client sends; after, when set, runs after each answer.
type gwTap struct {
	mu    sync.Mutex
	tries []gwTry
	after func(n int, status int)
}

type gwTry struct {
	method, path, key string
	status            int // 0: no answer
}

func (p *gwTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	try := gwTry{method: req.Method, path: req.URL.Path, key: req.Header.Get("Idempotency-Key")}
	if err == nil {
		try.status = resp.StatusCode
	}
	p.mu.Lock()
	p.tries = append(p.tries, try)
	n, after := len(p.tries), p.after
	p.mu.Unlock()
	if after != nil {
		after(n, try.status)
	}
	return resp, err
}

// sent returns the attempts so far and forgets them.
func (p *gwTap) sent() []gwTry {
	p.mu.Lock()
	defer p.mu.Unlock()
	tries := p.tries
	p.tries = nil
	return tries
}

// oneKey fails the test unless tries are n attempts, all of one call under one
// Idempotency-Key, each answered status; it returns the key.
func oneKey(t *testing.T, tries []gwTry, n, status int) string {
	t.Helper()
	if len(tries) != n {
		t.Fatalf("%d attempts %+v, want %d", len(tries), tries, n)
	}
	for _, try := range tries {
		if try.key == "" || try.key != tries[0].key || try.path != tries[0].path || try.status != status {
			t.Fatalf("attempts %+v: want %d of one call under one key, each answered %d", tries, n, status)
		}
	}
	return tries[0].key
}

// refusedWith fails the test unless err is an *Error of code and status with a
// message (holding says, when not "") and the answer's request id.
func refusedWith(t *testing.T, err error, code client.Code, status int, says string) {
	t.Helper()
	e, ok := errors.AsType[*client.Error](err)
	if !ok || !errors.Is(err, code) || e.Status != status || e.Message == "" || !strings.Contains(e.Message, says) || e.RequestID == "" {
		t.Fatalf("%T %v: want %d %s with a message (saying %q) and a request id", err, err, status, code, says)
	}
}

var deployVer = regexp.MustCompile(`^[0-9a-f]{16}$`)

// TestClientAgainstTheBinary drives every call of the client, each refusal the
// server can be brought to answer, and the retries, against the built binary.
func TestClientAgainstTheBinary(t *testing.T) {
	r := newGWRig(t)
	r.scope("warm", `"max_concurrency":4,"pod_concurrency":2`)
	r.scope("full", `"max_concurrency":1,"pod_concurrency":1,"queue_size":0`)
	r.scope("queue", `"max_concurrency":1,"pod_concurrency":1,"queue_size":1,"wait_timeout_s":30`)
	r.scope("deploys", `"max_concurrency":2,"pod_concurrency":1`)
	tap := &gwTap{}
	c := r.client(tap)
	ctx := context.Background()

	t.Run("sessions", func(t *testing.T) {
		b, err := c.Route(ctx, "warm", "s1")
		if err != nil || !b.New || b.ScopeID != "warm" || b.SessionID != "s1" || b.PodID == "" || !strings.HasPrefix(b.PodSSEURL, "http") ||
			!deployVer.MatchString(b.DeployVer) || b.SessionTicket != "" {
			t.Fatalf("route: %+v, %v", b, err)
		}
		again, err := c.Route(ctx, "warm", "s1")
		if err != nil || again.New || again.PodID != b.PodID {
			t.Fatalf("route again: %+v, %v; want %s, not new", again, err, b.PodID)
		}
		if got, err := c.Get(ctx, "warm", "s1"); err != nil || got.PodID != b.PodID || got.SessionID != "s1" {
			t.Fatalf("get: %+v, %v", got, err)
		}
		if ok, err := c.Touch(ctx, "warm", "s1"); !ok || err != nil {
			t.Fatalf("touch: %v, %v", ok, err)
		}
		if ok, err := c.End(ctx, "warm", "s1"); !ok || err != nil {
			t.Fatalf("end: %v, %v", ok, err)
		}
		if ok, err := c.End(ctx, "warm", "s1"); ok || err != nil {
			t.Fatalf("end again: %v, %v; want false", ok, err)
		}
		if ok, err := c.Touch(ctx, "warm", "s1"); ok || err != nil {
			t.Fatalf("touch of an ended session: %v, %v; want false", ok, err)
		}
		_, err = c.Get(ctx, "warm", "s1")
		refusedWith(t, err, client.CodeSessionNotFound, 404, "")
		tries := tap.sent()
		if len(tries) != 8 {
			t.Fatalf("%d attempts for 8 calls: %+v", len(tries), tries)
		}
		for _, try := range tries {
			if (try.method == http.MethodGet) != (try.key == "") {
				t.Fatalf("%+v: want a key on every mutating call, none on a GET", try)
			}
		}
	})

	t.Run("holds", func(t *testing.T) {
		h, err := c.Acquire(ctx, "warm")
		if err != nil || h.PodID == "" || h.HoldID == "" || h.PodSSEURL == "" || !deployVer.MatchString(h.DeployVer) ||
			h.Source == "" || !h.HoldUntil.After(time.Now()) {
			t.Fatalf("acquire: %+v, %v", h, err)
		}
		until, err := c.TouchHold(ctx, "warm", h.PodID, h.HoldID)
		if err != nil || until.Before(h.HoldUntil) {
			t.Fatalf("touch hold: %v, %v; want at or after %v", until, err, h.HoldUntil)
		}
		released, idle, err := c.Release(ctx, "warm", h.PodID, h.HoldID)
		if !released || !idle || err != nil {
			t.Fatalf("release: %v %v %v; want released, the pod idle", released, idle, err)
		}
		_, err = c.TouchHold(ctx, "warm", h.PodID, h.HoldID)
		refusedWith(t, err, client.CodeHoldNotFound, 404, "")
		_, _, err = c.Release(ctx, "warm", h.PodID, h.HoldID)
		refusedWith(t, err, client.CodeHoldNotFound, 404, "")
		tap.sent()
	})

	t.Run("refusals are not retried", func(t *testing.T) {
		_, err := c.Route(ctx, "warm", "bad id!")
		refusedWith(t, err, client.CodeValidation, 400, "session_id")
		oneKey(t, tap.sent(), 1, 400)

		_, err = c.Route(ctx, "warm", "s1", client.WithIdempotencyKey("not a key"))
		refusedWith(t, err, client.CodeValidation, 400, "")
		if key := oneKey(t, tap.sent(), 1, 400); key != "not a key" {
			t.Fatalf("sent key %q, want the caller's", key)
		}

		_, err = r.client(tap, client.WithToken("wrong-token")).Route(ctx, "warm", "s1")
		refusedWith(t, err, client.CodeUnauthorized, 401, "")
		oneKey(t, tap.sent(), 1, 401)

		_, err = c.Route(ctx, "nope", "s1")
		refusedWith(t, err, client.CodeScopeNotFound, 404, "")
		oneKey(t, tap.sent(), 1, 404)

		prefixed, err := client.New(r.base+"/not-warmpool", client.WithToken(gatewayToken), client.WithTransport(tap))
		if err != nil {
			t.Fatal(err)
		}
		_, err = prefixed.Touch(ctx, "warm", "s1")
		refusedWith(t, err, client.CodeNotFound, 404, "")
		oneKey(t, tap.sent(), 1, 404)

		big := client.SessionConfig{Env: map[string]string{"BIG": strings.Repeat("x", 1<<20)}}
		_, err = c.Route(ctx, "warm", "s1", client.WithSessionConfig(big))
		refusedWith(t, err, client.CodePayloadTooLarge, 413, "")
		oneKey(t, tap.sent(), 1, 413)
	})

	t.Run("idempotency", func(t *testing.T) {
		first, err := c.Route(ctx, "warm", "s2", client.WithIdempotencyKey("gw-req-1"))
		if err != nil {
			t.Fatal(err)
		}
		replay, err := c.Route(ctx, "warm", "s2", client.WithIdempotencyKey("gw-req-1"))
		if err != nil || replay.PodID != first.PodID {
			t.Fatalf("replay: %+v, %v; want %s", replay, err, first.PodID)
		}
		_, err = c.Route(ctx, "warm", "s3", client.WithIdempotencyKey("gw-req-1"))
		refusedWith(t, err, client.CodeIdempotencyMismatch, 422, "")
		_, err = c.Acquire(ctx, "warm", client.WithIdempotencyKey("gw-req-1"))
		refusedWith(t, err, client.CodeIdempotencyMismatch, 422, "")
		tries := tap.sent()
		if len(tries) != 4 || tries[2].status != 422 || tries[3].status != 422 {
			t.Fatalf("attempts %+v: want 4, the last two refused once each", tries)
		}
	})

	t.Run("full: retried within the budget, then given up", func(t *testing.T) {
		if _, err := c.Route(ctx, "full", "f1"); err != nil {
			t.Fatal(err)
		}
		tap.sent()
		start := time.Now()
		_, err := r.client(tap, client.WithMaxAttempts(3)).Route(ctx, "full", "f2")
		took := time.Since(start)
		refusedWith(t, err, client.CodeNoPodAvailable, 503, "")
		if e, _ := errors.AsType[*client.Error](err); e.RetryAfter < time.Second {
			t.Fatalf("Retry-After %v, want at least 1s", e.RetryAfter)
		}
		oneKey(t, tap.sent(), 3, 503)
		if took < 2*time.Second {
			t.Fatalf("3 attempts in %v: the two waits were shorter than the Retry-After of 1s", took)
		}

		// A budget of 2s takes one wait of 1-1.25s, not a second one.
		start = time.Now()
		_, err = r.client(tap, client.WithRetryBudget(2*time.Second)).Route(ctx, "full", "f2")
		refusedWith(t, err, client.CodeNoPodAvailable, 503, "")
		oneKey(t, tap.sent(), 2, 503)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("took %v, past the budget", took)
		}
	})

	t.Run("full: a context shorter than the Retry-After returns at once", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Route(short, "full", "f2")
		refusedWith(t, err, client.CodeNoPodAvailable, 503, "")
		oneKey(t, tap.sent(), 1, 503)
		if took := time.Since(start); took > 800*time.Millisecond {
			t.Fatalf("took %v: it waited instead of giving up", took)
		}
	})

	t.Run("full: the retry after a slot freed binds, under the first key", func(t *testing.T) {
		other := r.client(&gwTap{})
		tap.after = func(n, status int) {
			if n == 1 && status == http.StatusServiceUnavailable {
				if ok, err := other.End(ctx, "full", "f1"); !ok || err != nil {
					t.Errorf("end f1: %v, %v", ok, err)
				}
			}
		}
		defer func() { tap.after = nil }()
		b, err := c.Route(ctx, "full", "f2")
		if err != nil || !b.New {
			t.Fatalf("%+v, %v", b, err)
		}
		tries := tap.sent()
		if len(tries) != 2 || tries[0].status != 503 || tries[1].status != 200 || tries[0].key == "" || tries[1].key != tries[0].key {
			t.Fatalf("attempts %+v: want a 503 and a 200 under one key", tries)
		}
	})

	t.Run("queue full", func(t *testing.T) {
		if _, err := c.Route(ctx, "queue", "q1"); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			_, err := r.client(&gwTap{}).Route(ctx, "queue", "q2")
			waited <- err
		}()
		await.True(t, 10*time.Second, "q2 waits in the queue", func() bool {
			var pool struct{ Waiters int }
			return r.gatewayGet("/v1/scopes/queue/pool", &pool) && pool.Waiters == 1
		})
		tap.sent()
		_, err := r.client(tap, client.WithMaxAttempts(2)).Route(ctx, "queue", "q3")
		refusedWith(t, err, client.CodeQueueFull, 503, "")
		oneKey(t, tap.sent(), 2, 503)
		if ok, err := c.End(ctx, "queue", "q1"); !ok || err != nil {
			t.Fatalf("end q1: %v, %v", ok, err)
		}
		if err := <-waited; err != nil {
			t.Fatalf("q2, woken when q1 ended: %v", err)
		}
		tap.sent()
	})

	t.Run("deploy failed", func(t *testing.T) {
		if err := fake.SetFaults(r.podDir, fake.Faults{CreateError: "image pull refused (injected)"}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := fake.SetFaults(r.podDir, fake.Faults{}); err != nil {
				t.Error(err)
			}
		}()
		_, err := c.Route(ctx, "deploys", "d1")
		refusedWith(t, err, client.CodeDeployFailed, 502, "injected")
		oneKey(t, tap.sent(), 1, 502)
	})

	t.Run("no answer: retried, then the transport error", func(t *testing.T) {
		closed, err := client.New("http://"+freeAddr(t), client.WithTransport(tap), client.WithMaxAttempts(3),
			client.WithBackoff(10*time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		_, err = closed.Acquire(ctx, "warm")
		if !errors.Is(err, syscall.ECONNREFUSED) || client.CodeOf(err) != "" {
			t.Fatalf("%v: want connection refused", err)
		}
		oneKey(t, tap.sent(), 3, 0)
	})

	t.Run("store unavailable: retried, then given up", func(t *testing.T) {
		r.redis.Kill()
		_, err := r.client(tap, client.WithMaxAttempts(2)).Route(ctx, "warm", "s9")
		refusedWith(t, err, client.CodeStoreUnavailable, 503, "")
		oneKey(t, tap.sent(), 2, 503)
	})
}

// gatewayGet reads path with the gateway token into out; false when it did not
// answer 200 JSON.
func (r *gwRig) gatewayGet(path string, out any) bool {
	st, raw := request(r.t, http.MethodGet, r.base+path, "Bearer "+gatewayToken, "")
	return st == http.StatusOK && json.Unmarshal(raw, out) == nil
}
