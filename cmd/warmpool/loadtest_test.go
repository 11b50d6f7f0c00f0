package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/server"
)

func noEnv(string) string { return "" }

func TestLoadtestRefusesNonLoopback(t *testing.T) {
	for _, srv := range []string{"http://10.0.0.1:8080", "http://example.com", "http://[2001:db8::1]:80"} {
		out := filepath.Join(t.TempDir(), "out")
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"warmpool", "loadtest", "--server", srv, "--out", out}, noEnv, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("%s: want a refusal naming loopback, got %v", srv, err)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("%s: wrote %s although refused", srv, out)
		}
	}
	// The environment's server is checked the same way.
	env := func(k string) string {
		if k == "WARMPOOL_SERVER" {
			return "http://192.168.0.10:8080"
		}
		return ""
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"warmpool", "loadtest"}, env, &stdout, &stderr); err == nil {
		t.Error("WARMPOOL_SERVER off this machine was accepted")
	}
}

func TestLoadtestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"warmpool", "help"}, noEnv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "warmpool loadtest") {
		t.Errorf("usage lacks loadtest:\n%s", stdout.String())
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"warmpool", "loadtest", "--duration", "11m"}, noEnv, &stdout, &stderr); err == nil ||
		!strings.Contains(err.Error(), "duration") {
		t.Errorf("an 11m run: want an error naming duration, got %v", err)
	}
}

// TestLoadtestColdBurst runs the command against an in-process replica (embedded
// Redis, the fake driver with a deploy delay) and reads the files it writes.
func TestLoadtestColdBurst(t *testing.T) {
	ctx := context.Background()
	driver := fake.New()
	driver.DeployDelay = 30 * time.Millisecond
	srv, err := server.New(ctx, server.Config{StorePath: ":memory:", Driver: driver, DriverName: fake.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	out := filepath.Join(t.TempDir(), "out")
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"warmpool", "loadtest", "--server", ts.URL, "--scenario", "cold", "--burst", "4",
		"--bursts", "1", "--pod-concurrency", "2", "--deploy-delay", "30ms", "--out", out}, noEnv, &stdout, &stderr)
	if err != nil {
		t.Fatalf("loadtest: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "all served: true; deploys as expected: true") {
		t.Errorf("summary:\n%s", stdout.String())
	}
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Scenarios []struct {
			Cold struct {
				Bursts []struct {
					Served   int `json:"served"`
					PoolPods int `json:"pool_pods"`
				} `json:"bursts"`
			} `json:"cold"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Scenarios) != 1 || len(res.Scenarios[0].Cold.Bursts) != 1 {
		t.Fatalf("results.json: %s", raw)
	}
	if b := res.Scenarios[0].Cold.Bursts[0]; b.Served != 4 || b.PoolPods != 2 {
		t.Errorf("burst: %+v, want 4 served by 2 pods", b)
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Error(err)
	}
}
