package invariant

import (
	"context"
	"sync"

	"github.com/warmpool/warmpool/redisstore"
)

// Watcher checks scopes on consistent snapshots over and over while a concurrency test
// runs, so a violation that exists only for a moment is seen too.
type Watcher struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	found  []string
	checks int
}

// Watch starts checking every scope with check (which returns the violations of one
// snapshot) until Stop.
func Watch(store *redisstore.Store, check func(scope string, s redisstore.Snapshot) []string, scopes ...string) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			for _, scope := range scopes {
				s, err := store.Snapshot(ctx, scope)
				if ctx.Err() != nil {
					return
				}
				w.mu.Lock()
				if err != nil {
					w.found = append(w.found, err.Error())
				} else {
					w.found = append(w.found, check(scope, s)...)
					w.checks++
				}
				w.mu.Unlock()
				if err != nil {
					return
				}
			}
		}
	}()
	return w
}

// Stop ends the watch and returns every violation seen and how many snapshots were
// checked.
func (w *Watcher) Stop() (violations []string, checks int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.found, w.checks
}
