package lua_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/lua"
)

// A version is published once: the same version again with the same content is a
// no-op, with other content (another deploy_ver or pool value, as from a replica on
// another config store) it is refused and the published one stays; an older version
// never overwrites a newer one.
func TestScopePublishConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	record := func(version int64, mutate func(*warmpool.ScopeConfig)) lua.ScopeRecord {
		cfg := warmpool.DefaultScopeConfig()
		cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = 4, 2
		if mutate != nil {
			mutate(&cfg)
		}
		if err := cfg.Normalize(); err != nil {
			t.Fatal(err)
		}
		return lua.ScopeRecord{ScopeID: e.scope, Config: cfg, Version: version, DeployVer: cfg.Deploy.DeployVer()}
	}
	published := func() lua.ScopeRecord {
		rec, err := e.store.Scope(ctx, e.scope)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	v1 := record(1, nil)
	if err := e.store.ScopePublish(ctx, v1); err != nil {
		t.Fatalf("the same version with the same content: %v", err)
	}
	for name, mutate := range map[string]func(*warmpool.ScopeConfig){
		"deploy_ver":      func(c *warmpool.ScopeConfig) { c.Deploy.Image = "registry.example/other:2" },
		"max_pods":        func(c *warmpool.ScopeConfig) { c.Pool.MaxConcurrency = 8 },
		"session_ttl_ms":  func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 77 },
		"pod_concurrency": func(c *warmpool.ScopeConfig) { c.Pool.PodConcurrency, c.Pool.MaxConcurrency = 1, 2 },
	} {
		err := e.store.ScopePublish(ctx, record(1, mutate))
		if !errors.Is(err, lua.ErrPublishConflict) || warmpool.ErrorCode(err) != warmpool.CodeInternal ||
			!strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "config store") {
			t.Fatalf("v1 with another %s: %v, want ErrPublishConflict naming the field", name, err)
		}
		if got := published(); got.DeployVer != v1.DeployVer || got.Config.Pool != v1.Config.Pool {
			t.Fatalf("after a refused v1 with another %s: %+v published, want the first v1", name, got)
		}
	}

	v2 := record(2, func(c *warmpool.ScopeConfig) { c.Deploy.Image = "registry.example/other:2" })
	if err := e.store.ScopePublish(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ScopePublish(ctx, record(1, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize = 9 })); err != nil {
		t.Fatalf("an older version after a newer one: %v, want it ignored", err)
	}
	if got := published(); got.Version != 2 || got.DeployVer != v2.DeployVer {
		t.Fatalf("published %+v, want v2", got)
	}

	// A field the published hash lacks (written by an older release) is not compared.
	k := e.store.Keys().Scope(e.scope)
	if err := e.r.Client.HDel(ctx, k.Config, "min_idle").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ScopePublish(ctx, record(2, func(c *warmpool.ScopeConfig) {
		c.Deploy.Image = "registry.example/other:2"
		c.Pool.MinIdlePods = 1
	})); err != nil {
		t.Fatalf("v2 again where the published hash lacks min_idle: %v", err)
	}
}
