package agent_test

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/agent"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
)

// An agent fetches its session's config (SPEC §12.2) with its pod's token, the package
// function from the pod's environment as warmpool gave it; the Reporter keeps it while
// the session is served and drops it when a report's answer says the session ended,
// after which the fetch answers ErrNoSession: a reused pod's next session sees none of
// it.
func TestSessionConfigOfTheAgentsSession(t *testing.T) {
	b := testserver.NewBacking(t)
	cfg := b.Config("r1")
	cfg.ReportSecret, cfg.ReportURL = "secret", "http://127.0.0.1:9"
	srv, ts := testserver.Serve(t, cfg)
	ctx := t.Context()
	if _, err := srv.Scopes.Put(ctx, "a", warmpool.DefaultScopeConfig()); err != nil {
		t.Fatal(err)
	}
	b.Fake.SetSecret("tok", "value", "from-the-secret")
	body := `{"session_id":"s1","session_config":{"env":{"MODE":"fast"},"secret_refs":{"TOKEN":{"secret":"tok","key":"value"}}}}`
	res, err := http.Post(ts.URL+"/v1/scopes/a/sessions", "application/json", bytes.NewBufferString(body))
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("route: %v %v", res, err)
	}
	res.Body.Close()
	pod := b.Fake.Deploys()[0]
	env := pod.Req.AgentEnv(warmpool.PodName("a", pod.Req.Fence))
	env[warmpool.EnvReportURL] = ts.URL
	for k, v := range env {
		t.Setenv(k, v)
	}
	want := func(got map[string]string, err error) {
		t.Helper()
		if err != nil || len(got) != 2 || got["MODE"] != "fast" || got["TOKEN"] != "from-the-secret" {
			t.Fatalf("config %v, %v", got, err)
		}
	}
	want(agent.SessionConfig(ctx, "s1"))
	if _, err := agent.SessionConfig(ctx, "other"); !errors.Is(err, agent.ErrNoSession) {
		t.Fatalf("config of a session not on the pod: %v, want ErrNoSession", err)
	}

	c, _ := agent.FromEnv(func(k string) string { return env[k] })
	c.Sessions = func() []string { return []string{"s1"} }
	r := agent.New(c)
	want(r.SessionConfig(ctx, "s1"))
	if _, err := srv.SM.End(ctx, "a", "s1"); err != nil {
		t.Fatal(err)
	}
	want(r.SessionConfig(ctx, "s1")) // kept until the agent learns the session ended
	if _, err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := r.SessionConfig(ctx, "s1"); !errors.Is(err, agent.ErrNoSession) {
		t.Fatalf("config after the report named s1 ended: %v, %v; want ErrNoSession", got, err)
	}
}
