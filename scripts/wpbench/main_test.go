package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/warmpool/warmpool/redisstore"
)

func TestScriptPrintsTheSourceRedisRuns(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"script", "session_route.lua"}, func(string) string { return "" }, &out, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != redisstore.Sources["session_route.lua"] {
		t.Errorf("printed %d bytes, want redisstore.Sources[session_route.lua] (%d bytes)", out.Len(), len(redisstore.Sources["session_route.lua"]))
	}
	if err := run(context.Background(), []string{"script", "nope.lua"}, func(string) string { return "" }, &out, &out); err == nil {
		t.Error("an unknown script printed nothing and no error")
	}
}

func TestKeysPrintsWhatAReplicaPasses(t *testing.T) {
	var out bytes.Buffer
	k := redisstore.NewKeyspace("bench:").Scope("s")
	if err := run(context.Background(), []string{"keys", "session_route.lua", "bench:", "s", k.RouteAnswer(""), k.IdemMark("")},
		func(string) string { return "" }, &out, &out); err != nil {
		t.Fatal(err)
	}
	want, err := redisstore.ScriptKeys("session_route.lua", k, k.RouteAnswer(""), k.IdemMark(""))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out.String()); !slices.Equal(got, want) {
		t.Errorf("printed %q, want %q", got, want)
	}
	if err := run(context.Background(), []string{"keys", "session_route.lua", "bench:", "s"}, func(string) string { return "" }, &out, &out); err == nil {
		t.Error("keys without session_route.lua's two extra keys printed no error")
	}
}

func TestBadEnvironmentStopsTheRun(t *testing.T) {
	env := map[string]string{"SCALE_IDLE": "60", "SCALE_PODS": "one"}
	var out bytes.Buffer
	err := run(context.Background(), []string{"scale"}, func(k string) string { return env[k] }, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "SCALE_IDLE") || !strings.Contains(err.Error(), "SCALE_PODS") {
		t.Fatalf("err = %v, want both bad variables named", err)
	}
}

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"1000, 10000", []int{1000, 10000}},
		{"none", []int{}},
	} {
		got, err := parseSizes(c.in)
		if err != nil || !slices.Equal(got, c.want) || got == nil {
			t.Errorf("parseSizes(%q) = %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "0", "1k"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) accepted", bad)
		}
	}
}

// A report interval that the scopes' agent.report_interval_s cannot hold is refused
// before anything starts.
func TestReportsRefusesAnIntervalOfNoWholeSeconds(t *testing.T) {
	var out bytes.Buffer
	for _, iv := range []string{"1500ms", "0s"} {
		err := run(context.Background(), []string{"reports", "--interval", iv, "--bin", "/nonexistent"}, func(string) string { return "" }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "--interval") {
			t.Errorf("--interval %s: %v, want an error naming --interval", iv, err)
		}
	}
}

// The capacity run's report interval is refused the same way, before anything starts.
func TestCapacityRefusesAReportIntervalOfNoWholeSeconds(t *testing.T) {
	var out bytes.Buffer
	for _, iv := range []string{"2500ms", "0s"} {
		err := run(context.Background(), []string{"capacity", "--report-interval", iv, "--bin", "/nonexistent"}, func(string) string { return "" }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "--report-interval") {
			t.Errorf("--report-interval %s: %v, want an error naming --report-interval", iv, err)
		}
	}
}

func TestBigScopeRefusesBadSizes(t *testing.T) {
	for _, args := range [][]string{{"--sizes", "10,x"}, {"--pod-concurrency", "0"}, {"--burst-rates", "fast"}} {
		err := run(context.Background(), append([]string{"bigscope"}, args...), func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("bigscope %v: %v, want an error naming %s", args, err, args[0])
		}
	}
}

// The session config measurement refuses a load it cannot run before anything starts.
func TestSessionConfigRefusesBadFlags(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{{"--rate", "0"}, {"--rounds", "0"}, {"--window", "-1s"}, {"--min-idle", "0"}, {"--life", "0s"}, {"--deploy-delay", "0s"}} {
		err := run(context.Background(), append([]string{"sessionconfig", "--bin", "/nonexistent"}, args...), func(string) string { return "" }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v, want an error naming %s", args, err, args[0])
		}
	}
	if err := run(context.Background(), []string{"sessionconfig", "extra"}, func(string) string { return "" }, &out, &out); err == nil {
		t.Error("an argument after the flags was taken")
	}
}
