package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
)

// FeedWithin bounds how long a change may take to reach a follower in the tests: a
// poll interval of the slowest store, and room for a loaded machine.
const FeedWithin = 10 * time.Second

// FeedLog is what a follower of a store's feed was given, batch by batch.
type FeedLog struct {
	mu      sync.Mutex
	batches [][]warmpool.ConfigChange
	// fail, when set, is asked of each batch before it is taken: an error refuses it.
	fail func([]warmpool.ConfigChange) error
}

// Changes are the changes taken so far, in delivery order.
func (l *FeedLog) Changes() []warmpool.ConfigChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Concat(l.batches...)
}

// Has reports whether the change was taken.
func (l *FeedLog) Has(c warmpool.ConfigChange) bool { return slices.Contains(l.Changes(), c) }

// Last is the last change of the scope taken, and whether there is one.
func (l *FeedLog) Last(scope string) (warmpool.ConfigChange, bool) {
	all := l.Changes()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].ScopeID == scope {
			return all[i], true
		}
	}
	return warmpool.ConfigChange{}, false
}

func (l *FeedLog) take(_ context.Context, batch []warmpool.ConfigChange) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		if err := l.fail(batch); err != nil {
			return err
		}
	}
	l.batches = append(l.batches, slices.Clone(batch))
	return nil
}

// Follow follows s's feed until the test ends, and returns once the feed delivers:
// writer (another instance, or s) writes a scope of its own, feed-ready, until its
// change comes. It skips the test when s has no feed.
func Follow(tb testing.TB, s, writer warmpool.ConfigStore) *FeedLog {
	tb.Helper()
	log := &FeedLog{}
	startFollow(tb, s, log)
	var last time.Time
	await.True(tb, FeedWithin, "the feed delivers a write", func() bool {
		if c, ok := log.Last("feed-ready"); ok && !c.Deleted {
			return true
		}
		if time.Since(last) >= 100*time.Millisecond {
			Put(tb, writer, "feed-ready", Config(tb, `{}`))
			last = time.Now()
		}
		return false
	})
	return log
}

func startFollow(tb testing.TB, s warmpool.ConfigStore, log *FeedLog) {
	tb.Helper()
	feed, ok := s.(warmpool.ConfigFeed)
	if !ok {
		tb.Skipf("%T has no change feed", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- feed.Follow(ctx, log.take) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			tb.Errorf("Follow after its context ended = %v, want context.Canceled", err)
		}
	})
}

// A follower sees the writes of another instance (another replica's connections) and
// its own, each scope's versions in the order they were committed, and a delete as a
// deleted change at the version deleted.
func testFeedSeesWrites(t *testing.T, open Opener) {
	ctx := context.Background()
	s, other := open(t), open(t)
	log := Follow(t, s, other)
	Put(t, other, "x", Config(t, `{}`))
	Put(t, other, "y", Config(t, `{}`))
	Put(t, other, "x", Config(t, `{"pool":{"max_concurrency":4}}`))
	if _, err := other.Delete(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	Put(t, s, "z", Config(t, `{}`))
	want := []warmpool.ConfigChange{{ScopeID: "x", Version: 2}, {ScopeID: "y", Version: 1, Deleted: true}, {ScopeID: "z", Version: 1}}
	await.True(t, FeedWithin, fmt.Sprintf("the feed delivers %+v", want), func() bool {
		for _, w := range want {
			if c, ok := log.Last(w.ScopeID); !ok || c != w {
				return false
			}
		}
		return true
	})
	// Commit order: a scope's changes never go back, and z (written last) comes last.
	seen := map[string]warmpool.ConfigChange{}
	all := log.Changes()
	for _, c := range all {
		if p, ok := seen[c.ScopeID]; ok && (c.Version < p.Version || (c.Version == p.Version && p.Deleted && !c.Deleted)) {
			t.Errorf("change %+v after %+v: out of commit order (%+v)", c, p, all)
		}
		seen[c.ScopeID] = c
	}
	if last := all[len(all)-1]; last != want[2] {
		t.Errorf("last change %+v, want %+v, the last committed (%+v)", last, want[2], all)
	}
}

// A batch the follower fails comes again, and the feed goes on past it.
func testFeedRedeliversFailed(t *testing.T, open Opener) {
	s, other := open(t), open(t)
	log := Follow(t, s, other)
	refused := 0
	log.mu.Lock()
	log.fail = func(batch []warmpool.ConfigChange) error {
		for _, c := range batch {
			if c.ScopeID == "refused" && refused == 0 {
				refused++
				return errors.New("redis down")
			}
		}
		return nil
	}
	log.mu.Unlock()
	Put(t, other, "refused", Config(t, `{}`))
	Put(t, other, "after", Config(t, `{}`))
	await.True(t, FeedWithin, "the refused change comes again, and the next one after it", func() bool {
		return log.Has(warmpool.ConfigChange{ScopeID: "refused", Version: 1}) && log.Has(warmpool.ConfigChange{ScopeID: "after", Version: 1})
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	if refused != 1 {
		t.Errorf("the follower refused %d batches, want 1", refused)
	}
}
