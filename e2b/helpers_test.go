package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	gatewayKey = "gw-key"
	adminKey   = "admin-key"
	template   = "tpl"
)

// door is one replica with its E2B front door, on the test Redis, the fake driver and
// a stopped clock, both tokens set; the scope tpl is put.
type door struct {
	t     testing.TB
	srv   *server.Server
	api   *httptest.Server // the /v1 API
	e2b   *httptest.Server // the front door
	clock *testredis.Clock
}

func newDoor(t testing.TB, opts ...func(*server.Config)) *door {
	t.Helper()
	b := testserver.NewBacking(t)
	cfg := b.Config("e2b-test")
	cfg.Clock = testredis.NewClock()
	cfg.AuthToken, cfg.AdminToken = gatewayKey, adminKey
	cfg.E2BListen = "127.0.0.1:0"
	for _, o := range opts {
		o(&cfg)
	}
	srv, api := testserver.Serve(t, cfg)
	d := &door{t: t, srv: srv, api: api, clock: cfg.Clock.(*testredis.Clock)}
	d.e2b = httptest.NewServer(srv.E2BHandler())
	t.Cleanup(d.e2b.Close)
	d.putScope(template, `{"pool":{"max_concurrency":4,"pod_concurrency":2,"session_ttl_s":600}}`)
	return d
}

// putScope puts a scope's config through the /v1 API.
func (d *door) putScope(scope, cfg string) {
	d.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, d.api.URL+"/v1/scopes/"+scope+"/config", strings.NewReader(cfg))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(res.Body)
		d.t.Fatalf("put %s: %d %s", scope, res.StatusCode, raw)
	}
}

// answer is one HTTP answer.
type answer struct {
	status int
	header http.Header
	raw    []byte
}

func (a answer) String() string { return string(bytes.TrimSpace(a.raw)) }

// into decodes the answer's body into v.
func (a answer) into(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(a.raw, v); err != nil {
		t.Fatalf("%d %s: %v", a.status, a, err)
	}
}

// call sends one request to the front door with the gateway's key (key "" for none)
// and headers as "Name: value".
func (d *door) call(method, path, body, key string, headers ...string) answer {
	d.t.Helper()
	return send(d.t, d.e2b.URL, method, path, body, key, headers...)
}

func send(t testing.TB, base, method, path, body, key string, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	res, raw := testserver.Do(t, req)
	return answer{status: res.StatusCode, header: res.Header, raw: raw}
}

// e2bError is E2B's error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// refused fails the test unless a is an E2B error of status whose message holds says.
func refused(t testing.TB, what string, a answer, status int, says string) {
	t.Helper()
	var e e2bError
	if a.status != status || json.Unmarshal(a.raw, &e) != nil || e.Code != status || !strings.Contains(e.Message, says) {
		t.Fatalf("%s: %d %s; want %d {\"code\": %d, \"message\": …%s…}", what, a.status, a, status, status, says)
	}
}

// sandbox is E2B's Sandbox as create and connect answer it.
type sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// detail is E2B's SandboxDetail (and ListedSandbox).
type detail struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Lifecycle   *struct {
		AutoResume bool   `json:"autoResume"`
		OnTimeout  string `json:"onTimeout"`
	} `json:"lifecycle"`
}

// create creates a sandbox of body and returns it.
func (d *door) create(body string) sandbox {
	d.t.Helper()
	a := d.call(http.MethodPost, "/v2/sandboxes", body, gatewayKey)
	if a.status != http.StatusCreated || a.header.Get("X-Request-Id") == "" {
		d.t.Fatalf("create %s: %d %s %v", body, a.status, a, a.header)
	}
	var sb sandbox
	a.into(d.t, &sb)
	return sb
}

// info gets a sandbox (200) or fails the test.
func (d *door) info(id string) detail {
	d.t.Helper()
	a := d.call(http.MethodGet, "/sandboxes/"+id, "", gatewayKey)
	if a.status != http.StatusOK {
		d.t.Fatalf("get %s: %d %s", id, a.status, a)
	}
	var det detail
	a.into(d.t, &det)
	return det
}

// session is the /v1 binding of a sandbox's session, or its error.
func (d *door) session(id string) error {
	_, err := d.srv.SM.Get(context.Background(), template, id)
	return err
}

// sessionGone fails the test unless the sandbox's session is gone.
func (d *door) sessionGone(id string) {
	d.t.Helper()
	if err := d.session(id); warmpool.ErrorCode(err) != warmpool.CodeSessionNotFound {
		d.t.Fatalf("session of %s: %v, want SESSION_NOT_FOUND", id, err)
	}
}
