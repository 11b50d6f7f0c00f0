package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/syncbuf"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/server"
)

// logBuffer collects a replica's JSON log lines.
type logBuffer struct{ syncbuf.Buffer }

// lines decodes every line logged so far.
func (b *logBuffer) lines(tb testing.TB) []map[string]any {
	tb.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			tb.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// find returns the lines whose fields have the given values.
func (b *logBuffer) find(tb testing.TB, fields map[string]any) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for _, l := range b.lines(tb) {
		match := true
		for k, v := range fields {
			if l[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, l)
		}
	}
	return out
}

func withLogs(b *logBuffer) envOption {
	return func(c *server.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

var newID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestRequestIDs: every answer carries X-Request-Id, the caller's when it is valid,
// else a new one; the id is on the access line and on the deploy's line, with the
// deploy's phases.
func TestRequestIDs(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	e := mustEnv(t, withLogs(logs))
	e.putScope("ids", scopeCfg(2, 1, 0, 1))

	r := e.do(http.MethodPost, "/v1/scopes/ids/sessions", `{"session_id":"s1"}`, header{"X-Request-Id", "gw-trace:42"})
	if r.status != http.StatusOK || r.header.Get("X-Request-Id") != "gw-trace:42" {
		t.Fatalf("route with the caller's id: %v, X-Request-Id %q", r, r.header.Get("X-Request-Id"))
	}
	deploy := logs.find(t, map[string]any{"msg": "deploy", "request_id": "gw-trace:42"})
	if len(deploy) != 1 {
		t.Fatalf("%d deploy lines with the request id, want 1:\n%v", len(deploy), logs.lines(t))
	}
	d := deploy[0]
	phases, _ := d["phases"].(map[string]any)
	if d["result"] != "ok" || d["scope"] != "ids" || d["level"] != "INFO" || phases["lease_wait"] == nil || phases["create"] == nil || phases["ready"] == nil {
		t.Fatalf("deploy line %v: want result ok, scope ids, INFO and the phases lease_wait, create and ready", d)
	}
	if n := len(logs.find(t, map[string]any{"msg": "http", "request_id": "gw-trace:42", "status": 200.0, "level": "DEBUG"})); n != 1 {
		t.Fatalf("%d access lines for the route, want 1 at DEBUG", n)
	}

	for _, bad := range []string{"", "has space", strings.Repeat("x", 129)} {
		r := e.do(http.MethodGet, "/healthz", nil, header{"X-Request-Id", bad})
		if id := r.header.Get("X-Request-Id"); !newID.MatchString(id) {
			t.Errorf("X-Request-Id %q sent: answered %q, want a new id", bad, id)
		}
	}

	// 4xx answers are logged at INFO, 5xx at ERROR.
	e.do(http.MethodGet, "/v1/scopes/nosuch/pool", nil, header{"X-Request-Id", "r-404"})
	e.route("ids", "s2")
	e.do(http.MethodPost, "/v1/scopes/ids/sessions", `{"session_id":"s3"}`, header{"X-Request-Id", "r-503"}) // max_pods reached
	for id, level := range map[string]string{"r-404": "INFO", "r-503": "ERROR"} {
		if n := len(logs.find(t, map[string]any{"msg": "http", "request_id": id, "level": level})); n != 1 {
			t.Errorf("%d access lines of %s at %s, want 1:\n%v", n, id, level, logs.find(t, map[string]any{"request_id": id}))
		}
	}
}

// TestSessionLogsCarryRequestID: a line the session manager logs during a call carries
// the call's request id: here the warning of a route whose wait timed out and whose
// leave of the queue Redis then refused (the waiter_leave script answers an error).
func TestSessionLogsCarryRequestID(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	leave := redisstore.Scripts["waiter_leave.lua"].Hash()
	refuse := func(c *server.Config) {
		c.Clock = warmpool.SystemClock{}
		c.Redis.AddHook(testredis.EachCommand(func(cmd redis.Cmder) {
			if args := cmd.Args(); len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && args[1] == leave {
				args[0], args[1] = "eval", "return redis.error_reply('injected: waiter_leave refused')"
			}
		}))
	}
	e := mustEnv(t, withLogs(logs), refuse)
	e.putScope("sm-ids", scopeCfg(1, 1, 1, 1))
	e.route("sm-ids", "s1")
	r := e.do(http.MethodPost, "/v1/scopes/sm-ids/sessions", `{"session_id":"s2"}`, header{"X-Request-Id", "r-wait"})
	e.wantErr(r, http.StatusGatewayTimeout, warmpool.CodeWaitTimeout)
	lines := logs.find(t, map[string]any{"msg": "waiter not removed; it expires by its deadline", "component": "sm"})
	if len(lines) != 1 || lines[0]["request_id"] != "r-wait" || lines[0]["scope"] != "sm-ids" {
		t.Fatalf("the session manager's lines of the failed leave: %v, want one with request_id r-wait", lines)
	}
}
