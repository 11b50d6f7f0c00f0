package lua

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Wake delivers a scope's capacity-freed messages to the waiters of this replica, over
// one pub/sub channel per scope (sharded pub/sub on a Redis Cluster). It holds one
// subscription per scope that has local waiters, opened with the first waiter and
// closed with the last. A lost message only delays a waiter until its next periodic
// re-check.
type Wake struct {
	store *Store

	mu     sync.Mutex
	scopes map[string]*scopeSub
	wg     sync.WaitGroup
}

type scopeSub struct {
	ps      *redis.PubSub
	waiters map[chan struct{}]struct{}
}

// NewWake returns the wake-up hub of this replica; Close it when done.
func (s *Store) NewWake() *Wake {
	return &Wake{store: s, scopes: map[string]*scopeSub{}}
}

func (w *Wake) cluster() bool {
	_, ok := w.store.rdb.(*redis.ClusterClient)
	return ok
}

// Subscribe registers a waiter of scope; its channel gets a (coalesced) signal on each
// wake-up. The returned function unregisters it. Subscribe before joining the queue,
// so that no wake-up in between is missed.
func (w *Wake) Subscribe(ctx context.Context, scope string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	sub := w.scopes[scope]
	if sub == nil {
		channel := w.store.keys.WakeChannel(scope)
		var ps *redis.PubSub
		if w.cluster() {
			ps = w.store.rdb.SSubscribe(context.WithoutCancel(ctx), channel)
		} else {
			ps = w.store.rdb.Subscribe(context.WithoutCancel(ctx), channel)
		}
		sub = &scopeSub{ps: ps, waiters: map[chan struct{}]struct{}{}}
		w.scopes[scope] = sub
		w.wg.Add(1)
		go w.deliver(sub)
	}
	sub.waiters[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(sub.waiters, ch)
		if len(sub.waiters) == 0 && w.scopes[scope] == sub {
			delete(w.scopes, scope)
			_ = sub.ps.Close()
		}
	}
}

func (w *Wake) deliver(sub *scopeSub) {
	defer w.wg.Done()
	for range sub.ps.Channel() {
		w.mu.Lock()
		for ch := range sub.waiters {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		w.mu.Unlock()
	}
}

// Publish tells every replica's waiters of scope that capacity was freed.
// Errors: STORE_UNAVAILABLE.
func (w *Wake) Publish(ctx context.Context, scope string) error {
	channel := w.store.keys.WakeChannel(scope)
	var err error
	if w.cluster() {
		err = w.store.rdb.SPublish(ctx, channel, "1").Err()
	} else {
		err = w.store.rdb.Publish(ctx, channel, "1").Err()
	}
	if err != nil {
		return w.store.redisErr(ctx, err)
	}
	return nil
}

// Close ends every subscription and waits for the delivery goroutines.
func (w *Wake) Close() {
	w.mu.Lock()
	for scope, sub := range w.scopes {
		_ = sub.ps.Close()
		delete(w.scopes, scope)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
