package sweeper_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// unindex takes scope out of the global index, as a lost SADD leaves it (a crash, a
// cancelled PUT, the Cluster node of wp:scopes down).
func (h *harness) unindex(scope string) {
	h.t.Helper()
	if err := h.Redis.Client.SRem(context.Background(), h.Store.Keys().Scopes(), scope).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// indexed reports whether scope is in the global index.
func (h *harness) indexed(scope string) bool { return slices.Contains(h.scopeIDs(), scope) }

// A served scope that the global index lacks keeps its pods and their sessions through
// the full pass, which indexes it again: "its scope has no config" is judged from the
// scope's config hash, never from wp:scopes. Before, the pass deleted every pod of the
// scope past its orphan grace, live sessions included. Both a scope of the config store
// (Redis serves its stored version, so nothing is published again) and one only Redis
// serves. A stored scope without pods is indexed again too, from the config store.
func TestAuditKeepsTheScopeTheIndexLost(t *testing.T) {
	long := func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS, c.Pool.PodTTLS = 3600, 3600 }
	for _, stored := range []bool{true, false} {
		name := map[bool]string{true: "stored", false: "only in Redis"}[stored]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			fixes := 1
			if stored {
				h.Scope("a", 2, 1, long)
				h.Scope("empty", 2, 1)
				h.unindex("empty")
				fixes++
			} else {
				cfg := replicatest.ScopeConfig(t, 2, 1, long)
				if err := h.Store.ScopePublish(t.Context(), redisstore.ScopeRecord{ScopeID: "a", Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
					t.Fatal(err)
				}
			}
			pod := h.route("a", "s1").PodID
			h.unindex("a")
			// Past the orphan grace of the pod (created on the wall clock).
			h.Clock.Advance(time.Since(h.Clock.Now()) + sweeper.DefaultOrphanGrace + time.Second)
			h.reconcile()
			if h.deleted(pod) || h.Snap("a").Sessions["s1"] != pod {
				t.Fatalf("the pass deleted %v, sessions %v: the pod of a served scope the index lacked", h.Fake.Deleted(), h.Snap("a").Sessions)
			}
			if !h.indexed("a") || (stored && !h.indexed("empty")) || h.observedCount("indexed_scope") != fixes {
				t.Fatalf("index %v, %d indexed_scope fixes; want every served scope indexed again, %d fixes", h.scopeIDs(), h.observedCount("indexed_scope"), fixes)
			}
			h.reconcileIsNoop("a")
			if b := h.route("a", "s1"); b.PodID != pod {
				t.Fatalf("the session moved to %s", b.PodID)
			}
		})
	}
}

// The config store's feed indexes a scope it finds served and missing from the index
// (its publish's SADD was lost), at once and not at the next full pass.
func TestFeedIndexesAServedScope(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.follow()
	cfg := replicatest.ScopeConfig(t, 2, 1)
	// Redis serves v1 and lost its index entry before the feed brings the change.
	if err := h.Store.ScopePublish(ctx, redisstore.ScopeRecord{ScopeID: "a", Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
		t.Fatal(err)
	}
	h.unindex("a")
	if stored, err := h.Configs.Put(ctx, "a", cfg); err != nil || stored.Version != 1 {
		t.Fatalf("put: v%d, %v; want v1", stored.Version, err)
	}
	await.True(t, feedWithin, "the feed indexes the scope", func() bool { return h.indexed("a") })
}

// An index entry without a config (a publish that failed after its index write, which
// comes first) leaves the index at the full pass, and the pods of its scope are
// deleted past their orphan grace like those of any scope without config: the index
// says neither that a scope is served nor that it is not.
func TestAuditDropsAnIndexEntryWithoutConfig(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	if err := h.Redis.Client.SAdd(ctx, h.Store.Keys().Scopes(), "nocfg").Err(); err != nil {
		t.Fatal(err)
	}
	h.Scope("a", 2, 1)
	pod := h.externalPod("a", "nocfg-1", 1)
	pod.ScopeID = "nocfg"
	h.Fake.AddExternal(pod)
	h.Clock.Advance(time.Since(h.Clock.Now()) + sweeper.DefaultOrphanGrace + time.Second)
	h.reconcile()
	if h.indexed("nocfg") || h.observedCount("unindexed_scope") != 1 {
		t.Fatalf("index %v, %d unindexed_scope fixes; want the entry gone, once", h.scopeIDs(), h.observedCount("unindexed_scope"))
	}
	if !h.deleted(pod.ID) {
		t.Fatalf("the pod of a scope without config was not deleted (deleted %v)", h.Fake.Deleted())
	}
	h.reconcileIsNoop("a")
}
