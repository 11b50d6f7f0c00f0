package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// A version is published once: the same version again with the same content is a
// no-op, with other content (another deploy_ver or pool value, as from a replica on
// another config store) it is refused and the published one stays; an older version
// never overwrites a newer one.
func TestScopePublishConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	record := func(version int64, mutate func(*warmpool.ScopeConfig)) redisstore.ScopeRecord {
		cfg := warmpool.DefaultScopeConfig()
		cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = 4, 2
		if mutate != nil {
			mutate(&cfg)
		}
		if err := cfg.Normalize(); err != nil {
			t.Fatal(err)
		}
		return redisstore.ScopeRecord{ScopeID: e.scope, Config: cfg, Version: version, DeployVer: cfg.Deploy.DeployVer()}
	}
	published := func() redisstore.ScopeRecord {
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
		if !errors.Is(err, redisstore.ErrPublishConflict) || warmpool.ErrorCode(err) != warmpool.CodeInternal ||
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

// A deleted scope takes no acquire, and stays deleted against a late publish of its
// version; its deploy in flight is fenced and its follower told; its pods are retired.
// It is forgotten only once no pod is left, keeping its tombstone, and the next version
// makes it live again with the old pod still retired. A delete of an older version
// than the published one leaves the scope live.
func TestScopeDeleteAndForget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	lead := e.acquire("c1")
	pod, _, err := e.register(lead, "c1")
	if err != nil {
		t.Fatal(err)
	}
	inFlight := e.acquire("c2")
	follower := e.acquire("c3")
	if inFlight.Kind != redisstore.AcquireDeploy || follower.Kind != redisstore.AcquireFollower {
		t.Fatalf("acquires: %+v, %+v; want a deploy and its follower", inFlight, follower)
	}

	if _, err := e.store.ScopeDelete(ctx, e.scope, e.version-1, e.now); warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Fatalf("delete of an older version than the published one: %v, want SCOPE_NOT_FOUND", err)
	}
	n, err := e.store.ScopeDelete(ctx, e.scope, e.version, e.now.Add(time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("delete = %d, %v; want 1 pod", n, err)
	}
	if _, err := e.store.Scope(ctx, e.scope); warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Fatalf("Scope of a deleted scope: %v", err)
	}
	if rec, err := e.store.ScopeAny(ctx, e.scope); err != nil || !rec.Deleted {
		t.Fatalf("ScopeAny of a deleted scope: %+v, %v", rec, err)
	}
	_, err = e.store.PodAcquire(ctx, e.scope, redisstore.AcquireArgs{Now: e.now, Claim: "c4", ClaimDeadline: e.now.Add(time.Minute), LeaseDeadline: e.now.Add(time.Minute)})
	if warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Fatalf("acquire on a deleted scope: %v", err)
	}
	if _, _, err := e.register(inFlight, ""); !errors.Is(err, redisstore.ErrFenced) {
		t.Fatalf("register of a deploy in flight at the delete: %v, want ErrFenced", err)
	}
	if snap := e.snap(); !snap.Pods[0].Retired || snap.ClaimPod["c3"] == "" || snap.ClaimPod["c3"][0] != '!' {
		t.Fatalf("after the delete: %+v, want the pod retired and the follower told", snap)
	}
	if _, err := e.store.ScopeDelete(ctx, e.scope, e.version, e.now); warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Fatalf("second delete: %v, want SCOPE_NOT_FOUND", err)
	}
	e.version-- // the same version again, as a sync that read the store before the delete
	e.publish(nil)
	if _, err := e.store.Scope(ctx, e.scope); warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Fatalf("a late publish of the deleted version made the scope live: %v", err)
	}

	if done, err := e.store.ScopeForget(ctx, e.scope); err != nil || done {
		t.Fatalf("forget with a pod left = %v, %v; want kept", done, err)
	}
	if _, err := e.store.PodPurge(ctx, e.scope, pod.ID, "test", nil); err != nil {
		t.Fatal(err)
	}
	if done, err := e.store.ScopeForget(ctx, e.scope); err != nil || !done {
		t.Fatalf("forget with nothing left = %v, %v; want forgotten", done, err)
	}
	if ids, err := e.store.ScopeIDs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("index after forget: %v, %v", ids, err)
	}
	// A late publish of the deleted version, which indexes the scope before its
	// script refuses it, takes the entry out again.
	e.version--
	e.publish(nil)
	if ids, err := e.store.ScopeIDs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("index after a late publish of the forgotten scope: %v, %v", ids, err)
	}

	e.publish(nil)
	if rec, err := e.store.Scope(ctx, e.scope); err != nil || rec.Version != e.version {
		t.Fatalf("the next version: %+v, %v; want live at v%d", rec, err, e.version)
	}
	if ids, err := e.store.ScopeIDs(ctx); err != nil || len(ids) != 1 {
		t.Fatalf("index after the next version: %v, %v", ids, err)
	}
	if done, err := e.store.ScopeForget(ctx, e.scope); err != nil || done {
		t.Fatalf("forget of a live scope = %v, %v; want kept", done, err)
	}
}

// ProbePeriods reads the published probe_period_s of each scope asked for: from the
// plain field the publish writes, or, for a scope published without it (by an older
// release), from its config document; a scope not published is left out.
func TestProbePeriods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.ProbePeriodS = 3 })
	ctx := context.Background()
	e.scope = "old"
	e.publish(func(c *warmpool.ScopeConfig) { c.Pool.ProbePeriodS = 7 })
	if err := e.r.Client.HDel(ctx, e.store.Keys().Scope("old").Config, "probe_ms").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.ProbePeriods(ctx, []string{"s1", "old", "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"s1": 3 * time.Second, "old": 7 * time.Second}
	if len(got) != len(want) || got["s1"] != want["s1"] || got["old"] != want["old"] {
		t.Errorf("ProbePeriods = %v, want %v", got, want)
	}
}

// BenchmarkProbePeriod is the watch's read of one scope's probe period, the first
// time it sees a pod of the scope (docs/performance.md, issue 25).
func BenchmarkProbePeriod(b *testing.B) {
	r := testredis.New(b)
	store := redisstore.NewStore(r.Client, r.Prefix)
	ctx := context.Background()
	cfg := warmpool.DefaultScopeConfig()
	if err := cfg.Normalize(); err != nil {
		b.Fatal(err)
	}
	if err := store.ScopePublish(ctx, redisstore.ScopeRecord{ScopeID: "s1", Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
		b.Fatal(err)
	}
	for name, read := range map[string]func() error{
		"probe-periods": func() error { _, err := store.ProbePeriods(ctx, []string{"s1"}); return err },
		"scope-record":  func() error { _, err := store.Scope(ctx, "s1"); return err },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The global index is written before the script, as asynq writes its global sets
// first: a publish whose SADD fails (the Cluster node of wp:scopes down, a lost
// connection) fails before the scope is routable. Before, the script ran first, and a
// scope served but missing from wp:scopes had its pods deleted by the full pass as
// "its scope has no config". The next publish indexes it and serves it.
func TestScopePublishIndexesFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	client := e.r.NewClient(t)
	fail := testredis.FailCommands(1, testredis.Named("sadd", e.store.Keys().Scopes()))
	client.AddHook(fail)
	store := redisstore.NewStore(client, e.r.Prefix)
	cfg := warmpool.DefaultScopeConfig()
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	rec := redisstore.ScopeRecord{ScopeID: "s2", Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}
	if err := store.ScopePublish(ctx, rec); err == nil || fail.Failed() != 1 {
		t.Fatalf("publish whose index write failed: %v (%d failed), want an error", err, fail.Failed())
	}
	if _, err := store.Scope(ctx, "s2"); warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Fatalf("after a publish whose index write failed: %v, want the scope not served", err)
	}
	if err := store.ScopePublish(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Scope(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if ids, err := store.ScopeIDs(ctx); err != nil || !slices.Contains(ids, "s2") {
		t.Fatalf("index %v, %v; want s2 in it", ids, err)
	}
}
