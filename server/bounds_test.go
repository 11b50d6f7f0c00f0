package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/server"
)

// stallHook holds every Redis command of the replica while it is set: for a fixed
// time (> 0), or until the command's context ends (< 0).
type stallHook struct{ d atomic.Int64 }

func (h *stallHook) wait(ctx context.Context) error {
	d := time.Duration(h.d.Load())
	switch {
	case d == 0:
		return nil
	case d < 0:
		<-ctx.Done()
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (h *stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// withCallTimeout sets the bound of the calls that do not wait.
func withCallTimeout(d time.Duration) envOption {
	return func(c *server.Config) { c.HTTP.Call = d }
}

// A call that does not wait is cut at the call bound and answers 503, while a route
// and an acquire, which may wait, run past both the call bound and the write deadline of the calls
// that do not wait. Red with the call bound taken out of httpx.Adapter (the pool read
// hangs), and with Waits not lifting the write deadline (the answer is cut).
func TestCallBounds(t *testing.T) {
	t.Parallel()
	const call = 100 * time.Millisecond
	stall := &stallHook{}
	e := mustEnv(t, withCallTimeout(call), func(c *server.Config) { c.Redis.AddHook(stall) })
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	r := e.run(t)

	stall.d.Store(-1)
	start := time.Now()
	res, body, err := send(http.MethodGet, r.base+"/v1/scopes/ok/pool", "")
	took := time.Since(start)
	stall.d.Store(0)
	if err != nil || res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "STORE_UNAVAILABLE") {
		t.Fatalf("pool read with Redis stalled: %v %s %v, want 503 STORE_UNAVAILABLE", res, body, err)
	}
	if took > call+2*time.Second {
		t.Fatalf("pool read answered after %v, call bound %v", took, call)
	}

	// A cold route and a cold acquire wait for deploys that take longer than the call
	// bound and its write margin: only their own bounds apply.
	e.fake.SetDeployDelay(call + httpx.WriteMargin + 500*time.Millisecond)
	waits := []struct{ path, body string }{{"/v1/scopes/ok/sessions", `{"session_id":"s1"}`}, {"/v1/scopes/ok/pods/acquire", `{}`}}
	errs := make(chan error, len(waits))
	for _, c := range waits {
		go func() {
			res, body, err := send(http.MethodPost, r.base+c.path, c.body)
			if err == nil && res.StatusCode != http.StatusOK {
				err = fmt.Errorf("%d %s", res.StatusCode, body)
			}
			if err != nil {
				err = fmt.Errorf("POST %s waiting %v for its deploy: %w, want 200", c.path, call+httpx.WriteMargin, err)
			}
			errs <- err
		}()
	}
	for range waits {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("pool read cut after %v; route and acquire answered after their deploys", took.Round(time.Millisecond))
}

// A declared Content-Length over the limit is answered 413 from the header, without
// waiting for the body, and the connection is closed, on every route (the open ones
// of SPEC §10 too, as openapi.yaml says). Red without httpx.LimitBody: the server
// waits for the body until its read timeout.
func TestContentLengthOverLimit(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	r := e.run(t)
	for _, call := range []struct{ method, path string }{
		{http.MethodPost, "/v1/scopes/ok/sessions"}, {http.MethodPut, "/v1/scopes/ok/config"},
		{http.MethodGet, "/healthz"}, {http.MethodGet, "/readyz"}, {http.MethodGet, "/openapi.yaml"}, {http.MethodGet, "/ui"},
	} {
		method, path := call.method, call.path
		conn, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", method, path, httpx.MaxBody+1); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			conn.Close()
			t.Fatalf("%s %s with Content-Length over the limit and no body: no answer within 2s: %v", method, path, err)
		}
		raw, _ := io.ReadAll(res.Body)
		conn.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(raw), `"PAYLOAD_TOO_LARGE"`) || !res.Close {
			t.Fatalf("%s %s: %d close=%v %s, want 413 PAYLOAD_TOO_LARGE and the connection closed", method, path, res.StatusCode, res.Close, raw)
		}
		req, err := http.NewRequest(method, "http://"+r.addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, req, res.StatusCode, res.Header, raw)
	}
}
