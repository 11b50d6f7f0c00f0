package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/agent"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
)

// A Reporter against a real replica: its reports are taken (unknown sessions come
// back), Drain makes the next report at once and takes the pod out of routing, and a
// pod warmpool purged ends Run with ErrGone.
func TestReporterAgainstAReplica(t *testing.T) {
	b := testserver.NewBacking(t)
	cfg := b.Config("r1")
	cfg.ReportSecret, cfg.ReportURL = "secret", "http://127.0.0.1:9"
	srv, ts := testserver.Serve(t, cfg)
	ctx := t.Context()
	conf := warmpool.DefaultScopeConfig()
	if _, err := srv.Scopes.Put(ctx, "a", conf); err != nil {
		t.Fatal(err)
	}
	bind, err := srv.SM.Route(ctx, "a", "s1", "")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for k, v := range b.Fake.Deploys()[0].Req.AgentEnv(bind.PodID) {
		env[k] = v
	}
	env[warmpool.EnvReportURL] = ts.URL // the replica under test, not the configured one
	c, ok := agent.FromEnv(func(k string) string { return env[k] })
	if !ok || c.PodID != bind.PodID || c.Scope != "a" || c.Interval != time.Duration(conf.Agent.ReportIntervalS)*time.Second {
		t.Fatalf("FromEnv(%v) = %+v, %v; want the scope's report interval", env, c, ok)
	}
	c.Sessions = func() []string { return []string{"s1", "gone"} }
	c.Interval = time.Hour // only Drain and explicit reports in this test
	r := agent.New(c)

	next, err := r.Report(ctx)
	if err != nil || next != warmpool.DefaultReportIntervalS*time.Second || !slices.Equal(r.Unknown(), []string{"gone"}) {
		t.Fatalf("report: next %v, %v, unknown %v", next, err, r.Unknown())
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	r.Drain()
	await.True(t, 10*time.Second, "the drain report", func() bool {
		snap, err := srv.Store().PoolSnapshot(ctx, "a")
		return err == nil && len(snap.Pods) == 1 && snap.Pods[0].Draining
	})
	if _, err := srv.Store().PodPurge(ctx, "a", bind.PodID, "test", nil); err != nil {
		t.Fatal(err)
	}
	r.Drain() // a report at once
	select {
	case err := <-done:
		if !errors.Is(err, agent.ErrGone) {
			t.Fatalf("Run after the purge: %v, want ErrGone", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end after the pod was purged")
	}
	stop()
}

// A report to an address that is not warmpool's (404 NOT_FOUND there) is an error to
// retry, not ErrGone: a wrong URL does not make the agent exit.
func TestReporterTellsAWrongAddressFromAPurgedPod(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(ts.Close)
	r := agent.New(agent.Config{URL: ts.URL, Token: "t", PodID: "p", Scope: "a"})
	if _, err := r.Report(t.Context()); err == nil || errors.Is(err, agent.ErrGone) {
		t.Fatalf("report to a plain 404: %v, want an error that is not ErrGone", err)
	}
}

// A failed report is retried after twice the interval warmpool last asked for, not
// twice the Reporter's own Interval: an agent of a scope that reports every second
// (Interval left at a slower value) is silent for 2 s after one 503, not 3 s (or 10 s
// with the default Interval, longer than the three intervals of its liveness).
func TestReporterBacksOffFromWarmpoolsInterval(t *testing.T) {
	const interval = 1500 * time.Millisecond
	at := reportTimes(t, interval, 3, func(k int) (int, string) {
		if k == 2 {
			return http.StatusServiceUnavailable, `{"error":{"code":"STORE_UNAVAILABLE","message":"down"}}`
		}
		return http.StatusOK, reportAnswer
	})
	asked, retry := at[1]-at[0], at[2]-at[1]
	if asked < 900*time.Millisecond || asked > 1200*time.Millisecond {
		t.Fatalf("second report %v after the first, want the 1 s warmpool asked for", asked)
	}
	if retry < 1900*time.Millisecond || retry > 2500*time.Millisecond {
		t.Fatalf("retry %v after the failed report, want 2 s: twice warmpool's interval, not twice Interval (%v)", retry, interval)
	}
}

// FromEnv takes the scope's report interval from WARMPOOL_REPORT_INTERVAL_S; without
// it, or with a value that is no number of seconds, the Reporter's default stands.
func TestFromEnvReadsTheReportInterval(t *testing.T) {
	for v, want := range map[string]time.Duration{"2": 2 * time.Second, "": 0, "0": 0, "-1": 0, "2s": 0} {
		env := map[string]string{warmpool.EnvReportURL: "http://w", warmpool.EnvReportToken: "t", warmpool.EnvPodID: "p",
			warmpool.EnvScope: "a", warmpool.EnvReportInterval: v}
		if c, ok := agent.FromEnv(func(k string) string { return env[k] }); !ok || c.Interval != want {
			t.Errorf("%s=%q: Interval %v (ok %v), want %v", warmpool.EnvReportInterval, v, c.Interval, ok, want)
		}
	}
}

// Run reports once at start, before any interval has passed (SPEC §12.4): with an
// Interval of an hour the first report still comes at once. Before, the first report
// waited for the interval, the agent's default 5 s whatever the scope's, so a short
// session TTL expired before it.
func TestReporterReportsAtStart(t *testing.T) {
	at := reportTimes(t, time.Hour, 1, func(int) (int, string) { return http.StatusOK, reportAnswer })
	if first := at[0]; first > time.Second {
		t.Fatalf("first report %v after the start, want at once", first)
	}
}

// A pod the deploy has not registered yet (POD_NOT_FOUND before any report was taken,
// as the report at start usually is) is asked about again at the interval, not after
// a doubled backoff.
func TestReporterAsksAgainAtTheIntervalUntilRegistered(t *testing.T) {
	at := reportTimes(t, time.Second, 2, func(k int) (int, string) {
		if k == 1 {
			return http.StatusNotFound, `{"error":{"code":"POD_NOT_FOUND","message":"not registered yet"}}`
		}
		return http.StatusOK, reportAnswer
	})
	if again := at[1] - at[0]; again < 800*time.Millisecond || again > 1500*time.Millisecond {
		t.Fatalf("report %v after a POD_NOT_FOUND of a pod not registered yet, want the 1 s interval", again)
	}
}

// reportAnswer is warmpool's answer to a report that asks for the next in 1 s.
const reportAnswer = `{"next_report_s":1,"unknown_sessions":[]}`

// reportTimes runs a Reporter of interval (jitter 1 %) against a stub of warmpool that
// answers the k-th report (from 1) as answer(k) says, until it has made n reports, and
// returns when each came, from the start of Run.
func reportTimes(t *testing.T, interval time.Duration, n int, answer func(k int) (status int, body string)) []time.Duration {
	t.Helper()
	var mu sync.Mutex
	var at []time.Time
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		k := len(at)
		mu.Unlock()
		status, body := answer(k)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(ts.Close)
	ctx, stop := context.WithCancel(t.Context())
	start := time.Now()
	r := agent.New(agent.Config{URL: ts.URL, Token: "t", PodID: "p", Scope: "a", Interval: interval, Jitter: 0.01})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	await.True(t, 10*time.Second, fmt.Sprintf("%d reports", n), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= n
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	out := make([]time.Duration, len(at))
	for i, a := range at {
		out[i] = a.Sub(start)
	}
	return out
}

// A report sends, with the sessions, the session_ticket of each that has one (SPEC
// §12.4), and only of listed sessions: a ticket of a session the agent no longer
// serves stays home.
func TestReporterSendsTheListedSessionsTickets(t *testing.T) {
	got := make(chan map[string]any, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- body
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"next_report_s":1,"unknown_sessions":[]}`))
	}))
	t.Cleanup(ts.Close)
	r := agent.New(agent.Config{URL: ts.URL, Token: "t", PodID: "p", Scope: "a",
		Sessions: func() []string { return []string{"s1", "s2"} },
		Tickets:  func() map[string]string { return map[string]string{"s1": "T1", "gone": "T0"} }})
	if _, err := r.Report(t.Context()); err != nil {
		t.Fatal(err)
	}
	body := <-got
	if tk, _ := body["tickets"].(map[string]any); len(tk) != 1 || tk["s1"] != "T1" {
		t.Fatalf("report %v: want tickets {s1: T1}", body)
	}
}
