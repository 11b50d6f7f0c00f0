package demoagent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warmpool/warmpool/demoagent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// running is one Main call in the background.
type running struct {
	url  string
	stop context.CancelFunc
	done chan struct{}
	err  error // Main's result, set before done closes
}

// wait returns Main's result once it has returned.
func (r *running) wait() error {
	<-r.done
	return r.err
}

// mustStart runs Main with args and returns once it printed its listening line.
func mustStart(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	r := &running{stop: cancel, done: make(chan struct{})}
	go func() {
		r.err = demoagent.Main(ctx, args, pw, io.Discard)
		_ = pw.Close() // a PipeWriter's Close is always nil
		close(r.done)
	}()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no listening line: %v (Main: %v)", err, r.wait())
	}
	u, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "listening on ")
	if !ok || !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("stdout line = %q, want %q", line, "listening on http://127.0.0.1:PORT")
	}
	r.url = u
	// Main prints exactly one line: whatever else it writes is collected and checked.
	extra := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(br)
		extra <- b
	}()
	t.Cleanup(func() {
		cancel()
		_ = r.wait()
		if b := <-extra; len(b) > 0 {
			t.Errorf("unexpected extra stdout: %q", b)
		}
	})
	return r
}

// client returns an HTTP client whose connections are closed with the test, so goleak
// sees no idle-connection goroutines.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func getJSON(t *testing.T, c *http.Client, url string) (int, map[string]string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
	return resp.StatusCode, body
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	name string
	data map[string]any
}

func readEvent(t *testing.T, br *bufio.Reader) sseEvent {
	t.Helper()
	var ev sseEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.name != "" {
				return ev
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
		}
	}
}

func TestMainServesHealthAndSSE(t *testing.T) {
	r := mustStart(t, "--pod-name", "pod-a", "--heartbeat", "20ms", "--sse-path", "/events", "--health-path", "/hz")
	c := client(t)

	code, body := getJSON(t, c, r.url+"/hz")
	if code != http.StatusOK || body["status"] != "ok" || body["pod"] != "pod-a" {
		t.Fatalf("health = %d %v, want 200 ok pod-a", code, body)
	}
	resp, err := c.Get(r.url + "/health") // default path is replaced, not added
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /health = %d, want 404 when --health-path is /hz", resp.StatusCode)
	}

	resp, err = c.Get(r.url + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	if ev := readEvent(t, br); ev.name != "hello" || ev.data["pod"] != "pod-a" {
		t.Fatalf("first event = %+v, want hello naming pod-a", ev)
	}
	for i := 1; i <= 2; i++ {
		ev := readEvent(t, br)
		if ev.name != "heartbeat" || ev.data["pod"] != "pod-a" || ev.data["seq"] != float64(i) {
			t.Fatalf("event %d = %+v, want heartbeat seq %d", i, ev, i)
		}
	}

	// A graceful stop ends the open stream and Main returns nil.
	r.stop()
	if err := r.wait(); err != nil {
		t.Fatalf("Main after cancel = %v, want nil", err)
	}
	// The stream has ended: reading it to the end returns rather than blocks.
	_, _ = io.Copy(io.Discard, br)
}

func TestMainStartDelay(t *testing.T) {
	const delay = 300 * time.Millisecond
	begin := time.Now()
	r := mustStart(t, "--pod-name", "slow", "--start-delay", delay.String())
	c := client(t)

	for _, path := range []string{"/health", "/sse"} {
		resp, err := c.Get(r.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if time.Since(begin) >= delay {
			t.Skip("machine too slow to observe the start delay")
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("GET %s during start delay = %d (Retry-After %q), want 503 with Retry-After",
				path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// Await readiness by polling, bounded far above the delay.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := getJSON(t, c, r.url+"/health")
		if code == http.StatusOK {
			if body["pod"] != "slow" {
				t.Fatalf("health body %v", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d after 10s", code)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
	}
	if since := time.Since(begin); since < delay {
		t.Fatalf("ready after %v, before the %v start delay", since, delay)
	}
}

func TestMainDieAfter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := demoagent.Main(ctx, []string{"--pod-name", "p", "--die-after", "50ms"}, io.Discard, io.Discard)
	if !errors.Is(err, demoagent.ErrDied) {
		t.Fatalf("Main = %v, want ErrDied", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Main returned only when the test context expired")
	}
}

// WARMPOOL_DEMO_FAIL=start exits before listening (a crashing image); another value is
// refused rather than ignored.
func TestMainFailStart(t *testing.T) {
	for _, c := range []struct {
		value  string
		want   error
		stderr string
	}{
		{demoagent.FailStart, demoagent.ErrFailStart, "exiting at start"},
		{"later", nil, ""},
	} {
		t.Run(c.value, func(t *testing.T) {
			t.Setenv(demoagent.FailEnv, c.value)
			// An agent that listened instead returns when this ends, and fails the test.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out, errOut strings.Builder
			err := demoagent.Main(ctx, []string{"--pod-name", "p"}, &out, &errOut)
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Main = %v, want %v", err, c.want)
			}
			if err == nil || (c.want == nil && !strings.Contains(err.Error(), demoagent.FailEnv)) {
				t.Fatalf("Main = %v, want an error naming %s", err, demoagent.FailEnv)
			}
			if out.Len() != 0 {
				t.Fatalf("stdout = %q, want nothing: it must not listen", out.String())
			}
			if !strings.Contains(errOut.String(), c.stderr) {
				t.Fatalf("stderr = %q, want %q in it", errOut.String(), c.stderr)
			}
		})
	}
}

func TestMainPodNameFromEnv(t *testing.T) {
	t.Setenv(demoagent.PodNameEnv, "from-env")
	r := mustStart(t)
	if _, body := getJSON(t, client(t), r.url+"/health"); body["pod"] != "from-env" {
		t.Fatalf("pod = %q, want from-env", body["pod"])
	}
}

func TestMainBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--nope"},
		{"--sse-path", "sse"},
		{"--health-path", "/x", "--sse-path", "/x"},
		{"--heartbeat", "0s"},
		{"--listen", "127.0.0.1:bad"},
		{"extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out strings.Builder
			err := demoagent.Main(context.Background(), args, &out, io.Discard)
			if err == nil {
				t.Fatal("Main = nil, want an error")
			}
			if out.Len() != 0 {
				t.Fatalf("stdout = %q, want nothing", out.String())
			}
		})
	}
}

func TestAgentHandler(t *testing.T) {
	a := demoagent.New("h")
	a.Heartbeat = 10 * time.Millisecond
	srv := httptest.NewServer(a)
	defer srv.Close()
	c := client(t)

	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/health", http.StatusOK},
		{http.MethodHead, "/health", http.StatusOK},
		{http.MethodPost, "/health", http.StatusMethodNotAllowed},
		{http.MethodPost, "/sse", http.StatusMethodNotAllowed},
		{http.MethodGet, "/other", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}

	// A client that leaves ends its stream on the server side.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/sse", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	readEvent(t, br)
	readEvent(t, br)
	if n := a.Streams(); n != 1 {
		t.Fatalf("Streams = %d while reading, want 1", n)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for a.Streams() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("stream still open 10s after the client left")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}
