package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/warmpool/warmpool"
)

// Deletes and Puts of one scope through two instances at once: each Put is a new
// version, every Delete that succeeds deleted the latest version at its time, and the
// scope ends live exactly when the last write was a Put.
func testDeleteRacesPut(t *testing.T, open Opener) {
	ctx := context.Background()
	a, b := open(t), open(t)
	Put(t, a, "scope", Config(t, `{}`))
	const n = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	var deleted []int64
	for i := range n {
		wg.Go(func() {
			st := a
			if i%2 == 1 {
				st = b
			}
			if _, err := st.Put(ctx, "scope", Config(t, `{}`)); err != nil {
				t.Error(err)
			}
			sc, err := st.Delete(ctx, "scope")
			if err != nil && warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
				t.Error(err)
			}
			if err == nil {
				mu.Lock()
				deleted = append(deleted, sc.Version)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	hist := Versions(t, a, "scope")
	if len(hist) != n+1 {
		t.Fatalf("History has %d versions, want %d", len(hist), n+1)
	}
	if len(deleted) == 0 || slices.Contains(deleted, 0) {
		t.Fatalf("deletes returned %v: want at least one, each a version", deleted)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(deleted)))) != len(deleted) {
		t.Errorf("one version deleted twice: %v", deleted)
	}
	// Every goroutine deleted after its own Put, so the last write was a delete.
	if _, err := a.Get(ctx, "scope"); warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Errorf("after the race Get = %v, want SCOPE_NOT_FOUND", err)
	}
}

// A config PUT on one replica is what every other replica reads next: no cache
// between a store and its database.
func testOtherInstanceSees(t *testing.T, open Opener) {
	ctx := context.Background()
	a, b := open(t), open(t)
	for i := range 3 {
		cfg := Config(t, fmt.Sprintf(`{"deploy":{"image":"agent:%d"}}`, i))
		put := Put(t, a, "scope", cfg)
		got, err := b.Get(ctx, "scope")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, put) {
			t.Fatalf("other instance's Get = %+v, want %+v", got, put)
		}
		list, err := b.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || !reflect.DeepEqual(list[0], put) {
			t.Fatalf("other instance's List = %+v, want [%+v]", list, put)
		}
	}
}

// Two replicas: two instances (two connection pools, so the database decides, as
// between processes) writing one scope from many goroutines at once. Every Put must
// succeed and the versions must be exactly 1..N, each holding the config of the Put
// that was told that version: no update lost, none numbered twice.
func testConcurrentWriters(t *testing.T, open Opener) {
	stores := []warmpool.ConfigStore{open(t), open(t)}
	const goroutines, perGoroutine = 8, 15
	const n = goroutines * perGoroutine

	var (
		mu      sync.Mutex
		wrote   = map[int64]warmpool.ScopeConfig{}
		wg      sync.WaitGroup
		errs    = make(chan error, n)
		ctx     = context.Background()
		baseCfg = Config(t, `{"pool":{"max_concurrency":100000,"pod_concurrency":1}}`)
		start   = make(chan struct{})
	)
	for g := range goroutines {
		wg.Go(func() {
			s := stores[g%len(stores)]
			<-start
			for i := range perGoroutine {
				cfg := baseCfg
				cfg.Pool.QueueSize = g*perGoroutine + i // tells the writes apart
				sc, err := s.Put(ctx, "shared", cfg)
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				if _, dup := wrote[sc.Version]; dup {
					errs <- fmt.Errorf("version %d handed out twice", sc.Version)
				}
				wrote[sc.Version] = cfg
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	hist := Versions(t, stores[1], "shared")
	if len(hist) != n {
		t.Fatalf("history has %d versions, want %d", len(hist), n)
	}
	for i, sc := range hist {
		if sc.Version != int64(i+1) {
			t.Fatalf("history[%d] is version %d: gap or duplicate", i, sc.Version)
		}
		if !reflect.DeepEqual(sc.Config, wrote[sc.Version]) {
			t.Errorf("version %d holds queue_size %d, but its Put wrote %d", sc.Version, sc.Config.Pool.QueueSize, wrote[sc.Version].Pool.QueueSize)
		}
	}
	latest, err := stores[0].Get(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if latest.Version != n {
		t.Errorf("Get after the writers: version %d, want %d", latest.Version, n)
	}
}

func testClosedStore(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	Put(t, s, "scope", Config(t, `{}`))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Put(ctx, "scope", Config(t, `{}`))
	WantCode(t, err, warmpool.CodeStoreUnavailable)
	_, err = s.Get(ctx, "scope")
	WantCode(t, err, warmpool.CodeStoreUnavailable)
	if !strings.Contains(err.Error(), "closed") {
		t.Errorf("error %q hides its cause", err)
	}
	_, err = s.List(ctx)
	WantCode(t, err, warmpool.CodeStoreUnavailable)
	_, err = s.History(ctx, "scope", warmpool.HistoryQuery{Limit: 1})
	WantCode(t, err, warmpool.CodeStoreUnavailable)
	_, err = s.Delete(ctx, "scope")
	WantCode(t, err, warmpool.CodeStoreUnavailable)
}

// A caller that gave up is not an outage: its cancellation comes back as ctx.Err(),
// not as STORE_UNAVAILABLE.
func testCancelledContext(t *testing.T, open Opener) {
	s := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"put":     func() error { _, err := s.Put(ctx, "scope", Config(t, `{}`)); return err },
		"get":     func() error { _, err := s.Get(ctx, "scope"); return err },
		"list":    func() error { _, err := s.List(ctx); return err },
		"history": func() error { _, err := s.History(ctx, "scope", warmpool.HistoryQuery{Limit: 1}); return err },
		"delete":  func() error { _, err := s.Delete(ctx, "scope"); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error %v is not context.Canceled", err)
			}
			if code := warmpool.ErrorCode(err); code == warmpool.CodeStoreUnavailable {
				t.Errorf("a cancelled caller reported as %s", code)
			}
		})
	}
}
