// Package demoagent is the stand-in agent behind `warmpool demo-agent` (SPEC §9): a tiny
// HTTP server with a health endpoint and an SSE endpoint that names its pod. The local
// pod driver runs it as each pod's process, so a newcomer gets real SSE pods without a
// cluster; flags make it slow to start or crash on purpose for fault tests.
package demoagent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpool/warmpool/agent"
)

// Defaults of the command-line flags.
const (
	DefaultListen     = "127.0.0.1:0"
	DefaultSSEPath    = "/sse"
	DefaultHealthPath = "/health"
	DefaultHeartbeat  = time.Second
	// PodNameEnv names the pod when --pod-name is not given.
	PodNameEnv = "WARMPOOL_POD_NAME"
	// FailEnv makes the agent fail on purpose (SPEC §11.3): FailStart exits at start, as
	// an image that crashes does, so a failing scope can be tried with the local driver.
	FailEnv = "WARMPOOL_DEMO_FAIL"
	// FailStart is the value of FailEnv that exits before listening.
	FailStart = "start"
	// shutdownGrace bounds a graceful stop; SSE streams end at once when it starts, so
	// only ordinary requests can still be in flight.
	shutdownGrace = 5 * time.Second
)

// ErrDied is returned by Main when --die-after has passed: the agent crashes on purpose
// and the caller exits non-zero.
var ErrDied = errors.New("demo-agent: died as asked by --die-after")

// ErrFailStart is returned by Main, before it listens, when the environment has
// WARMPOOL_DEMO_FAIL=start: the caller exits with status 1, a crashing image.
var ErrFailStart = errors.New("demo-agent: failed at start as asked by " + FailEnv + "=" + FailStart)

// Agent serves the demo endpoints of one pod. The zero value is not usable: PodName,
// SSEPath and HealthPath must be set; New fills the defaults.
type Agent struct {
	// PodName is reported by both endpoints so a client can tell which pod it reached.
	PodName string
	// SSEPath and HealthPath are the exact paths of the two endpoints.
	SSEPath    string
	HealthPath string
	// Heartbeat is the interval between heartbeat events on an SSE stream.
	Heartbeat time.Duration
	// ReadyAt is when the agent stops answering 503 (the end of --start-delay); the zero
	// time means ready from the start.
	ReadyAt time.Time
	// StartedAt is reported in the hello event.
	StartedAt time.Time

	// SessionConfig fetches a session's config (agent.Reporter.SessionConfig); nil
	// with reports off. A stream that names its session gets a config event after
	// hello with the names of its env (never the values).
	SessionConfig func(ctx context.Context, session string) (map[string]string, error)

	streams atomic.Int64
	// open counts the open streams of each named session (GET <sse_path>?session_id=S):
	// the sessions the agent reports; tickets holds the session_ticket a stream of the
	// session brought (&session_ticket=T), the last one given, which the reports send.
	mu      sync.Mutex
	open    map[string]int
	tickets map[string]string
}

// New returns an agent for podName with the default paths and heartbeat, ready at once.
func New(podName string) *Agent {
	return &Agent{
		PodName:    podName,
		SSEPath:    DefaultSSEPath,
		HealthPath: DefaultHealthPath,
		Heartbeat:  DefaultHeartbeat,
		StartedAt:  time.Now(),
	}
}

// Streams is the number of SSE streams open right now; tests await it.
func (a *Agent) Streams() int64 { return a.streams.Load() }

// ServeHTTP routes by exact path: the paths come from the scope config and may contain
// characters that http.ServeMux patterns give a meaning to.
func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case a.HealthPath:
		a.health(w, r)
	case a.SSEPath:
		a.sse(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (a *Agent) starting() bool {
	return !a.ReadyAt.IsZero() && time.Now().Before(a.ReadyAt)
}

// unavailable answers 503 while the agent is still "starting", with a Retry-After that
// rounds the remaining delay up to whole seconds.
func (a *Agent) unavailable(w http.ResponseWriter) bool {
	if !a.starting() {
		return false
	}
	left := time.Until(a.ReadyAt)
	w.Header().Set("Retry-After", strconv.Itoa(int((left+time.Second-1)/time.Second)))
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting", "pod": a.PodName})
	return true
}

func (a *Agent) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if a.unavailable(w) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "pod": a.PodName})
}

func (a *Agent) sse(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if a.unavailable(w) {
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	// Proxies such as nginx buffer responses unless told not to; an SSE stream must not be.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	a.streams.Add(1)
	defer a.streams.Add(-1)
	if q := r.URL.Query(); q.Get(agent.SessionParam) != "" {
		sid := q.Get(agent.SessionParam)
		a.opened(sid, q.Get(agent.TicketParam), 1)
		defer a.opened(sid, "", -1)
	}

	send := func(event string, data any) bool {
		b, err := json.Marshal(data)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		// Without a flush the event sits in the server's buffer and the client sees nothing.
		return rc.Flush() == nil
	}
	if !send("hello", map[string]any{
		"pod":        a.PodName,
		"started_at": a.StartedAt.UTC().Format(time.RFC3339Nano),
		"time":       time.Now().UTC().Format(time.RFC3339Nano),
	}) {
		return
	}
	if sid := r.URL.Query().Get(agent.SessionParam); sid != "" && a.SessionConfig != nil && !a.sendConfig(r.Context(), sid, send) {
		return
	}
	interval := a.Heartbeat
	if interval <= 0 {
		interval = DefaultHeartbeat
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		select {
		case <-r.Context().Done(): // the client left, or the server is stopping
			return
		case now := <-tick.C:
			if !send("heartbeat", map[string]any{
				"pod":  a.PodName,
				"seq":  seq,
				"time": now.UTC().Format(time.RFC3339Nano),
			}) {
				return
			}
		}
	}
}

// sendConfig sends the config event of session sid: the names of its env, or the
// error of its fetch (a session not bound to this pod: SESSION_NOT_FOUND).
func (a *Agent) sendConfig(ctx context.Context, sid string, send func(string, any) bool) bool {
	env, err := a.SessionConfig(ctx, sid)
	if err != nil {
		return send("config", map[string]any{"session_id": sid, "error": err.Error()})
	}
	names := slices.Sorted(maps.Keys(env))
	return send("config", map[string]any{"session_id": sid, "env": names})
}

// opened counts a stream of session sid opening (+1, with the ticket it brought, if
// any) or closing (-1); the ticket goes with the session's last stream.
func (a *Agent) opened(sid, ticket string, d int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open == nil {
		a.open, a.tickets = map[string]int{}, map[string]string{}
	}
	if ticket != "" {
		a.tickets[sid] = ticket
	}
	if a.open[sid] += d; a.open[sid] <= 0 {
		delete(a.open, sid)
		delete(a.tickets, sid)
	}
}

// Tickets are the session_tickets of the sessions with an open stream that brought
// one: what the reports send with the sessions.
func (a *Agent) Tickets() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.tickets)
}

// Sessions are the sessions with an open stream, sorted: what the agent reports.
func (a *Agent) Sessions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.open))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do about it
}

// Main runs `warmpool demo-agent` with args (without the sub-command word) until ctx
// ends (nil) or --die-after passes (ErrDied); with WARMPOOL_DEMO_FAIL=start it returns
// ErrFailStart at once. Once listening it prints exactly one line,
// "listening on http://HOST:PORT", to stdout; diagnostics go to stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", DefaultListen, "address to listen on (host:port; port 0 picks a free one)")
	startDelay := fs.Duration("start-delay", 0, "answer 503 on both endpoints until this much time has passed")
	dieAfter := fs.Duration("die-after", 0, "exit with an error after this much time (0 = never)")
	podName := fs.String("pod-name", "", "pod name to report (default: $"+PodNameEnv+", else the hostname)")
	ssePath := fs.String("sse-path", DefaultSSEPath, "path of the SSE endpoint")
	healthPath := fs.String("health-path", DefaultHealthPath, "path of the health endpoint")
	heartbeat := fs.Duration("heartbeat", DefaultHeartbeat, "interval between SSE heartbeat events")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo-agent: unexpected arguments %q", fs.Args())
	}
	for name, p := range map[string]string{"--sse-path": *ssePath, "--health-path": *healthPath} {
		if len(p) == 0 || p[0] != '/' {
			return fmt.Errorf("demo-agent: %s must start with '/', got %q", name, p)
		}
	}
	if *ssePath == *healthPath {
		return fmt.Errorf("demo-agent: --sse-path and --health-path must differ")
	}
	if *startDelay < 0 || *dieAfter < 0 || *heartbeat <= 0 {
		return fmt.Errorf("demo-agent: --start-delay and --die-after must not be negative, --heartbeat must be positive")
	}
	switch fail := os.Getenv(FailEnv); fail {
	case "":
	case FailStart:
		_, _ = fmt.Fprintf(stderr, "demo-agent: %s=%s: exiting at start\n", FailEnv, FailStart) // stderr: nothing to do if it fails
		return ErrFailStart
	default:
		return fmt.Errorf("demo-agent: %s=%q: the only value is %q", FailEnv, fail, FailStart)
	}
	name := *podName
	if name == "" {
		name = os.Getenv(PodNameEnv)
	}
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("demo-agent: no --pod-name and no hostname: %w", err)
		}
		name = h
	}

	start := time.Now()
	ag := New(name)
	ag.SSEPath, ag.HealthPath, ag.Heartbeat = *ssePath, *healthPath, *heartbeat
	ag.StartedAt = start
	if *startDelay > 0 {
		ag.ReadyAt = start.Add(*startDelay)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("demo-agent: %w", err)
	}
	// Cancelling baseCtx ends every SSE stream, which Shutdown would otherwise wait for.
	baseCtx, stopStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStreams()
	srv := &http.Server{
		Handler:           ag,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	// The reporter outlives ctx (SIGTERM), to report the drain, until Main returns; it is
	// made before the agent serves, which fetches session configs through it.
	reportCtx, stopReports := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReports()
	reports := startReports(reportCtx, os.Getenv, ag)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if _, err := fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr()); err != nil {
		_ = srv.Close() // whoever started the agent cannot learn its address
		return fmt.Errorf("demo-agent: %w", err)
	}

	var die <-chan time.Time
	if *dieAfter > 0 {
		t := time.NewTimer(*dieAfter)
		defer t.Stop()
		die = t.C
	}
	select {
	case err := <-serveErr:
		return fmt.Errorf("demo-agent: serve: %w", err)
	case <-die:
		// A crash, not a stop: drop connections at once.
		stopStreams()
		_ = srv.Close()
		if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("demo-agent: serve: %w", err)
		}
		_, _ = fmt.Fprintf(stderr, "demo-agent %s: dying after %s as asked\n", name, *dieAfter) // the exit says it too
		return ErrDied
	case err := <-reports.gone:
		stopStreams()
		_ = srv.Close()
		if serr := <-serveErr; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return fmt.Errorf("demo-agent %s: %w", name, err)
	case <-ctx.Done():
		reports.drain(ag, shutdownGrace)
		stopStreams()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		err := srv.Shutdown(sctx)
		if err != nil {
			_ = srv.Close() // the grace ran out: drop what is left
		}
		if serr := <-serveErr; !errors.Is(serr, http.ErrServerClosed) {
			return fmt.Errorf("demo-agent: serve: %w", serr)
		}
		if err != nil {
			return fmt.Errorf("demo-agent: shutdown: %w", err)
		}
		return nil
	}
}
