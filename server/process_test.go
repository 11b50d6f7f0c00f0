package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/server"
)

// withShutdown sets the drain delay and the shutdown grace of Run.
func withShutdown(drain, grace time.Duration) envOption {
	return func(c *server.Config) { c.DrainDelay, c.ShutdownGrace = drain, grace }
}

// withReadTimeout bounds how long a request's headers and body may take to arrive.
func withReadTimeout(d time.Duration) envOption {
	return func(c *server.Config) { c.HTTP.Read = d }
}

// running is the env's server run by Run on a loopback listener, as `warmpool serve`
// runs it.
type running struct {
	base string
	addr string
	stop context.CancelFunc // SIGTERM
	done chan error         // Run's result
}

// stopped stops the replica (as SIGTERM does) and fails the test unless Run returns
// nil within 10 s with every listener of addrs closed.
func (r *running) stopped(t *testing.T, addrs ...string) {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		r.done <- err
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	for _, addr := range addrs {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("the listener %s is still open after Run returned", addr)
		}
	}
}

func (e *env) run(t *testing.T) *running {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &running{base: "http://" + ln.Addr().String(), addr: ln.Addr().String(), stop: stop, done: make(chan error, 1)}
	go func() { r.done <- e.srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-r.done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// send makes one call on a fresh connection; err is a transport error. The request
// does not ask to close the connection, so res.Close tells whether the server did.
func send(method, url, body string) (*http.Response, string, error) {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res, string(raw), err
}

// On shutdown /readyz answers 503 at once while calls are still served (and told to
// close their connection) for the drain delay; then the listener closes and Run
// returns nil.
func TestDrain(t *testing.T) {
	t.Parallel()
	const drain = 800 * time.Millisecond
	e := mustEnv(t, withShutdown(drain, 5*time.Second))
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	r := e.run(t)
	if res, body, err := send(http.MethodGet, r.base+"/readyz", ""); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("readyz before the shutdown: %v %s %v", res, body, err)
	}
	if res, body, err := send(http.MethodPost, r.base+"/v1/scopes/ok/sessions", `{"session_id":"s1"}`); err != nil || res.StatusCode != http.StatusOK || res.Close {
		t.Fatalf("route before the shutdown: %v %s %v", res, body, err)
	}

	start := time.Now()
	r.stop()
	await.True(t, 200*time.Millisecond, "readyz answers 503", func() bool {
		res, body, err := send(http.MethodGet, r.base+"/readyz", "")
		return err == nil && res.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, `"draining"`)
	})
	for i := 0; time.Since(start) < drain/2; i++ {
		res, body, err := send(http.MethodPost, r.base+"/v1/scopes/ok/sessions", fmt.Sprintf(`{"session_id":"d%d"}`, i%3))
		if err != nil || res.StatusCode != http.StatusOK || !res.Close {
			t.Fatalf("route %d while draining: %v %s %v (want 200 with Connection: close)", i, res, body, err)
		}
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		r.done <- nil
	case <-time.After(drain + 5*time.Second):
		t.Fatal("Run did not return after the drain")
	}
	if took := time.Since(start); took < drain {
		t.Fatalf("Run returned %v after the shutdown began, before the drain delay %v", took, drain)
	}
	if _, err := net.DialTimeout("tcp", r.addr, time.Second); err == nil {
		t.Fatal("the listener is still open after Run returned")
	}
}

// After the drain, calls in flight finish within the shutdown grace; those still
// running when it is over are cut, and Run returns right then.
func TestShutdownGrace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		grace    time.Duration
		finishes bool
	}{
		{"finishes within the grace", 10 * time.Second, true},
		{"cut when the grace is over", 300 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := mustEnv(t, withShutdown(0, c.grace))
			e.putScope("ok", scopeCfg(4, 2, 0, 1))
			release := e.fake.Hold()
			defer release()
			r := e.run(t)
			type answer struct {
				res *http.Response
				err error
			}
			routed := make(chan answer, 1)
			go func() {
				res, _, err := send(http.MethodPost, r.base+"/v1/scopes/ok/sessions", `{"session_id":"slow"}`)
				routed <- answer{res, err}
			}()
			await.True(t, 5*time.Second, "the deploy is in flight", func() bool { return num(t, e.pool("ok"), "placeholders") == 1 })
			start := time.Now()
			r.stop()
			if c.finishes {
				await.True(t, 5*time.Second, "the listener is closed", func() bool {
					conn, err := net.Dial("tcp", r.addr)
					if err == nil {
						conn.Close()
					}
					return err != nil
				})
				release()
			}
			var err error
			select {
			case err = <-r.done:
				r.done <- err
			case <-time.After(c.grace + 5*time.Second):
				t.Fatal("Run did not return")
			}
			a := <-routed
			if c.finishes {
				if err != nil || a.err != nil || a.res.StatusCode != http.StatusOK {
					t.Fatalf("Run %v; the call in flight: %v %v, want 200", err, a.res, a.err)
				}
				return
			}
			if took := time.Since(start); took > c.grace+2*time.Second {
				t.Fatalf("Run returned %v after the shutdown began, grace %v", took, c.grace)
			}
			if err != nil || a.err == nil {
				t.Fatalf("Run %v; the call past the grace: %v %v, want it cut", err, a.res, a.err)
			}
		})
	}
}

// Clients that trickle their body are cut by the read timeout with 400, and do not
// hold the server meanwhile.
func TestSlowBodiesAreCut(t *testing.T) {
	t.Parallel()
	const readTimeout = 500 * time.Millisecond
	_, r := runWithReadTimeout(t, readTimeout)
	const n = 50
	var wg sync.WaitGroup
	results := make(chan string, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- trickle(r.addr, fmt.Sprintf(`{"session_id":"trickle-%03d"}`, i))
		}()
	}
	// The server answers others meanwhile.
	time.Sleep(100 * time.Millisecond)
	if res, body, err := send(http.MethodPost, r.base+"/v1/scopes/ok/sessions", `{"session_id":"prompt"}`); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("route while %d clients trickle: %v %s %v", n, res, body, err)
	}
	wg.Wait()
	close(results)
	took := time.Since(start)
	for status := range results {
		if !strings.HasPrefix(status, "HTTP/1.1 400") {
			t.Fatalf("a trickling client got %q, want a 400", status)
		}
	}
	if took > readTimeout+3*time.Second {
		t.Fatalf("%d trickling clients held the server %v (read timeout %v)", n, took, readTimeout)
	}
	t.Logf("%d trickling clients cut within %v (read timeout %v)", n, took.Round(time.Millisecond), readTimeout)
}

// runWithReadTimeout runs a replica whose read timeout is d, with a scope "ok".
func runWithReadTimeout(t *testing.T, d time.Duration) (*env, *running) {
	t.Helper()
	e := mustEnv(t, withReadTimeout(d))
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	return e, e.run(t)
}

// trickle sends a route call whose body comes one byte every 100ms and returns the
// status line the server answered with.
func trickle(addr, body string) string {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "POST /v1/scopes/ok/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body)); err != nil {
		return err.Error()
	}
	answered := make(chan string, 1)
	go func() {
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			line = err.Error()
		}
		answered <- strings.TrimSpace(line)
	}()
	for i := 0; i < len(body); i++ {
		select {
		case line := <-answered:
			return line
		case <-time.After(100 * time.Millisecond):
		}
		if _, err := conn.Write([]byte{body[i]}); err != nil {
			break
		}
	}
	return <-answered
}

// A chunked Transfer-Encoding header with a plain body is answered with 400, whether
// or not the body holds a line break the chunk reader could stop at.
func TestChunkedHeaderPlainBody(t *testing.T) {
	t.Parallel()
	const readTimeout = 500 * time.Millisecond
	e, r := runWithReadTimeout(t, readTimeout)
	for _, body := range []string{`{"session_id":"c1"}`, "{\"session_id\":\"c2\"}\r\n"} {
		conn, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(readTimeout + 5*time.Second))
		start := time.Now()
		if _, err := fmt.Fprintf(conn, "POST /v1/scopes/ok/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n%s", body); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("body %q: no answer: %v", body, err)
		}
		raw, _ := io.ReadAll(res.Body)
		conn.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "VALIDATION") {
			t.Fatalf("body %q: %d %s, want 400 VALIDATION", body, res.StatusCode, raw)
		}
		t.Logf("body %q: 400 after %v: %s", body, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(raw)))
	}
	if e.do(http.MethodGet, "/v1/scopes/ok/sessions/c1", nil).status != http.StatusNotFound {
		t.Fatal("a session was bound from a malformed body")
	}
}
