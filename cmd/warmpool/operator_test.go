package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
)

// cli is a replica served in-process and the operator commands pointed at it.
type cli struct {
	t    *testing.T
	base string
	env  map[string]string
}

func newCLI(t *testing.T, token, admin string) *cli {
	t.Helper()
	b := testserver.NewBacking(t)
	cfg := b.Config("cli-1")
	cfg.AuthToken, cfg.AdminToken = token, admin
	_, ts := testserver.Serve(t, cfg)
	return &cli{t: t, base: ts.URL, env: map[string]string{"WARMPOOL_SERVER": ts.URL}}
}

// run runs one command and returns its output and exit status.
func (c *cli) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"warmpool"}, args...), func(k string) string { return c.env[k] }, &out, &errOut)
	code = exitCode(err, &errOut)
	return out.String(), errOut.String(), code
}

// ok runs a command that must succeed and returns its output.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	return out
}

// json runs a command with -o json and decodes its output into v.
func (c *cli) json(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("%v: output is not JSON: %v\n%s", args, err, out)
	}
}

// fails runs a command that must fail with code, its stderr saying each of want.
func (c *cli) fails(code int, args []string, want ...string) {
	c.t.Helper()
	_, errOut, got := c.run(args...)
	if got != code {
		c.t.Fatalf("%v: exit %d, want %d: %s", args, got, code, errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			c.t.Fatalf("%v: stderr %q does not say %q", args, errOut, w)
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestScopeCommands(t *testing.T) {
	c := newCLI(t, "", "")
	yamlFile := writeFile(t, "a.yaml", "deploy:\n  ready_timeout_s: 30\npool:\n  max_concurrency: 4\n  pod_concurrency: 2\n")
	jsonFile := writeFile(t, "a.json", `{"tenant":"acme","pool":{"max_concurrency":6,"pod_concurrency":2}}`)

	// put: YAML and JSON files; a table says what happened, json gives the answer.
	if out := c.ok("scope", "put", "a", "-f", yamlFile, "-o", "table"); !strings.Contains(out, "scope/a configured: version 1, deploy_ver ") {
		t.Fatalf("scope put (table): %q", out)
	}
	var put struct {
		Version int `json:"version"`
	}
	c.json(&put, "scope", "put", "a", "-f", jsonFile)
	if put.Version != 2 {
		t.Fatalf("scope put (json): %+v", put)
	}

	// get, in each format.
	var got struct {
		Version int `json:"version"`
		Config  struct {
			Tenant string `json:"tenant"`
			Pool   struct {
				MaxConcurrency int `json:"max_concurrency"`
			} `json:"pool"`
		} `json:"config"`
	}
	c.json(&got, "scope", "get", "a")
	if got.Version != 2 || got.Config.Pool.MaxConcurrency != 6 || got.Config.Tenant != "acme" {
		t.Fatalf("scope get: %+v", got)
	}
	var fromYAML map[string]any
	if err := yaml.Unmarshal([]byte(c.ok("scope", "get", "a", "-o", "yaml")), &fromYAML); err != nil || fromYAML["scope_id"] != "a" {
		t.Fatalf("scope get -o yaml: %v %v", fromYAML, err)
	}
	table := c.ok("scope", "get", "a", "-o", "table")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "SCOPE") || !strings.HasPrefix(lines[1], "a ") ||
		!strings.Contains(lines[0], "TENANT") || !strings.Contains(lines[1], " acme ") {
		t.Fatalf("scope get -o table:\n%s", table)
	}

	// history: both versions, newest first.
	var hist struct {
		Versions []struct {
			Version int `json:"version"`
		} `json:"versions"`
	}
	c.json(&hist, "scope", "history", "a")
	if len(hist.Versions) != 2 || hist.Versions[0].Version != 2 || hist.Versions[1].Version != 1 {
		t.Fatalf("scope history: %+v", hist)
	}
	if table := c.ok("scope", "history", "a", "--output", "table"); strings.Count(table, "\n") != 3 {
		t.Fatalf("scope history -o table:\n%s", table)
	}

	// list, and its old spelling.
	var list struct {
		Scopes []struct {
			ScopeID string `json:"scope_id"`
		} `json:"scopes"`
	}
	c.json(&list, "scope", "list")
	if len(list.Scopes) != 1 || list.Scopes[0].ScopeID != "a" {
		t.Fatalf("scope list: %+v", list)
	}
	if c.ok("scopes", "-o", "json") != c.ok("scope", "list", "-o", "json") {
		t.Fatal("scopes and scope list differ")
	}
	if table := c.ok("scope", "list", "-o", "table"); !strings.Contains(table, "SESSIONS") || !strings.Contains(table, "\na ") {
		t.Fatalf("scope list -o table:\n%s", table)
	}

	// sync
	var synced struct {
		Scopes int `json:"scopes"`
	}
	c.json(&synced, "sync")
	if synced.Scopes != 1 {
		t.Fatalf("sync: %+v", synced)
	}

	// delete: the scope is gone from list and get, its history stays; deleting it
	// again is not found; a later put starts at the next version.
	if out := c.ok("scope", "delete", "a", "-o", "table"); out != "scope/a deleted: 0 pods going\n" {
		t.Fatalf("scope delete (table): %q", out)
	}
	c.fails(exitNotFound, []string{"scope", "get", "a"}, "SCOPE_NOT_FOUND")
	c.fails(exitNotFound, []string{"scope", "delete", "a", "--force"}, "404 SCOPE_NOT_FOUND")
	// The list comes from a pass over every scope up to ui.ListAge (5 s) old.
	await.True(t, 15*time.Second, "scope list without the deleted scope", func() bool {
		c.json(&list, "scope", "list")
		return len(list.Scopes) == 0
	})
	c.json(&hist, "scope", "history", "a")
	if len(hist.Versions) != 2 {
		t.Fatalf("scope history after the delete: %+v", hist)
	}
	c.json(&put, "scope", "put", "a", "-f", jsonFile)
	if put.Version != 3 {
		t.Fatalf("scope put after the delete: %+v", put)
	}
	var deleted struct {
		ScopeID string `json:"scope_id"`
		Pods    *int   `json:"pods"`
	}
	c.json(&deleted, "scope", "delete", "a", "--force")
	if deleted.ScopeID != "a" || deleted.Pods == nil || *deleted.Pods != 0 {
		t.Fatalf("scope delete --force (json): %+v", deleted)
	}
}

// scope list follows the pages of GET /v1/scopes from the first (or --after's
// cursor) to the last, 500 scopes a page, and prints every scope as one answer;
// --limit prints one page and its next cursor.
func TestScopeListPages(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	var mu sync.Mutex
	var asked []string
	queries := func() string {
		mu.Lock()
		defer mu.Unlock()
		q := strings.Join(asked, " ")
		asked = nil
		return q
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RawQuery)
		mu.Unlock()
		after, limit := r.URL.Query().Get("after"), 2 // the server's pages are smaller than asked
		var page []map[string]any
		next := any(nil)
		for _, id := range ids {
			if id > after && len(page) < limit {
				page = append(page, map[string]any{"scope_id": id, "version": 1, "pods": 0, "sessions": 0})
			}
		}
		if last := page[len(page)-1]["scope_id"]; last != ids[len(ids)-1] {
			next = last
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"scopes": page, "next": next})
	}))
	t.Cleanup(srv.Close)
	c := &cli{t: t, base: srv.URL, env: map[string]string{"WARMPOOL_SERVER": srv.URL}}
	got := func(args ...string) (scopes []string, next any) {
		t.Helper()
		var v struct {
			Scopes []struct {
				ScopeID string `json:"scope_id"`
			} `json:"scopes"`
			Next any `json:"next"`
		}
		c.json(&v, append([]string{"scope", "list"}, args...)...)
		for _, s := range v.Scopes {
			scopes = append(scopes, s.ScopeID)
		}
		return scopes, v.Next
	}
	if s, next := got(); strings.Join(s, ",") != "a,b,c,d,e" || next != nil {
		t.Fatalf("scope list: %v, next %v; want every scope, page after page", s, next)
	}
	if q := queries(); q != "limit=500 limit=500&after=b limit=500&after=d" {
		t.Fatalf("scope list asked %q", q)
	}
	if s, _ := got("--after", "c"); strings.Join(s, ",") != "d,e" {
		t.Fatalf("scope list --after c: %v", s)
	}
	if q := queries(); q != "limit=500&after=c" {
		t.Fatalf("scope list --after c asked %q", q)
	}
	if s, next := got("--limit", "2"); strings.Join(s, ",") != "a,b" || next != "b" {
		t.Fatalf("scope list --limit 2: %v, next %v; want one page and its cursor", s, next)
	}
	if table := c.ok("scope", "list", "--limit", "2", "-o", "table"); !strings.Contains(table, "next b: more scopes follow (scope list --after b") {
		t.Fatalf("scope list --limit 2 -o table:\n%s", table)
	}
}

// scope history prints one page, newest first, with the next_before that fetches the
// next, in each format; --limit and --before pick the page, --all follows every page.
func TestScopeHistoryPages(t *testing.T) {
	c := newCLI(t, "", "")
	const n = 120
	for i := 1; i <= n; i++ {
		c.ok("scope", "put", "h", "-f", writeFile(t, "h.json", fmt.Sprintf(`{"pool":{"max_concurrency":%d,"pod_concurrency":1}}`, i)))
	}
	type page struct {
		ScopeID  string `json:"scope_id"`
		Versions []struct {
			Version int `json:"version"`
		} `json:"versions"`
		NextBefore *int `json:"next_before"`
	}
	// want checks a page: versions newest down to oldest, and its next_before (0:
	// none).
	want := func(args []string, newest, oldest, next int) {
		t.Helper()
		var p page
		c.json(&p, append([]string{"scope", "history", "h"}, args...)...)
		if p.ScopeID != "h" || len(p.Versions) != newest-oldest+1 {
			t.Fatalf("%v: %d versions, want %d to %d", args, len(p.Versions), newest, oldest)
		}
		for i, v := range p.Versions {
			if v.Version != newest-i {
				t.Fatalf("%v: versions[%d] is %d, want %d", args, i, v.Version, newest-i)
			}
		}
		if (p.NextBefore == nil) != (next == 0) || (p.NextBefore != nil && *p.NextBefore != next) {
			t.Fatalf("%v: next_before %v, want %d (0: none)", args, p.NextBefore, next)
		}
	}
	want(nil, 120, 71, 71)
	want([]string{"--limit", "50", "--before", "71"}, 70, 21, 21)
	want([]string{"--before", "21", "--limit", "50"}, 20, 1, 0)
	want([]string{"--limit", "7"}, 120, 114, 114)
	want([]string{"--all"}, 120, 1, 0)
	want([]string{"--all", "--limit", "7"}, 120, 1, 0)
	want([]string{"--all", "--before", "21"}, 20, 1, 0)

	var fromYAML page
	if err := yaml.Unmarshal([]byte(c.ok("scope", "history", "h", "-o", "yaml")), &fromYAML); err != nil ||
		len(fromYAML.Versions) != 50 || fromYAML.NextBefore == nil || *fromYAML.NextBefore != 71 {
		t.Fatalf("scope history -o yaml: %+v %v", fromYAML, err)
	}
	table := c.ok("scope", "history", "h", "-o", "table")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 53 || !strings.HasPrefix(lines[0], "VERSION") || !strings.HasPrefix(lines[1], "120 ") ||
		!strings.HasPrefix(lines[50], "71 ") || !strings.Contains(lines[52], "next_before 71") || !strings.Contains(lines[52], "--before 71") {
		t.Fatalf("scope history -o table:\n%s", table)
	}
	if table := c.ok("scope", "history", "h", "--before", "21", "-o", "table"); strings.Contains(table, "next_before") || strings.Count(table, "\n") != 21 {
		t.Fatalf("scope history --before 21 -o table (the last page):\n%s", table)
	}

	c.fails(exitRefused, []string{"scope", "history", "h", "--limit", "0"}, "400 VALIDATION", "limit: ")
	c.fails(exitRefused, []string{"scope", "history", "h", "--limit", "501"}, "400 VALIDATION", "limit: ")
	c.fails(exitRefused, []string{"scope", "history", "h", "--before", "0"}, "400 VALIDATION", "before: ")
	c.fails(2, []string{"scope", "history", "h", "--limit", "ten"}, "want an integer")
	c.fails(2, []string{"scope", "history", "h", "--before", "v1"}, "want an integer")
	c.fails(exitNotFound, []string{"scope", "history", "nosuch", "--all"}, "SCOPE_NOT_FOUND")
}

// scope history --all stops, with an error, at a server whose next_before does not go
// back, instead of asking for the same page for ever.
func TestScopeHistoryAllStops(t *testing.T) {
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"scope_id":"h","versions":[],"next_before":5}`)
	}))
	t.Cleanup(ts.Close)
	c := &cli{t: t, base: ts.URL, env: map[string]string{"WARMPOOL_SERVER": ts.URL}}
	c.fails(exitRefused, []string{"scope", "history", "h", "--all"}, "next_before 5 does not go back")
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2 (the second page repeats the first's next_before)", n)
	}
}

// Every fault of a config file is reported at once, each with its full path.
func TestScopePutReportsEveryFault(t *testing.T) {
	c := newCLI(t, "", "")
	bad := writeFile(t, "bad.yaml", "deploy:\n  imagee: agent:1\npool:\n  queue_size: -1\n  pod_concurrency: two\n")
	c.fails(exitRefused, []string{"scope", "put", "x", "-f", bad}, "400 VALIDATION",
		"\n  deploy.imagee: unknown field\n", "\n  pool.pod_concurrency: expected int", "\n  pool.queue_size: must be between 0")
	dup := writeFile(t, "dup.yaml", "pool:\n  queue_size: 1\n  queue_size: 2\n")
	c.fails(exitRefused, []string{"scope", "put", "x", "-f", dup}, "queue_size")
	c.fails(exitNotFound, []string{"scope", "get", "x"}, "404 SCOPE_NOT_FOUND")
}

func TestSessionAndPoolCommands(t *testing.T) {
	c := newCLI(t, "", "")
	c.ok("scope", "put", "p", "-f", writeFile(t, "p.json", `{"pool":{"max_concurrency":4,"pod_concurrency":2}}`))
	resp, err := http.Post(c.base+"/v1/scopes/p/sessions", "application/json", strings.NewReader(`{"session_id":"s1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("route: %s", resp.Status)
	}

	var pool struct {
		DeployVer string `json:"deploy_ver"`
		Pods      []struct {
			State    string `json:"state"`
			Sessions int    `json:"sessions"`
		} `json:"pods"`
	}
	c.json(&pool, "pool", "p")
	if len(pool.Pods) != 1 || pool.Pods[0].State != "busy" || pool.Pods[0].Sessions != 1 {
		t.Fatalf("pool: %+v", pool)
	}
	table := c.ok("pool", "p", "-o", "table")
	for _, want := range []string{"POD", "busy", pool.DeployVer + " (current)", "max_pods 2", "target_idle 0 (warm_policy static)\n"} {
		if !strings.Contains(table, want) {
			t.Fatalf("pool -o table lacks %q:\n%s", want, table)
		}
	}
	c.ok("scope", "put", "d", "-f", writeFile(t, "d.json", `{"pool":{"max_concurrency":4,"pod_concurrency":2,"min_idle_pods":1,"warm_policy":"demand","max_idle_pods":2}}`))
	demand := c.ok("pool", "d", "-o", "table")
	for _, want := range []string{"target_idle 1 (warm_policy demand): takes ", "/s, frees ", ", lead time ", "within [1, 2]"} {
		if !strings.Contains(demand, want) {
			t.Fatalf("pool -o table of a demand scope lacks %q:\n%s", want, demand)
		}
	}

	if out := c.ok("session", "end", "p", "s1", "-o", "table"); out != "session/s1 ended\n" {
		t.Fatalf("session end: %q", out)
	}
	if out := c.ok("session", "end", "p", "s1", "-o", "table"); out != "session/s1 was not bound\n" {
		t.Fatalf("session end again: %q", out)
	}
	c.json(&pool, "pool", "p")
	if len(pool.Pods) != 1 || pool.Pods[0].State != "idle" {
		t.Fatalf("pool after the end: %+v", pool)
	}
	if table := c.ok("pool", "p", "-o", "table"); !strings.Contains(table, "idle") {
		t.Fatalf("pool -o table after the end:\n%s", table)
	}
	c.fails(exitNotFound, []string{"pool", "nosuch"}, "SCOPE_NOT_FOUND")
}

func TestExitStatuses(t *testing.T) {
	c := newCLI(t, "gw", "adm")
	cfg := writeFile(t, "c.json", `{}`)
	c.fails(exitUnauthorized, []string{"scope", "list"}, "401 UNAUTHORIZED")
	c.env["WARMPOOL_AUTH_TOKEN"] = "gw"
	c.ok("scope", "list")
	c.fails(exitUnauthorized, []string{"scope", "put", "a", "-f", cfg}, "403 FORBIDDEN")
	c.fails(exitUnauthorized, []string{"sync"}, "403 FORBIDDEN")
	c.fails(exitUnauthorized, []string{"scope", "delete", "a"}, "403 FORBIDDEN")
	c.env["WARMPOOL_ADMIN_TOKEN"] = "adm"
	c.ok("scope", "put", "a", "-f", cfg)
	// Config reads are admin calls: the gateway token may not read a config or its
	// history (SPEC §11.5).
	for _, args := range [][]string{{"scope", "get", "a"}, {"scope", "history", "a"}, {"scope", "history", "a", "--all"}} {
		c.fails(exitUnauthorized, append(args, "--token", "gw"), "403 FORBIDDEN", "needs the admin token")
		c.ok(args...)
	}
	c.fails(exitNotFound, []string{"scope", "get", "b"}, "SCOPE_NOT_FOUND")
	c.fails(exitRefused, []string{"scope", "get", "BAD"}, "400 VALIDATION")

	// Usage mistakes.
	for _, args := range [][]string{
		{"pool"}, {"scopes", "extra"}, {"scope", "frobnicate", "a"}, {"session", "end", "a"},
		{"scope", "list", "-o", "xml"}, {"scope", "put", "a"}, {"scope", "list", "--nope"},
		{"scope", "delete"}, {"scope", "delete", "a", "b"},
	} {
		c.fails(2, args)
	}

	// No server there.
	c.env["WARMPOOL_SERVER"] = "http://127.0.0.1:1"
	c.fails(exitUnavailable, []string{"scope", "list"}, "server unavailable")
}

func TestVersion(t *testing.T) {
	c := &cli{t: t, env: map[string]string{}}
	if out := c.ok("version", "-o", "table"); !strings.HasPrefix(out, "warmpool ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %q", out)
	}
	var v struct {
		Version   string `json:"version"`
		GoVersion string `json:"go_version"`
	}
	c.json(&v, "version")
	if v.Version == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Fatalf("version -o json: %+v", v)
	}
	// Output that is not a terminal is JSON by default.
	if out := c.ok("version"); !json.Valid([]byte(out)) {
		t.Fatalf("version to a pipe: %q", out)
	}
}
