package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/server"
)

// testInstance is the instance id every test server is given.
const testInstance = "test-replica-1"

// env is one complete replica served by httptest: its own key prefix on the test Redis,
// a fake pod driver, an in-memory SQLite config store and a stopped clock.
type env struct {
	t      testing.TB
	srv    *server.Server
	ts     *httptest.Server
	r      *testredis.Redis
	fake   *fake.Driver
	clock  *testredis.Clock
	token  string
	client *http.Client
}

type envOption func(*server.Config)

func withToken(token string) envOption {
	return func(c *server.Config) { c.AuthToken = token }
}

// withRedisURL makes the server build its own Redis client from a URL (the production
// path, with its short timeouts) instead of using the test Redis.
func withRedisURL(url, prefix string) envOption {
	return func(c *server.Config) { c.Redis, c.RedisURL, c.Prefix = nil, url, prefix }
}

// mustEnv builds and serves a replica; everything is closed with the test.
func mustEnv(tb testing.TB, opts ...envOption) *env {
	tb.Helper()
	b := testserver.NewBacking(tb)
	clock := testredis.NewClock()
	cfg := b.Config(testInstance)
	cfg.Clock = clock
	for _, o := range opts {
		o(&cfg)
	}
	srv, ts := testserver.Serve(tb, cfg)
	return &env{t: tb, srv: srv, ts: ts, r: b.Redis, fake: b.Fake, clock: clock, token: cfg.AuthToken,
		client: &http.Client{Timeout: 30 * time.Second}}
}

// resp is one HTTP answer.
type resp struct {
	method, path string
	status       int
	header       http.Header
	raw          []byte
	took         time.Duration
}

func (r resp) String() string {
	return fmt.Sprintf("%s %s -> %d %s", r.method, r.path, r.status, bytes.TrimSpace(r.raw))
}

// obj decodes the body as a JSON object.
func (r resp) obj(tb testing.TB) map[string]any {
	tb.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		tb.Fatalf("%v: body is not a JSON object: %v", r, err)
	}
	return m
}

// header is one extra request header.
type header struct{ k, v string }

// do sends one request; body is sent as is (nil: no body). path may hold escapes.
func (e *env) do(method, path string, body any, hdrs ...header) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for _, h := range hdrs {
		if h.v == "" {
			req.Header.Del(h.k)
		} else {
			req.Header.Set(h.k, h.v)
		}
	}
	start := time.Now()
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	checkResponse(e.t, req, res.StatusCode, res.Header, raw)
	return resp{method: method, path: path, status: res.StatusCode, header: res.Header, raw: raw, took: time.Since(start)}
}

// ok requires a 200 with a JSON object and returns it.
func (e *env) ok(method, path string, body any, hdrs ...header) map[string]any {
	e.t.Helper()
	r := e.do(method, path, body, hdrs...)
	if r.status != http.StatusOK {
		e.t.Fatalf("want 200: %v", r)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		e.t.Fatalf("%v: Content-Type %q", r, ct)
	}
	return r.obj(e.t)
}

// wantErr requires the error envelope with status and code, a message containing each
// of msgParts, and returns the error object.
func (e *env) wantErr(r resp, status int, code warmpool.Code, msgParts ...string) map[string]any {
	e.t.Helper()
	if r.status != status {
		e.t.Fatalf("want %d %s: %v", status, code, r)
	}
	eo := checkEnvelope(e.t, r)
	if eo["code"] != string(code) {
		e.t.Fatalf("want code %s: %v", code, r)
	}
	for _, p := range msgParts {
		if !strings.Contains(eo["message"].(string), p) {
			e.t.Fatalf("message should mention %q: %v", p, r)
		}
	}
	return eo
}

// retryCodes are the codes whose answers must tell the caller when to retry.
var retryCodes = map[string]bool{
	string(warmpool.CodeNoPodAvailable): true,
	string(warmpool.CodeQueueFull):      true,
	string(warmpool.CodeWaitTimeout):    true,
	string(warmpool.CodeQuotaExceeded):  true,
}

// specStatus is SPEC §3's status of each error code.
var specStatus = map[string]int{
	"VALIDATION": 400, "UNAUTHORIZED": 401, "FORBIDDEN": 403, "SCOPE_NOT_FOUND": 404, "SESSION_NOT_FOUND": 404, "HOLD_NOT_FOUND": 404,
	"CONFIG_SYNC_BUSY": 409, "PAYLOAD_TOO_LARGE": 413, "NO_POD_AVAILABLE": 503, "QUEUE_FULL": 503,
	"WAIT_TIMEOUT": 504, "DEPLOY_FAILED": 502, "STORE_UNAVAILABLE": 503, "INTERNAL": 500, "IDEMPOTENCY_MISMATCH": 422, "POD_NOT_FOUND": 404,
	"TENANT_NOT_FOUND": 404, "QUOTA_EXCEEDED": 429,
	// Not in SPEC's table: unknown paths and methods (chi's NotFound / MethodNotAllowed).
	"NOT_FOUND": 404, "METHOD_NOT_ALLOWED": 405,
}

// checkEnvelope checks that an error answer is exactly
// {"error":{"code","message"[,"retry_after"][,"details"]}} (details only with
// QUOTA_EXCEEDED, and always with it) with a status that fits the code and a
// Retry-After header whenever retry_after is set. It returns the inner object.
func checkEnvelope(tb testing.TB, r resp) map[string]any {
	tb.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		tb.Fatalf("%v: error answer with Content-Type %q", r, ct)
	}
	top := r.obj(tb)
	if len(top) != 1 {
		tb.Fatalf("%v: envelope must have exactly one key, \"error\"", r)
	}
	eo, ok := top["error"].(map[string]any)
	if !ok {
		tb.Fatalf("%v: no error object", r)
	}
	code, _ := eo["code"].(string)
	msg, _ := eo["message"].(string)
	if code == "" || msg == "" {
		tb.Fatalf("%v: error needs a code and a message", r)
	}
	for k := range eo {
		if k != "code" && k != "message" && k != "retry_after" && (k != "details" || code != string(warmpool.CodeQuotaExceeded)) {
			tb.Fatalf("%v: unexpected key %q in the error object", r, k)
		}
	}
	if _, ok := eo["details"].(map[string]any); code == string(warmpool.CodeQuotaExceeded) && !ok {
		tb.Fatalf("%v: QUOTA_EXCEEDED without its details", r)
	}
	want, known := specStatus[code]
	if !known {
		tb.Fatalf("%v: unknown error code %q", r, code)
	}
	if r.status != want {
		tb.Fatalf("%v: code %s must come with status %d", r, code, want)
	}
	ra, hasRA := eo["retry_after"]
	hdr := r.header.Get("Retry-After")
	switch {
	case hasRA:
		n, err := ra.(json.Number).Int64()
		if err != nil || n <= 0 {
			tb.Fatalf("%v: retry_after must be a positive integer", r)
		}
		if hdr != strconv.FormatInt(n, 10) {
			tb.Fatalf("%v: Retry-After header %q, want %d", r, hdr, n)
		}
	case hdr != "":
		tb.Fatalf("%v: Retry-After header without retry_after", r)
	case retryCodes[code]:
		tb.Fatalf("%v: %s must set retry_after", r, code)
	}
	return eo
}

// putScope stores a scope config (JSON) and returns the answer.
func (e *env) putScope(scope, cfg string) map[string]any {
	e.t.Helper()
	return e.ok(http.MethodPut, "/v1/scopes/"+scope+"/config", cfg)
}

// route routes a session and requires a 200.
func (e *env) route(scope, session string) map[string]any {
	e.t.Helper()
	return e.ok(http.MethodPost, "/v1/scopes/"+scope+"/sessions", map[string]string{"session_id": session})
}

// pool returns the scope's pool status.
func (e *env) pool(scope string) map[string]any {
	e.t.Helper()
	return e.ok(http.MethodGet, "/v1/scopes/"+scope+"/pool", nil)
}

// num reads a JSON number field as an int.
func num(tb testing.TB, m map[string]any, key string) int {
	tb.Helper()
	n, ok := m[key].(json.Number)
	if !ok {
		tb.Fatalf("%q is not a number in %v", key, m)
	}
	i, err := n.Int64()
	if err != nil {
		tb.Fatalf("%q: %v", key, err)
	}
	return int(i)
}

// keys requires m to have exactly the given keys.
func keys(tb testing.TB, m map[string]any, want ...string) {
	tb.Helper()
	if len(m) != len(want) {
		tb.Fatalf("keys of %v: want exactly %v", m, want)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			tb.Fatalf("keys of %v: missing %q", m, k)
		}
	}
}

// hasKeys requires m to have at least the given keys.
func hasKeys(tb testing.TB, m map[string]any, want ...string) {
	tb.Helper()
	for _, k := range want {
		if _, ok := m[k]; !ok {
			tb.Fatalf("keys of %v: missing %q", m, k)
		}
	}
}

// scopeCfg is a scope config with fast deploys and the given pool numbers.
func scopeCfg(maxConc, podConc, queue, waitS int) string {
	return fmt.Sprintf(`{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":%d,"pod_concurrency":%d,"queue_size":%d,"wait_timeout_s":%d}}`,
		maxConc, podConc, queue, waitS)
}
