package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/server"
)

// sample is a value that parses for the flag's type, and its canonical form.
func sample(t *testing.T, f *flag.Flag) (env, want string) {
	t.Helper()
	switch f.Value.(flag.Getter).Get().(type) {
	case time.Duration:
		return "1m30s", "1m30s"
	case bool:
		return "true", "true"
	case int:
		return "7", "7"
	case float64:
		return "7.5", "7.5"
	case string:
		return "from-env", "from-env"
	}
	t.Fatalf("--%s: no sample for a %T", f.Name, f.Value.(flag.Getter).Get())
	return "", ""
}

// Every serve flag reads WARMPOOL_<NAME>, and its help names the variable.
func TestServeFlagsReadTheirVariable(t *testing.T) {
	var cfg server.Config
	var o serveOptions
	fs := serveFlags(&cfg, &o, func(string) string { return "" })
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		name := "WARMPOOL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if !strings.Contains(f.Usage, "["+name+"]") {
			t.Errorf("--%s: help %q does not name %s", f.Name, f.Usage, name)
		}
		env, want := sample(t, f)
		var cfg server.Config
		var o serveOptions
		one := serveFlags(&cfg, &o, func(string) string { return "" })
		if err := applyEnv(one, func(k string) string {
			if k == name {
				return env
			}
			return ""
		}); err != nil {
			t.Fatalf("%s=%s: %v", name, env, err)
		}
		if got := one.Lookup(f.Name).Value.String(); got != want {
			t.Errorf("%s=%s: --%s is %q, want %q", name, env, f.Name, got, want)
		}
	})
	if n < 25 {
		t.Fatalf("only %d serve flags seen", n)
	}
	// The variables reach the config.
	fs = serveFlags(&cfg, &o, func(string) string { return "" })
	env := map[string]string{"WARMPOOL_REDIS": "redis://r:6379/0", "WARMPOOL_ADMIN_TOKEN": "adm", "WARMPOOL_DRAIN_DELAY": "2s", "WARMPOOL_LISTEN": "127.0.0.1:9",
		"WARMPOOL_E2B_LISTEN": "127.0.0.1:10"}
	if err := applyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if cfg.RedisURL != "redis://r:6379/0" || cfg.AdminToken != "adm" || cfg.DrainDelay != 2*time.Second || o.listen != "127.0.0.1:9" ||
		cfg.E2BListen != "127.0.0.1:10" {
		t.Fatalf("config from the environment: %+v, listen %s", cfg, o.listen)
	}
}

// A value that does not parse stops the start with exit 2 and a message naming the
// variable; a flag on the command line wins over its variable.
func TestServeEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want []string
	}{
		{map[string]string{"WARMPOOL_SWEEP_INTERVAL": "banana"}, []string{"--dev"}, []string{"WARMPOOL_SWEEP_INTERVAL", "banana", "--sweep-interval", "duration"}},
		{map[string]string{"WARMPOOL_KUBE_BURST": "lots"}, []string{"--dev"}, []string{"WARMPOOL_KUBE_BURST", "integer"}},
		{map[string]string{"WARMPOOL_DEV": "maybe"}, nil, []string{"WARMPOOL_DEV", "true or false"}},
		{map[string]string{"WARMPOOL_LOG_FORMAT": "xml"}, []string{"--dev"}, []string{"--log-format", "json or text"}},
		{map[string]string{"WARMPOOL_METRICS_SCOPE_DETAIL": "team-["}, []string{"--dev"}, []string{"--metrics-scope-detail", "team-[", "glob"}},
		// A bad value on the command line is a usage error too.
		{map[string]string{"WARMPOOL_DRAIN_DELAY": "5s"}, []string{"--dev", "--drain-delay", "x"}, []string{"drain-delay"}},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"warmpool", "serve"}, c.args...), func(k string) string { return c.env[k] }, &stdout, &stderr)
		var out bytes.Buffer
		if code := exitCode(err, &out); code != 2 {
			t.Fatalf("%v %v: exit %d (%v), want 2", c.env, c.args, code, err)
		}
		msg := out.String() + stderr.String()
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v %v: %q does not say %q", c.env, c.args, msg, w)
			}
		}
	}
	var cfg server.Config
	var o serveOptions
	fs := serveFlags(&cfg, &o, func(string) string { return "" })
	if err := applyEnv(fs, func(k string) string {
		return map[string]string{"WARMPOOL_PREFIX": "env:", "WARMPOOL_DRAIN_DELAY": "9s"}[k]
	}); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--prefix", "flag:"}); err != nil {
		t.Fatal(err)
	}
	if cfg.Prefix != "flag:" || cfg.DrainDelay != 9*time.Second {
		t.Fatalf("prefix %q, drain delay %v: want the flag's prefix and the variable's delay", cfg.Prefix, cfg.DrainDelay)
	}
}

// serve without --redis and without --dev exits 2 with one line saying what to pass.
func TestServeNeedsRedis(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"warmpool", "serve", "--store", t.TempDir() + "/w.db"}, func(string) string { return "" }, &stdout, &stderr)
	var out bytes.Buffer
	if code := exitCode(err, &out); code != 2 {
		t.Fatalf("exit %d (%v), want 2", code, err)
	}
	msg := out.String()
	if strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "--redis") || !strings.Contains(msg, "--dev") || stderr.Len() != 0 || stdout.Len() != 0 {
		t.Fatalf("message %q (stderr %q, stdout %q): want one line naming --redis and --dev", msg, stderr.String(), stdout.String())
	}
}

// serve on a Redis older than warmpool needs exits 1 with one line naming the version
// it found and the one it needs.
func TestServeRefusesAnOldRedis(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"warmpool", "serve", "--listen", "127.0.0.1:0", "--store", t.TempDir() + "/w.db", "--driver", "fake",
		"--redis", "redis://" + testredis.OldServer(t, "6.0.9") + "/0", "--auth-token", "t"}, func(string) string { return "" }, &stdout, &stderr)
	var out bytes.Buffer
	if code := exitCode(err, &out); code != 1 {
		t.Fatalf("exit %d (%v), want 1", code, err)
	}
	msg := out.String()
	if strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "version 6.0.9") || !strings.Contains(msg, "needs 6.2 or later") {
		t.Fatalf("message %q: want one line naming 6.0.9 and 6.2", msg)
	}
}

// serve without --driver and without --dev exits 2 with one line naming --driver and
// every registered driver, before it listens or connects to anything: it does not
// quietly run local processes on a host meant for a cluster. An unknown driver, or a
// flag of the fake driver on another one, is refused the same way.
func TestServeNeedsDriver(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"--driver", "WARMPOOL_DRIVER", driver.List(), "--dev"}},
		{[]string{"--driver", "nope"}, []string{`--driver "nope": want ` + driver.List()}},
		{[]string{"--driver", "local", "--fake-deploy-delay", "1s"}, []string{"fake deploy delay", "--driver fake", `"local"`}},
		{[]string{"--driver", "kubernetes", "--fake-state-dir", t.TempDir()}, []string{"fake state dir", "--driver fake", `"kubernetes"`}},
		{[]string{"--dev", "--fake-deploy-delay", "1s"}, []string{"fake deploy delay", `"local"`}},
	} {
		// Port 1 of loopback: nothing answers there, and nothing must try.
		args := append([]string{"warmpool", "serve", "--redis", "redis://127.0.0.1:1/0", "--listen", "127.0.0.1:1",
			"--store", t.TempDir() + "/w.db"}, c.args...)
		var stdout, stderr bytes.Buffer
		// Bounded: a serve that started anyway would wait for that Redis for ever.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, args, noEnv, &stdout, &stderr)
		cancel()
		var out bytes.Buffer
		if code := exitCode(err, &out); code != 2 {
			t.Fatalf("%v: exit %d (%v), want 2", c.args, code, err)
		}
		msg := out.String()
		if strings.Count(msg, "\n") != 1 || stdout.Len() != 0 || stderr.Len() != 0 {
			t.Errorf("%v: message %q (stdout %q, stderr %q): want one line", c.args, msg, stdout.String(), stderr.String())
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v: %q does not say %q", c.args, msg, w)
			}
		}
	}
}

// The help of --driver names the registered drivers and says it is required.
func TestDriverHelp(t *testing.T) {
	var cfg server.Config
	var o serveOptions
	fs := serveFlags(&cfg, &o, func(string) string { return "" })
	usage := fs.Lookup("driver").Usage
	for _, w := range []string{driver.List(), "required", "--dev"} {
		if !strings.Contains(usage, w) {
			t.Errorf("--driver help %q does not say %q", usage, w)
		}
	}
	for _, name := range []string{"fake", "kubernetes", "local"} {
		if !slices.Contains(driver.Names(), name) {
			t.Errorf("driver %s is not registered (drivers.go): %v", name, driver.Names())
		}
	}
	for _, name := range []string{"fake-deploy-delay", "fake-state-dir", "local-state-dir", "kubeconfig", "namespace", "kube-qps", "kube-burst"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s among the serve flags", name)
		}
	}
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		err     error
		code    int
		printed bool
	}{
		{nil, 0, false},
		{errUsage, 2, false},
		{usageError("serve: bad"), 2, true},
		{context.DeadlineExceeded, 1, true},
	} {
		var out bytes.Buffer
		if got := exitCode(c.err, &out); got != c.code || (out.Len() > 0) != c.printed {
			t.Errorf("%v: exit %d, printed %q; want %d, printed %v", c.err, got, out.String(), c.code, c.printed)
		}
	}
}

// serve logs JSON lines by default and text with --dev; --log-format wins over both.
func TestLogFormat(t *testing.T) {
	for _, c := range []struct {
		format string
		dev    bool
		json   bool
	}{
		{"", false, true}, {"", true, false}, {"json", true, true}, {"text", false, false},
	} {
		var out bytes.Buffer
		log, err := newLogger(&out, "info", c.format, c.dev)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("hello", "k", "v")
		if got := json.Valid(bytes.TrimSpace(out.Bytes())); got != c.json {
			t.Errorf("--log-format %q, --dev %v: logged %q; JSON %v, want %v", c.format, c.dev, out.String(), got, c.json)
		}
	}
}
