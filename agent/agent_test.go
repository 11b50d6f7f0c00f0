package agent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/agent"
	"github.com/warmpool/warmpool/internal/await"
	"github.com/warmpool/warmpool/internal/harness/testserver"
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
	if !ok || c.PodID != bind.PodID || c.Scope != "a" {
		t.Fatalf("FromEnv(%v) = %+v, %v", env, c, ok)
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
	var mu sync.Mutex
	var at []time.Time
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		n := len(at)
		mu.Unlock()
		if n == 2 {
			http.Error(w, `{"error":{"code":"STORE_UNAVAILABLE"}}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"next_report_s":1,"unknown_sessions":[]}`))
	}))
	t.Cleanup(ts.Close)
	const interval = 1500 * time.Millisecond
	r := agent.New(agent.Config{URL: ts.URL, Token: "t", PodID: "p", Scope: "a", Interval: interval, Jitter: 0.01})
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	await.True(t, 10*time.Second, "a report after the failed one", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= 3
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	asked, retry := at[1].Sub(at[0]), at[2].Sub(at[1])
	if asked < 900*time.Millisecond || asked > 1200*time.Millisecond {
		t.Fatalf("second report %v after the first, want the 1 s warmpool asked for", asked)
	}
	if retry < 1900*time.Millisecond || retry > 2500*time.Millisecond {
		t.Fatalf("retry %v after the failed report, want 2 s: twice warmpool's interval, not twice Interval (%v)", retry, interval)
	}
}
