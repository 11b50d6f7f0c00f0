package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/server"
)

// browser starts headless Chromium for the test. Without Chromium the test is skipped
// on a developer's machine and fails in CI (CI=true), where .ci/run installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; CI must have it (.ci/run installs the Debian package chromium)")
		}
		t.Skip("chromium is not installed (Debian: apt-get install chromium): the pool page is not tested in a browser")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 720))
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(cancelCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}

// consoleErrors collects what the page reports as an error: exceptions, console.error
// calls and error log entries (a failed load among them).
type consoleErrors struct {
	mu   sync.Mutex
	msgs []string
}

func (c *consoleErrors) listen(t *testing.T, ctx context.Context) {
	t.Helper()
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg = "exception: " + d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value))
				}
				msg = "console.error: " + strings.Join(parts, " ")
			}
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				msg = "log: " + ev.Entry.Text + " " + ev.Entry.URL
			}
		}
		if msg != "" {
			c.mu.Lock()
			c.msgs = append(c.msgs, msg)
			c.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("listening to the page: %v", err)
	}
}

func (c *consoleErrors) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.msgs...)
}

// call sends one API call and decodes the answer, which must be 200.
func call(t *testing.T, method, url, body string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s", method, url, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

// js evaluates a JavaScript expression in the page.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// screenshot writes the page as PNG to $WARMPOOL_SCREENSHOT_DIR (else a temp dir).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("WARMPOOL_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// The page loads without errors, shows the demo scope's pod once a session is routed
// and its change from busy to idle when the session ends, by itself, and a pod whose
// agent drains as draining.
func TestPoolPageInBrowser(t *testing.T) {
	ctx := browser(t)
	b := testserver.NewBacking(t)
	b.Fake.DeployDelay = 150 * time.Millisecond
	cfg := b.Config("ui-replica-1")
	cfg.Dev = true // the demo scope
	srv, ts := testserver.Serve(t, cfg)

	var errs consoleErrors
	errs.listen(t, ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS(`section[data-scope="`+server.DemoScope+`"]`))); err != nil {
		t.Fatalf("the page does not show the demo scope: %v", err)
	}

	// Three sessions: a full pod and one with a free slot, then the first pod's
	// sessions end.
	type binding struct {
		PodID string `json:"pod_id"`
	}
	var pods []string
	for i := range 3 {
		var b binding
		call(t, http.MethodPost, ts.URL+"/v1/scopes/demo/sessions", fmt.Sprintf(`{"session_id":"s%d"}`, i), &b)
		pods = append(pods, b.PodID)
	}
	if pods[0] != pods[1] || pods[0] == pods[2] {
		t.Fatalf("pods %v: want two sessions on the first, the third on a second", pods)
	}
	row := func(pod, state string) chromedp.CSS {
		return chromedp.CSS(`tr[data-pod="` + pod + `"][data-state="` + state + `"]`)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(row(pods[0], "busy")), chromedp.WaitVisible(row(pods[2], "busy"))); err != nil {
		t.Fatalf("the page does not show the busy pods: %v", err)
	}
	if got := js[string](t, ctx, `document.querySelector('tr[data-pod="`+pods[0]+`"]').cells[2].textContent`); got != "2 / 2" {
		t.Fatalf("sessions of the full pod: %q", got)
	}
	for _, s := range []string{"s0", "s1"} {
		call(t, http.MethodDelete, ts.URL+"/v1/scopes/demo/sessions/"+s, "", nil)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(row(pods[0], "idle"))); err != nil {
		t.Fatalf("the page does not show the pod going idle: %v", err)
	}

	// A new deploy config: the pods so far are of the old deploy_ver, the next one is
	// of the current.
	call(t, http.MethodPut, ts.URL+"/v1/scopes/demo/config", `{"deploy":{"env":{"RELEASE":"2"}}}`, nil)
	var next binding
	call(t, http.MethodPost, ts.URL+"/v1/scopes/demo/sessions", `{"session_id":"s3"}`, &next)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`tr[data-pod="`+next.PodID+`"] .ver.current`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-pod="`+pods[2]+`"] .ver.old`))); err != nil {
		t.Fatalf("the page does not tell current from old pods: %v", err)
	}
	if bars := js[int](t, ctx, `document.querySelectorAll('section[data-scope="demo"] .chart rect').length`); bars != 3 {
		t.Fatalf("%d deploys in the chart, want 3", bars)
	}

	// The agent of the second pod reports that it drains: the page shows it draining,
	// counted apart from the busy pods.
	if _, err := srv.Store().AgentReport(t.Context(), redisstore.AgentReport{Scope: "demo", Pod: pods[2], Sessions: []string{"s2"}, Draining: true, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(row(pods[2], "draining"))); err != nil {
		t.Fatalf("the page does not show the draining pod: %v", err)
	}
	if got := js[string](t, ctx, `document.querySelector('section[data-scope="demo"] .counts').textContent`); !strings.Contains(got, "busy 1") || !strings.Contains(got, "draining 1") {
		t.Fatalf("counts %q: want busy 1 (the new pod) and draining 1", got)
	}
	screenshot(t, ctx, "pool-page.png")
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(e, "\n"))
	}
}

// Each row and each scope in full shows the scope's tenant: the one its config names,
// else the scope itself.
func TestPoolPageShowsScopeTenantInBrowser(t *testing.T) {
	ctx := browser(t)
	b := testserver.NewBacking(t)
	cfg := b.Config("ui-replica-4")
	cfg.Dev = true // the demo scope, of its own tenant
	_, ts := testserver.Serve(t, cfg)
	call(t, http.MethodPut, ts.URL+"/v1/scopes/shop/config", `{"tenant":"acme","pool":{"max_concurrency":4,"pod_concurrency":2}}`, nil)

	var errs consoleErrors
	errs.listen(t, ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS(`section[data-scope="shop"]`))); err != nil {
		t.Fatalf("the page does not show the scope: %v", err)
	}
	cond := `document.querySelector('#summary tr[data-row="shop"] td.tenant').textContent === "acme" &&
		document.querySelector('#summary tr[data-row="demo"] td.tenant').textContent === "demo"`
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		got := js[string](t, ctx, `[...document.querySelectorAll('#summary td.tenant')].map(c => c.textContent).join(",")`)
		t.Fatalf("the rows' tenants are %q, want acme for shop and demo for demo (%v)", got, err)
	}
	for scope, want := range map[string]string{"shop": "tenant acme", "demo": "tenant demo"} {
		if got := js[string](t, ctx, `document.querySelector('section[data-scope="`+scope+`"] h2 .tenant').textContent`); got != want {
			t.Errorf("%s in full: %q, want %q", scope, got, want)
		}
	}
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(e, "\n"))
	}
}

// The tenants panel shows each tenant with quotas: its use against each quota, a quota
// it leaves out as unlimited, its weight and share; none before any tenant has quotas.
func TestPoolPageShowsTenantsInBrowser(t *testing.T) {
	ctx := browser(t)
	b := testserver.NewBacking(t)
	cfg := b.Config("ui-replica-5")
	cfg.Dev = true // the demo scope
	_, ts := testserver.Serve(t, cfg)

	var errs consoleErrors
	errs.listen(t, ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS(`#tenants .none`))); err != nil {
		t.Fatalf("the page does not say that no tenant has quotas: %v", err)
	}
	if got := js[string](t, ctx, `document.querySelector('#tenants .none').textContent`); got != "no tenant has quotas" {
		t.Fatalf("the tenants panel without quotas says %q", got)
	}
	call(t, http.MethodPut, ts.URL+"/v1/tenants/acme", `{"max_pods":4,"max_sessions":10,"max_memory":"8Gi","weight":3}`, nil)
	call(t, http.MethodPut, ts.URL+"/v1/tenants/open", `{}`, nil)
	call(t, http.MethodPut, ts.URL+"/v1/scopes/shop/config", `{"tenant":"acme","pool":{"max_concurrency":4,"pod_concurrency":2}}`, nil)
	route(t, ts.URL, "shop", "s0")

	cell := func(tenant, quota string) string {
		return `document.querySelector('#tenants tr[data-tenant="` + tenant + `"] td[data-quota="` + quota + `"]')`
	}
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](cell("acme", "pods")+`?.textContent === "1 / 4"`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the page does not show acme's pod against its quota: %v", err)
	}
	for _, c := range []struct{ tenant, quota, want string }{
		{"acme", "sessions", "1 / 10"}, {"acme", "memory", "512Mi / 8Gi"}, {"acme", "cpu", "500m / unlimited"}, {"acme", "idle_pods", "0 / unlimited"},
		{"open", "pods", "0 / unlimited"}, {"open", "sessions", "0 / unlimited"}, {"open", "memory", "0 / unlimited"},
	} {
		if got := js[string](t, ctx, cell(c.tenant, c.quota)+`.textContent`); got != c.want {
			t.Errorf("%s's %s: %q, want %q", c.tenant, c.quota, got, c.want)
		}
	}
	if n := js[int](t, ctx, `document.querySelectorAll('#tenants tr[data-tenant="open"] .unlimited').length`); n != 5 {
		t.Errorf("open has no quota: %d of its 5 quotas shown as unlimited", n)
	}
	for tenant, want := range map[string]string{"acme": "acme,3,75.0%", "open": "open,1,25.0%"} {
		got := js[string](t, ctx, `[...document.querySelector('#tenants tr[data-tenant="`+tenant+`"]').cells].slice(0, 3).map(c => c.textContent).join(",")`)
		if got != want {
			t.Errorf("%s's tenant, weight and share: %q, want %q", tenant, got, want)
		}
	}
	if n := js[int](t, ctx, `document.querySelectorAll('#tenants tr[data-tenant]').length`); n != 2 {
		t.Errorf("%d tenants shown, want acme and open (demo has no quotas)", n)
	}
	screenshot(t, ctx, "pool-page-tenants.png")
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(e, "\n"))
	}
}

// A scope whose deploys fail shows its refill backoff: the failures in a row, the time
// left and the last error.
func TestPoolPageShowsBackoffInBrowser(t *testing.T) {
	ctx := browser(t)
	b := testserver.NewBacking(t)
	cfg := b.Config("ui-replica-3")
	cfg.Dev = true // the demo scope
	_, ts := testserver.Serve(t, cfg)

	var errs consoleErrors
	errs.listen(t, ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS(`section[data-scope="demo"]`))); err != nil {
		t.Fatalf("the page does not show the demo scope: %v", err)
	}
	if n := js[int](t, ctx, `document.querySelectorAll('section[data-scope="demo"] .backoff').length`); n != 0 {
		t.Fatalf("%d backoff lines before any failure, want none", n)
	}
	failRoute(t, b, ts.URL, "demo", "s0")
	line := chromedp.CSS(`section[data-scope="demo"] .backoff[data-backoff="1"]`)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(line)); err != nil {
		t.Fatalf("the page does not show the refill backoff: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(line))
	if err != nil || !strings.Contains(text, "1 failed deploy") || !strings.Contains(text, "agent:broken") || !strings.Contains(text, "next try in") {
		t.Fatalf("backoff line %q (%v): want the failures, the time left and the last error", text, err)
	}
	screenshot(t, ctx, "pool-page-backoff.png")
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(e, "\n"))
	}
}

// With an admin token on the server, the page says so, and works once the token is
// entered in its form.
func TestPoolPageAsksForTheToken(t *testing.T) {
	ctx := browser(t)
	b := testserver.NewBacking(t)
	cfg := b.Config("ui-replica-2")
	cfg.Dev, cfg.AdminToken = true, "s3cret"
	_, ts := testserver.Serve(t, cfg)

	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS(`#status.error`))); err != nil {
		t.Fatalf("no error shown without the token: %v", err)
	}
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#status`)))
	if err != nil || !strings.Contains(status, "admin token") {
		t.Fatalf("status %q (%v): should ask for the admin token", status, err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#token`), "s3cret"), chromedp.Click(chromedp.CSS(`#token-form button`)),
		chromedp.WaitVisible(chromedp.CSS(`section[data-scope="demo"]`))); err != nil {
		t.Fatalf("the page does not load with the token: %v", err)
	}
	if stored := js[string](t, ctx, `sessionStorage.getItem("warmpool-admin-token")`); stored != "s3cret" {
		t.Fatalf("sessionStorage holds %q", stored)
	}
}

// At more scopes than a page holds, the page shows 20 rows and their details, pages
// on, filters by scope id and sorts, asking for the details of the rows it shows.
func TestPoolPagePagingInBrowser(t *testing.T) {
	ctx := browser(t)
	b := testserver.NewBacking(t)
	cfg := b.Config("ui-replica-3")
	cfg.Dev = true // the demo scope, first of the rows
	_, ts := testserver.Serve(t, cfg)
	for i := range 24 {
		putScope(t, ts.URL, fmt.Sprintf("p-%02d", i))
	}
	route(t, ts.URL, "p-05", "s0")
	route(t, ts.URL, "p-05", "s1")
	route(t, ts.URL, "p-21", "s0")

	var errs consoleErrors
	errs.listen(t, ctx)
	rows := `document.querySelectorAll('#summary tr[data-row]')`
	sections := `document.querySelectorAll('section.scope')`
	// wait waits until the page shows want rows, the first and last of them named,
	// each with its details, and the range text.
	wait := func(when string, want int, first, last, rangeText string) {
		t.Helper()
		cond := fmt.Sprintf(`(() => { const r = %s, s = %s; return r.length === %d && s.length === %d &&
			r[0].dataset.row === %q && r[r.length-1].dataset.row === %q && s[0].dataset.scope === %q && s[s.length-1].dataset.scope === %q &&
			document.getElementById("range").textContent === %q; })()`, rows, sections, want, want, first, last, first, last, rangeText)
		if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			got := js[string](t, ctx, `[...`+rows+`].map(r => r.dataset.row).join(",") + " | " + [...`+sections+
				`].map(s => s.dataset.scope).join(",") + " | " + document.getElementById("range").textContent`)
			t.Fatalf("%s: the page shows %s; want %d rows and details %s…%s, %q (%v)", when, got, want, first, last, rangeText, err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/ui")); err != nil {
		t.Fatal(err)
	}
	wait("the first page", 20, server.DemoScope, "p-18", "1–20 of 25")
	if got := js[string](t, ctx, `document.querySelector('#summary tr[data-row="p-05"]').cells[7].textContent`); got != "2" {
		t.Errorf("sessions of p-05 in its row: %q", got)
	}
	if got := js[string](t, ctx, `document.getElementById("totals").textContent`); !strings.Contains(got, "scopes 25") || !strings.Contains(got, "sessions 3") {
		t.Errorf("totals: %q", got)
	}
	if !js[bool](t, ctx, `document.getElementById("prev").disabled`) || js[bool](t, ctx, `document.getElementById("next").disabled`) {
		t.Error("on the first page: previous should be disabled, next enabled")
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#next`))); err != nil {
		t.Fatal(err)
	}
	wait("the second page", 5, "p-19", "p-23", "21–25 of 25")
	if !js[bool](t, ctx, `document.getElementById("next").disabled`) {
		t.Error("on the last page: next should be disabled")
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#filter`), "P-1")); err != nil {
		t.Fatal(err)
	}
	wait("filtered", 10, "p-10", "p-19", "1–10 of 10 matching")
	js[bool](t, ctx, `(() => { const s = document.getElementById("sort"); s.value = "-sessions"; s.dispatchEvent(new Event("change")); return true; })()`)
	wait("filtered, by sessions", 10, "p-10", "p-19", "1–10 of 10 matching")
	js[bool](t, ctx, `(() => { const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input")); return true; })()`)
	wait("by sessions", 20, "p-05", "p-17", "1–20 of 25")
	if got := js[string](t, ctx, `[...`+rows+`].slice(0, 3).map(r => r.dataset.row).join(",")`); got != "p-05,p-21,demo" {
		t.Errorf("the first rows by sessions: %s, want p-05, p-21, then the others by scope id", got)
	}
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(e, "\n"))
	}
}
