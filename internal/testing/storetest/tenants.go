package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
)

// The tenant checks of the contract suite (Run).
var tenantTests = []struct {
	name string
	test func(*testing.T, Opener)
}{
	{"TenantRoundTrip", testTenantRoundTrip},
	{"TenantListPages", testTenantListPages},
	{"TenantDeleteKeepsVersions", testTenantDelete},
	{"TenantConcurrentWriters", testTenantConcurrentWriters},
	{"FeedSeesTenantWrites", testFeedSeesTenantWrites},
}

func quota(n int64) *int64 { return &n }

func quantity(q string) *string { return &q }

// PutTenant stores cfg and fails the test on an error.
func PutTenant(tb testing.TB, s warmpool.ConfigStore, tenant string, cfg warmpool.TenantConfig) warmpool.StoredTenant {
	tb.Helper()
	st, err := s.PutTenant(context.Background(), tenant, cfg)
	if err != nil {
		tb.Fatalf("PutTenant(%q): %v", tenant, err)
	}
	return st
}

func testTenantRoundTrip(t *testing.T, open Opener) {
	ctx := context.Background()
	s, other := open(t), open(t)
	before := time.Now().Add(-time.Second)
	cfg := warmpool.TenantConfig{MaxPods: quota(10), MaxCPU: quantity("1500m"), MaxMemory: quantity("8Gi"), MaxSessions: quota(0), Weight: 3}
	put := PutTenant(t, s, "acme", cfg)
	if put.TenantID != "acme" || put.Version != 1 || put.UpdatedAt.Before(before) || put.UpdatedAt.After(time.Now()) {
		t.Fatalf("PutTenant = %+v, want tenant acme at version 1, written now", put)
	}
	got, err := other.GetTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, put) {
		t.Errorf("GetTenant from another instance = %+v, want %+v", got, put)
	}
	if got.Config.MaxIdlePods != nil {
		t.Errorf("max_idle_pods read back as %d, want no limit (nil)", *got.Config.MaxIdlePods)
	}
	second := PutTenant(t, other, "acme", warmpool.TenantConfig{Weight: 1})
	if second.Version != 2 {
		t.Errorf("second PutTenant at version %d, want 2", second.Version)
	}
	if _, err := s.GetTenant(ctx, "nobody"); !errors.Is(err, warmpool.ErrNoTenantConfig) {
		t.Errorf("GetTenant of a tenant never put = %v, want ErrNoTenantConfig", err)
	}
	if _, err := s.PutTenant(ctx, "Bad Id", cfg); warmpool.ErrorCode(err) != warmpool.CodeValidation {
		t.Errorf("PutTenant of a bad id = %v, want VALIDATION", err)
	}
}

func testTenantListPages(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	if page, err := s.ListTenants(ctx, "", 10); err != nil || page == nil || len(page) != 0 {
		t.Fatalf("ListTenants of an empty store = %v, %v; want an empty, non-nil page", page, err)
	}
	for _, id := range []string{"c", "a", "e", "b", "d"} {
		PutTenant(t, s, id, warmpool.TenantConfig{Weight: 1})
	}
	PutTenant(t, s, "b", warmpool.TenantConfig{Weight: 7})
	if _, err := s.DeleteTenant(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	after := ""
	for range 5 {
		page, err := s.ListTenants(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			ids = append(ids, p.TenantID)
			if p.TenantID == "b" && (p.Version != 2 || p.Config.Weight != 7) {
				t.Errorf("b listed at version %d weight %d, want its latest (2, 7)", p.Version, p.Config.Weight)
			}
		}
		after = page[len(page)-1].TenantID
	}
	if want := []string{"a", "b", "c", "e"}; !slices.Equal(ids, want) {
		t.Errorf("pages of 2 list %v, want %v (in id order, the deleted one left out)", ids, want)
	}
}

func testTenantDelete(t *testing.T, open Opener) {
	ctx := context.Background()
	s, other := open(t), open(t)
	PutTenant(t, s, "gone", warmpool.TenantConfig{MaxPods: quota(1), Weight: 1})
	v, err := other.DeleteTenant(ctx, "gone")
	if err != nil || v != 2 {
		t.Fatalf("DeleteTenant = %d, %v; want version 2", v, err)
	}
	if _, err := s.GetTenant(ctx, "gone"); !errors.Is(err, warmpool.ErrNoTenantConfig) {
		t.Errorf("GetTenant after the delete = %v, want ErrNoTenantConfig", err)
	}
	if _, err := s.DeleteTenant(ctx, "gone"); !errors.Is(err, warmpool.ErrNoTenantConfig) {
		t.Errorf("a second DeleteTenant = %v, want ErrNoTenantConfig", err)
	}
	if _, err := s.DeleteTenant(ctx, "never"); !errors.Is(err, warmpool.ErrNoTenantConfig) {
		t.Errorf("DeleteTenant of a tenant never put = %v, want ErrNoTenantConfig", err)
	}
	if again := PutTenant(t, other, "gone", warmpool.TenantConfig{Weight: 2}); again.Version != 3 {
		t.Errorf("a put after the delete is version %d, want 3 (the versions go on)", again.Version)
	}
}

// Writers of one tenant on two instances: every write gets a version of its own, and
// the latest is the last one.
func testTenantConcurrentWriters(t *testing.T, open Opener) {
	stores := []warmpool.ConfigStore{open(t), open(t)}
	const goroutines, perGoroutine = 6, 10
	var (
		mu    sync.Mutex
		wrote = map[int64]int64{}
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range perGoroutine {
				pods := int64(g*perGoroutine + i)
				st, err := stores[g%2].PutTenant(context.Background(), "shared", warmpool.TenantConfig{MaxPods: &pods, Weight: 1})
				if err != nil {
					t.Error(err)
					continue
				}
				mu.Lock()
				if _, dup := wrote[st.Version]; dup {
					t.Errorf("version %d handed out twice", st.Version)
				}
				wrote[st.Version] = pods
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	const n = goroutines * perGoroutine
	latest, err := stores[1].GetTenant(context.Background(), "shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(wrote) != n || latest.Version != n || *latest.Config.MaxPods != wrote[n] {
		t.Errorf("%d versions written, latest %d with max_pods %d; want %d versions, the latest holding %d", len(wrote), latest.Version, *latest.Config.MaxPods, n, wrote[n])
	}
}

// The feed tells of tenant writes in the one sequence of the scope writes: a put and
// a delete of a tenant come as its changes, and a scope written after them after.
func testFeedSeesTenantWrites(t *testing.T, open Opener) {
	ctx := context.Background()
	s, other := open(t), open(t)
	log := Follow(t, s, other)
	PutTenant(t, other, "t1", warmpool.TenantConfig{Weight: 1})
	PutTenant(t, other, "t2", warmpool.TenantConfig{Weight: 1})
	if _, err := other.DeleteTenant(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	Put(t, s, "after-tenants", Config(t, `{}`))
	want := []warmpool.ConfigChange{{TenantID: "t1", Version: 1}, {TenantID: "t2", Version: 2, Deleted: true}, {ScopeID: "after-tenants", Version: 1}}
	// t2's put may come before its delete, or not at all (a tenant's latest change is
	// kept); the rest comes in commit order.
	await.True(t, FeedWithin, fmt.Sprintf("the feed delivers %+v, in order", want), func() bool {
		all := slices.DeleteFunc(log.Changes(), func(c warmpool.ConfigChange) bool {
			return c.ScopeID == "feed-ready" || c == warmpool.ConfigChange{TenantID: "t2", Version: 1}
		})
		return slices.Equal(all, want)
	})
}
