package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// The sandbox records: added, read, their deadline moved, pruned past it, removed;
// scanned by start in both orders from any cursor, ties ordered by id, in pages of any
// size, without one left out or given twice.
func TestSandboxRecords(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	s := redisstore.NewStore(r.Client, r.Prefix)
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	var ids []string
	for i := range 9 {
		// starts t0, t0, t0, t0+1s, t0+1s, ... : three sandboxes a start
		sb := redisstore.Sandbox{ID: fmt.Sprintf("sb%d", i), Scope: "tpl", Started: t0.Add(time.Duration(i/3) * time.Second)}
		if i == 4 {
			sb.Metadata = map[string]string{"user": "ann"}
		}
		if err := s.SandboxAdd(ctx, sb, sb.Started.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	got, ok, err := s.SandboxGet(ctx, "sb4")
	if err != nil || !ok || got.Scope != "tpl" || !got.Started.Equal(t0.Add(time.Second)) || got.Metadata["user"] != "ann" {
		t.Fatalf("get sb4: %+v %v %v", got, ok, err)
	}
	if _, ok, err := s.SandboxGet(ctx, "nobody"); ok || err != nil {
		t.Fatalf("get of no sandbox: %v %v", ok, err)
	}

	scanAll := func(asc bool, n int) []string {
		t.Helper()
		var out []string
		var cur redisstore.SandboxCursor
		for range 20 {
			page, err := s.SandboxScan(ctx, asc, cur, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, sb := range page {
				out = append(out, sb.ID)
			}
			if len(page) < n {
				return out
			}
			last := page[len(page)-1]
			cur = redisstore.SandboxCursor{Started: last.Started, ID: last.ID}
		}
		t.Fatal("scan does not end")
		return nil
	}
	desc := slices.Clone(ids)
	slices.Reverse(desc)
	for _, n := range []int{1, 2, 3, 4, 9, 10} {
		if got := scanAll(true, n); !slices.Equal(got, ids) {
			t.Errorf("ascending in pages of %d: %v, want %v", n, got, ids)
		}
		if got := scanAll(false, n); !slices.Equal(got, desc) {
			t.Errorf("descending in pages of %d: %v, want %v", n, got, desc)
		}
	}

	// sb0 lives on (its deadline moved); the others of the first start are pruned.
	if err := s.SandboxDeadline(ctx, "sb0", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.SandboxDeadline(ctx, "nobody", t0); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SandboxPrune(ctx, t0.Add(time.Minute+time.Millisecond), 100); err != nil || n != 2 {
		t.Fatalf("prune: %d %v, want sb1 and sb2", n, err)
	}
	if err := s.SandboxRemove(ctx, "sb3", "sb8"); err != nil {
		t.Fatal(err)
	}
	if got, want := scanAll(true, 2), []string{"sb0", "sb4", "sb5", "sb6", "sb7"}; !slices.Equal(got, want) {
		t.Fatalf("after prune and remove: %v, want %v", got, want)
	}
	if _, ok, _ := s.SandboxGet(ctx, "sb1"); ok {
		t.Fatal("a pruned record is still there")
	}
	n, err := r.Client.Exists(ctx, s.Keys().SandboxRecords(), s.Keys().SandboxStarts(), s.Keys().SandboxDeadlines()).Result()
	if err != nil || n != 3 {
		t.Fatalf("the three keys: %d %v", n, err)
	}
	if _, err := s.SandboxPrune(ctx, t0.Add(24*time.Hour), 100); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Client.Exists(ctx, s.Keys().SandboxRecords(), s.Keys().SandboxStarts(), s.Keys().SandboxDeadlines()).Result(); n != 0 {
		t.Fatalf("%d keys left after every record was pruned", n)
	}
}
