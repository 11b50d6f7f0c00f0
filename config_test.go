package warmpool

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func mustDecode(tb testing.TB, doc string) ScopeConfig {
	tb.Helper()
	cfg, err := LoadScopeConfig([]byte(doc))
	if err != nil {
		tb.Fatalf("LoadScopeConfig(%s): %v", doc, err)
	}
	return cfg
}

// wantValidation checks that err is a VALIDATION *Error whose message starts with the
// field it blames.
func wantValidation(tb testing.TB, err error, field string) {
	tb.Helper()
	var e *Error
	if !errors.As(err, &e) {
		tb.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if e.Code != CodeValidation {
		tb.Fatalf("error %v: code %s, want VALIDATION", err, e.Code)
	}
	if !strings.HasPrefix(e.Message, field+": ") {
		tb.Fatalf("error %q does not name the field %s", e.Message, field)
	}
}

func TestDefaultScopeConfigIsValid(t *testing.T) {
	if err := DefaultScopeConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := DefaultScopeConfig().Deploy.Resources.Memory; got != "512Mi" {
		t.Errorf("default memory = %q, want 512Mi (SPEC §4)", got)
	}
}

// One case per validation branch, at both sides of each bound where there are two.
func TestValidate(t *testing.T) {
	long := strings.Repeat("x", maxStringLen+1)
	list := func(n int) []string { return make([]string, n) }
	env := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m["V"+strings.Repeat("_", i)] = "x"
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		edit  func(*ScopeConfig)
		field string // "" when the edit is valid
		// Empty strings are filled by Normalize, so a case that sets one tests
		// Validate alone, not the decode path.
		validateOnly bool
	}{
		{"tenant uppercase", func(c *ScopeConfig) { c.Tenant = "Acme" }, "tenant", false},
		{"tenant with a slash", func(c *ScopeConfig) { c.Tenant = "acme/a" }, "tenant", false},
		{"tenant 64 chars", func(c *ScopeConfig) { c.Tenant = strings.Repeat("a", 64) }, "tenant", false},
		{"tenant 63 chars", func(c *ScopeConfig) { c.Tenant = strings.Repeat("a", 63) }, "", false},
		{"tenant with dots", func(c *ScopeConfig) { c.Tenant = "team.a-1" }, "", false},
		{"tenant empty means the scope's", func(c *ScopeConfig) { c.Tenant = "" }, "", false},
		{"image too long", func(c *ScopeConfig) { c.Deploy.Image = long }, "deploy.image", false},
		{"image with space", func(c *ScopeConfig) { c.Deploy.Image = "agent 1" }, "deploy.image", false},
		{"image with tab", func(c *ScopeConfig) { c.Deploy.Image = "agent\t1" }, "deploy.image", false},
		{"image with newline", func(c *ScopeConfig) { c.Deploy.Image = "agent:1\n" }, "deploy.image", false},
		{"image at max length", func(c *ScopeConfig) { c.Deploy.Image = long[1:] }, "", false},
		{"namespace uppercase", func(c *ScopeConfig) { c.Deploy.Namespace = "Agents" }, "deploy.namespace", false},
		{"namespace underscore", func(c *ScopeConfig) { c.Deploy.Namespace = "my_ns" }, "deploy.namespace", false},
		{"namespace leading dash", func(c *ScopeConfig) { c.Deploy.Namespace = "-ns" }, "deploy.namespace", false},
		{"namespace 64 chars", func(c *ScopeConfig) { c.Deploy.Namespace = strings.Repeat("a", 64) }, "deploy.namespace", false},
		{"namespace 63 chars", func(c *ScopeConfig) { c.Deploy.Namespace = strings.Repeat("a", 63) }, "", false},
		{"namespace empty means the server's", func(c *ScopeConfig) { c.Deploy.Namespace = "" }, "", false},
		{"container name empty", func(c *ScopeConfig) { c.Deploy.ContainerName = "" }, "deploy.container_name", true},
		{"container name uppercase", func(c *ScopeConfig) { c.Deploy.ContainerName = "Agent" }, "deploy.container_name", false},
		{"container name dot", func(c *ScopeConfig) { c.Deploy.ContainerName = "a.b" }, "deploy.container_name", false},
		{"port 0", func(c *ScopeConfig) { c.Deploy.Port = 0 }, "deploy.port", false},
		{"port negative", func(c *ScopeConfig) { c.Deploy.Port = -1 }, "deploy.port", false},
		{"port 65536", func(c *ScopeConfig) { c.Deploy.Port = 65536 }, "deploy.port", false},
		{"port 1", func(c *ScopeConfig) { c.Deploy.Port = 1 }, "", false},
		{"port 65535", func(c *ScopeConfig) { c.Deploy.Port = 65535 }, "", false},
		{"sse path relative", func(c *ScopeConfig) { c.Deploy.SSEPath = "sse" }, "deploy.sse_path", false},
		{"sse path with space", func(c *ScopeConfig) { c.Deploy.SSEPath = "/s se" }, "deploy.sse_path", false},
		{"sse path too long", func(c *ScopeConfig) { c.Deploy.SSEPath = "/" + strings.Repeat("a", 256) }, "deploy.sse_path", false},
		{"sse path with query chars", func(c *ScopeConfig) { c.Deploy.SSEPath = "/v1/sse;x=1" }, "", false},
		{"sse path empty", func(c *ScopeConfig) { c.Deploy.SSEPath = "" }, "deploy.sse_path", true},
		{"health path relative", func(c *ScopeConfig) { c.Deploy.HealthPath = "health" }, "deploy.health_path", false},
		{"health path empty", func(c *ScopeConfig) { c.Deploy.HealthPath = "" }, "deploy.health_path", true},
		{"ready timeout 0", func(c *ScopeConfig) { c.Deploy.ReadyTimeoutS = 0 }, "deploy.ready_timeout_s", false},
		{"ready timeout over max", func(c *ScopeConfig) { c.Deploy.ReadyTimeoutS = MaxReadyTimeoutS + 1 }, "deploy.ready_timeout_s", false},
		{"ready timeout at max", func(c *ScopeConfig) { c.Deploy.ReadyTimeoutS = MaxReadyTimeoutS }, "", false},
		{"cpu word", func(c *ScopeConfig) { c.Deploy.Resources.CPU = "lots" }, "deploy.resources.cpu", false},
		{"cpu negative", func(c *ScopeConfig) { c.Deploy.Resources.CPU = "-1" }, "deploy.resources.cpu", false},
		{"cpu with space", func(c *ScopeConfig) { c.Deploy.Resources.CPU = "500 m" }, "deploy.resources.cpu", false},
		{"cpu empty", func(c *ScopeConfig) { c.Deploy.Resources.CPU = "" }, "deploy.resources.cpu", true},
		{"cpu decimal", func(c *ScopeConfig) { c.Deploy.Resources.CPU = "0.5" }, "", false},
		{"memory MB", func(c *ScopeConfig) { c.Deploy.Resources.Memory = "512MB" }, "deploy.resources.memory", false},
		{"memory empty", func(c *ScopeConfig) { c.Deploy.Resources.Memory = "" }, "deploy.resources.memory", true},
		{"memory Gi", func(c *ScopeConfig) { c.Deploy.Resources.Memory = "1.5Gi" }, "", false},
		{"memory exponent", func(c *ScopeConfig) { c.Deploy.Resources.Memory = "129e6" }, "", false},
		{"command too many", func(c *ScopeConfig) { c.Deploy.Command = list(maxListLen + 1) }, "deploy.command", false},
		{"command at max", func(c *ScopeConfig) { c.Deploy.Command = list(maxListLen) }, "", false},
		{"command item too long", func(c *ScopeConfig) { c.Deploy.Command = []string{long} }, "deploy.command", false},
		{"args too many", func(c *ScopeConfig) { c.Deploy.Args = list(maxListLen + 1) }, "deploy.args", false},
		{"args item too long", func(c *ScopeConfig) { c.Deploy.Args = []string{"ok", long} }, "deploy.args", false},
		{"env too many", func(c *ScopeConfig) { c.Deploy.Env = env(maxListLen + 1) }, "deploy.env", false},
		{"env at max", func(c *ScopeConfig) { c.Deploy.Env = env(maxListLen) }, "", false},
		{"env name digit first", func(c *ScopeConfig) { c.Deploy.Env = map[string]string{"1A": "x"} }, "deploy.env", false},
		{"env name space", func(c *ScopeConfig) { c.Deploy.Env = map[string]string{"A B": "x"} }, "deploy.env", false},
		{"env name empty", func(c *ScopeConfig) { c.Deploy.Env = map[string]string{"": "x"} }, "deploy.env", false},
		{"env value too long", func(c *ScopeConfig) { c.Deploy.Env = map[string]string{"K": long} }, "deploy.env.K", false},
		{"env dotted name", func(c *ScopeConfig) { c.Deploy.Env = map[string]string{"_a.b-c": ""} }, "", false},
		{"pod concurrency 0", func(c *ScopeConfig) { c.Pool.PodConcurrency = 0 }, "pool.pod_concurrency", false},
		{"pod concurrency over max", func(c *ScopeConfig) {
			c.Pool.PodConcurrency, c.Pool.MaxConcurrency = MaxPodConcurrency+1, MaxConcurrencyCap
		}, "pool.pod_concurrency", false},
		{"max concurrency below pod concurrency", func(c *ScopeConfig) { c.Pool.MaxConcurrency = 1 }, "pool.max_concurrency", false},
		{"max concurrency over cap", func(c *ScopeConfig) { c.Pool.MaxConcurrency = MaxConcurrencyCap + 1 }, "pool.max_concurrency", false},
		{"max concurrency equals pod concurrency", func(c *ScopeConfig) { c.Pool.MaxConcurrency = 2 }, "", false},
		{"min idle negative", func(c *ScopeConfig) { c.Pool.MinIdlePods = -1 }, "pool.min_idle_pods", false},
		{"min idle over max pods", func(c *ScopeConfig) { c.Pool.MinIdlePods = 5 }, "pool.min_idle_pods", false}, // max_pods = 8/2
		{"min idle at max pods", func(c *ScopeConfig) { c.Pool.MinIdlePods = 4 }, "", false},
		{"pod ttl 0", func(c *ScopeConfig) { c.Pool.PodTTLS = 0 }, "pool.pod_ttl_s", false},
		{"pod ttl over max", func(c *ScopeConfig) { c.Pool.PodTTLS = MaxTTLS + 1 }, "pool.pod_ttl_s", false},
		{"session ttl 0", func(c *ScopeConfig) { c.Pool.SessionTTLS = 0 }, "pool.session_ttl_s", false},
		{"session ttl over max", func(c *ScopeConfig) { c.Pool.SessionTTLS = MaxTTLS + 1 }, "pool.session_ttl_s", false},
		{"hold ttl 0", func(c *ScopeConfig) { c.Pool.HoldTTLS = 0 }, "pool.hold_ttl_s", false},
		{"hold ttl over max", func(c *ScopeConfig) { c.Pool.HoldTTLS = MaxTTLS + 1 }, "pool.hold_ttl_s", false},
		{"hold ttl 1", func(c *ScopeConfig) { c.Pool.HoldTTLS = 1 }, "", false},
		{"probe period 0", func(c *ScopeConfig) { c.Pool.ProbePeriodS = 0 }, "pool.probe_period_s", false},
		{"probe period 1", func(c *ScopeConfig) { c.Pool.ProbePeriodS = 1 }, "", false},
		{"probe period max", func(c *ScopeConfig) { c.Pool.ProbePeriodS = MaxProbePeriodS }, "", false},
		{"probe period over max", func(c *ScopeConfig) { c.Pool.ProbePeriodS = MaxProbePeriodS + 1 }, "pool.probe_period_s", false},
		{"recycle delete", func(c *ScopeConfig) { c.Pool.Recycle = RecycleDelete }, "", false},
		{"recycle unknown", func(c *ScopeConfig) { c.Pool.Recycle = "burn" }, "pool.recycle", false},
		{"max sessions per pod 1", func(c *ScopeConfig) { c.Pool.MaxSessionsPerPod = 1 }, "", false},
		{"max sessions per pod negative", func(c *ScopeConfig) { c.Pool.MaxSessionsPerPod = -1 }, "pool.max_sessions_per_pod", false},
		{"max sessions per pod over max", func(c *ScopeConfig) { c.Pool.MaxSessionsPerPod = MaxSessionsPerPod + 1 }, "pool.max_sessions_per_pod", false},
		{"rollout prewarm", func(c *ScopeConfig) { c.Pool.Rollout = RolloutPrewarm }, "", false},
		{"rollout unknown", func(c *ScopeConfig) { c.Pool.Rollout = "blue-green" }, "pool.rollout", false},
		{"warm policy demand", func(c *ScopeConfig) { c.Pool.WarmPolicy = WarmDemand }, "", false},
		{"warm policy unknown", func(c *ScopeConfig) { c.Pool.WarmPolicy = "psychic" }, "pool.warm_policy", false},
		{"max idle 0 is max_pods", func(c *ScopeConfig) { c.Pool.MinIdlePods = 2 }, "", false},
		{"max idle below min idle", func(c *ScopeConfig) { c.Pool.MinIdlePods, c.Pool.MaxIdlePods = 2, 1 }, "pool.max_idle_pods", false},
		{"max idle at min idle", func(c *ScopeConfig) { c.Pool.MinIdlePods, c.Pool.MaxIdlePods = 2, 2 }, "", false},
		{"max idle at max pods", func(c *ScopeConfig) { c.Pool.MaxIdlePods = 4 }, "", false},
		{"max idle over max pods", func(c *ScopeConfig) { c.Pool.MaxIdlePods = 5 }, "pool.max_idle_pods", false},
		{"max idle negative", func(c *ScopeConfig) { c.Pool.MaxIdlePods = -1 }, "pool.max_idle_pods", false},
		{"queue size negative", func(c *ScopeConfig) { c.Pool.QueueSize = -1 }, "pool.queue_size", false},
		{"queue size over max", func(c *ScopeConfig) { c.Pool.QueueSize = MaxQueueSize + 1 }, "pool.queue_size", false},
		{"queue size 0", func(c *ScopeConfig) { c.Pool.QueueSize = 0 }, "", false},
		{"wait timeout negative", func(c *ScopeConfig) { c.Pool.WaitTimeoutS = -1 }, "pool.wait_timeout_s", false},
		{"wait timeout over max", func(c *ScopeConfig) { c.Pool.WaitTimeoutS = MaxWaitTimeoutS + 1 }, "pool.wait_timeout_s", false},
		{"wait timeout 0", func(c *ScopeConfig) { c.Pool.WaitTimeoutS = 0 }, "", false},
		{"parallel deploys negative", func(c *ScopeConfig) { c.Pool.MaxParallelDeploys = -1 }, "pool.max_parallel_deploys", false},
		{"parallel deploys over max pods", func(c *ScopeConfig) { c.Pool.MaxParallelDeploys = 5 }, "pool.max_parallel_deploys", false},
		{"parallel deploys at max pods", func(c *ScopeConfig) { c.Pool.MaxParallelDeploys = 4 }, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultScopeConfig()
			tc.edit(&cfg)
			check := func(t *testing.T, err error) {
				t.Helper()
				if tc.field == "" {
					if err != nil {
						t.Fatalf("valid config rejected: %v", err)
					}
					return
				}
				wantValidation(t, err, tc.field)
			}
			check(t, cfg.Validate())
			if tc.validateOnly {
				return
			}
			// The store's path: the same config as a document.
			doc, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = LoadScopeConfig(doc)
			check(t, err)
		})
	}
}

// A scope's tenant is the one its config names, else the scope itself.
func TestTenantOf(t *testing.T) {
	cfg := DefaultScopeConfig()
	if got := cfg.TenantOf("chat"); got != "chat" {
		t.Fatalf("a config naming no tenant: TenantOf = %q, want the scope", got)
	}
	cfg.Tenant = "acme"
	if got := cfg.TenantOf("chat"); got != "acme" {
		t.Fatalf("TenantOf = %q, want acme", got)
	}
}

func TestNormalize(t *testing.T) {
	cfg := DefaultScopeConfig()
	d := &cfg.Deploy
	d.Image, d.ContainerName, d.Resources.CPU, d.Resources.Memory = "", "\t", "", " "
	d.SSEPath, d.HealthPath, d.Command, d.Args, d.Env = "", "", nil, nil, nil
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	if !configsEqual(cfg, DefaultScopeConfig()) {
		t.Errorf("Normalize = %+v\nwant %+v", cfg, DefaultScopeConfig())
	}
	again := cfg
	if err := again.Normalize(); err != nil || !configsEqual(again, cfg) {
		t.Errorf("Normalize is not idempotent: %+v, %v", again, err)
	}

	// Numbers have no "missing" value after decoding, so Normalize leaves them to
	// Validate: zero stays zero and is reported.
	var zero ScopeConfig
	wantValidation(t, zero.Normalize(), "deploy.port")
}

// Validate names the bad fields in a stable order. The list and env checks range over
// maps, so an order taken from them would change from run to run.
func TestValidateNamesOneFieldDeterministically(t *testing.T) {
	for name, edit := range map[string]func(*ScopeConfig){
		"command and args": func(c *ScopeConfig) {
			c.Deploy.Command, c.Deploy.Args = make([]string, maxListLen+1), make([]string, maxListLen+1)
		},
		"two env names": func(c *ScopeConfig) { c.Deploy.Env = map[string]string{"1A": "", "2B": "", "3C": "", "4D": ""} },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultScopeConfig()
			edit(&cfg)
			seen := map[string]bool{}
			for range 100 {
				seen[cfg.Validate().Error()] = true
			}
			if len(seen) > 1 {
				t.Fatalf("Validate reports a different error from run to run (it ranges over a map): %v", seen)
			}
		})
	}
}

func TestDeployVer(t *testing.T) {
	base := mustDecode(t, `{}`).Deploy.DeployVer()
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(base) {
		t.Fatalf("deploy_ver %q is not 16 hex digits", base)
	}

	t.Run("pinned", func(t *testing.T) {
		// A change to the canonical form changes every scope's deploy_ver, so an
		// upgrade would retire every warm pod at once. Change these only on purpose.
		for doc, want := range map[string]string{
			`{}`: "adc87e944048e279",
			`{"deploy":{"image":"registry.example/agent:1.4","namespace":"agents","container_name":"main",
				"command":["/bin/agent","--serve"],"args":["--port","9000"],"env":{"B":"2","A":"<&>"},
				"resources":{"cpu":"250m","memory":"1Gi"},"port":9000,"sse_path":"/events",
				"health_path":"/healthz","ready_timeout_s":60}}`: "83146c1607ba9143",
		} {
			if got := mustDecode(t, doc).Deploy.DeployVer(); got != want {
				t.Errorf("deploy_ver of %s = %s, want %s", doc, got, want)
			}
		}
	})

	t.Run("key order and spelling of defaults", func(t *testing.T) {
		docs := []string{
			`{"deploy":{"image":"agent:1","env":{"A":"1","B":"2"},"port":9000},"pool":{"queue_size":1}}`,
			`{"pool":{"queue_size":1},"deploy":{"port":9000,"env":{"B":"2","A":"1"},"image":"agent:1"}}`,
			// Every other deploy field spelled out at its default.
			`{"deploy":{"image":"agent:1","namespace":"","container_name":"agent","command":[],"args":null,
				"env":{"B":"2","A":"1"},"resources":{"cpu":"500m","memory":"512Mi"},"port":9000,
				"sse_path":"/sse","health_path":"","ready_timeout_s":300}}`,
		}
		want := mustDecode(t, docs[0]).Deploy.DeployVer()
		for _, doc := range docs[1:] {
			if got := mustDecode(t, doc).Deploy.DeployVer(); got != want {
				t.Errorf("deploy_ver of %s = %s, want %s", doc, got, want)
			}
		}
		if full := mustDecode(t, `{"deploy":{"resources":{"cpu":"500m","memory":"512Mi"},"command":[]}}`); full.Deploy.DeployVer() != base {
			t.Errorf("defaults spelled out: deploy_ver %s, want %s as for {}", full.Deploy.DeployVer(), base)
		}
	})

	t.Run("every deploy field is class A", func(t *testing.T) {
		for _, doc := range []string{
			`{"deploy":{"image":"agent:2"}}`,
			`{"deploy":{"namespace":"agents"}}`,
			`{"deploy":{"container_name":"main"}}`,
			`{"deploy":{"command":["run"]}}`,
			`{"deploy":{"args":["--fast"]}}`,
			`{"deploy":{"args":[""]}}`,
			`{"deploy":{"env":{"K":"V"}}}`,
			`{"deploy":{"env":{"K":""}}}`,
			`{"deploy":{"resources":{"cpu":"1"}}}`,
			`{"deploy":{"resources":{"memory":"1Gi"}}}`,
			`{"deploy":{"port":9000}}`,
			`{"deploy":{"sse_path":"/events"}}`,
			`{"deploy":{"health_path":"/healthz"}}`,
			`{"deploy":{"ready_timeout_s":60}}`,
		} {
			if got := mustDecode(t, doc).Deploy.DeployVer(); got == base {
				t.Errorf("%s keeps deploy_ver %s: the change would never reach a pod", doc, got)
			}
		}
		// List order is part of the command line.
		a := mustDecode(t, `{"deploy":{"args":["a","b"]}}`).Deploy.DeployVer()
		b := mustDecode(t, `{"deploy":{"args":["b","a"]}}`).Deploy.DeployVer()
		if a == b {
			t.Error("reordered args keep the deploy_ver")
		}
	})

	t.Run("pool only is class B", func(t *testing.T) {
		got := mustDecode(t, `{"pool":{"max_concurrency":20,"pod_concurrency":4,"min_idle_pods":2,"pod_ttl_s":60,
			"session_ttl_s":60,"queue_size":0,"wait_timeout_s":0,"max_parallel_deploys":1,"hold_ttl_s":30,
			"probe_period_s":3}}`)
		if v := got.Deploy.DeployVer(); v != base {
			t.Errorf("pool change moved deploy_ver %s -> %s", base, v)
		}
	})
}

// DeployVer fills nothing: it hashes the spec it is given. Normalize gives a spec its
// one canonical form, so a spec built with nil lists (a Go literal) hashes like the
// stored default once normalized, and only then.
func TestDeployVerOfNormalizedSpec(t *testing.T) {
	norm := DefaultScopeConfig()
	raw := norm
	raw.Deploy.Command, raw.Deploy.Args, raw.Deploy.Env = nil, nil, nil
	if raw.Deploy.DeployVer() == norm.Deploy.DeployVer() {
		t.Fatal("DeployVer canonicalises nil lists itself: it should hash what it is given and leave defaults to Normalize")
	}
	if err := raw.Normalize(); err != nil {
		t.Fatal(err)
	}
	if raw.Deploy.DeployVer() != norm.Deploy.DeployVer() {
		t.Fatalf("DeployVer after Normalize = %s, want %s as for the default spec", raw.Deploy.DeployVer(), norm.Deploy.DeployVer())
	}
}

// A stored document is read tolerantly: fields it lacks (written before they existed)
// take their defaults, fields this version does not know are ignored, and the result
// is normalized and valid.
func TestLoadScopeConfig(t *testing.T) {
	t.Run("older document", func(t *testing.T) {
		got, err := LoadScopeConfig([]byte(`{"deploy":{"image":"agent:1","command":null},"pool":{"pod_concurrency":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		want := mustDecode(t, `{"deploy":{"image":"agent:1"},"pool":{"pod_concurrency":1}}`)
		if !configsEqual(got, want) {
			t.Errorf("LoadScopeConfig = %+v\nwant %+v", got, want)
		}
		if got.Pool.HoldTTLS != DefaultHoldTTLS {
			t.Errorf("hold_ttl_s of a document written before it existed = %d, want %d", got.Pool.HoldTTLS, DefaultHoldTTLS)
		}
		if got.Pool.ProbePeriodS != DefaultProbePeriodS {
			t.Errorf("probe_period_s of a document written before it existed = %d, want %d", got.Pool.ProbePeriodS, DefaultProbePeriodS)
		}
		if got.Pool.Recycle != DefaultRecycle {
			t.Errorf("recycle of a document written before it existed = %q, want %q", got.Pool.Recycle, DefaultRecycle)
		}
		if got.Pool.Rollout != DefaultRollout || got.Pool.MaxSessionsPerPod != DefaultMaxSessionsPerPod {
			t.Errorf("rollout, max_sessions_per_pod of a document written before they existed = %q, %d, want %q, %d",
				got.Pool.Rollout, got.Pool.MaxSessionsPerPod, DefaultRollout, DefaultMaxSessionsPerPod)
		}
	})
	t.Run("newer document", func(t *testing.T) {
		got, err := LoadScopeConfig([]byte(`{"deploy":{"image":"agent:1","gpu":"1"},"pool":{"spare_ttl_s":60}}`))
		if err != nil {
			t.Fatalf("a field of a newer version: %v", err)
		}
		if got.Deploy.Image != "agent:1" {
			t.Errorf("image = %q, want agent:1", got.Deploy.Image)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		_, err := LoadScopeConfig([]byte(`{"deploy":{"port":0}}`))
		wantValidation(t, err, "deploy.port")
		_, err = LoadScopeConfig([]byte(`{"deploy":{"port":"80"}}`))
		wantValidation(t, err, "deploy.port")
	})
}

// DefaultScopeConfig hands out copies: a caller that edits its lists or env does not
// change the defaults of the next one.
func TestDefaultScopeConfigIsACopy(t *testing.T) {
	a := DefaultScopeConfig()
	a.Deploy.Env["K"] = "V"
	a.Deploy.Args = append(a.Deploy.Args, "x")
	if b := DefaultScopeConfig(); len(b.Deploy.Env) != 0 || len(b.Deploy.Args) != 0 {
		t.Fatalf("DefaultScopeConfig shares its collections: %+v", b.Deploy)
	}
}

func TestIDs(t *testing.T) {
	for _, tc := range []struct {
		id             string
		scope, session bool
	}{
		{"a", true, true},
		{"0", true, true},
		{"demo", true, true},
		{"tenant-1.agent_x", true, true},
		{"a..b", true, true},
		{strings.Repeat("a", 63), true, true},
		{strings.Repeat("a", 64), false, true},
		{strings.Repeat("a", 128), false, true},
		{strings.Repeat("a", 129), false, false},
		{"", false, false},
		{"-a", false, true},
		{"a-", false, true},
		{".a", false, true},
		{"a_", false, true},
		{"Demo", false, true},
		{"s:1", false, true},
		{"a b", false, false},
		{"a/b", false, false},
		{"a\n", false, false},
		{"\na", false, false},
		{"a\x00", false, false},
		{"é", false, false},
		{"ａ", false, false}, // fullwidth a
		{"{a}", false, false},
		{"a*", false, false},
	} {
		if got := ValidScopeID(tc.id); got != tc.scope {
			t.Errorf("ValidScopeID(%q) = %v, want %v", tc.id, got, tc.scope)
		}
		if got := ValidSessionID(tc.id); got != tc.session {
			t.Errorf("ValidSessionID(%q) = %v, want %v", tc.id, got, tc.session)
		}
		if err := CheckScopeID(tc.id); tc.scope != (err == nil) {
			t.Errorf("CheckScopeID(%q) = %v", tc.id, err)
		} else if err != nil {
			wantValidation(t, err, "scope_id")
		}
		if err := CheckSessionID(tc.id); tc.session != (err == nil) {
			t.Errorf("CheckSessionID(%q) = %v", tc.id, err)
		} else if err != nil {
			wantValidation(t, err, "session_id")
		}
	}
}

// configsEqual compares by canonical JSON, so that it does not matter whether two
// equal configs share their maps.
func configsEqual(a, b ScopeConfig) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
