package sm

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// wakeHub delivers a scope's capacity-freed messages to the waiters of this replica.
// It holds one subscription per scope that has local waiters (sharded pub/sub on a
// Redis Cluster), opened with the first waiter and closed with the last. A lost message
// only delays a waiter until its next periodic re-check.
type wakeHub struct {
	rdb     redis.UniversalClient
	channel func(scope string) string

	mu     sync.Mutex
	scopes map[string]*scopeSub
	wg     sync.WaitGroup
}

type scopeSub struct {
	ps      *redis.PubSub
	waiters map[chan struct{}]struct{}
}

func newWakeHub(rdb redis.UniversalClient, channel func(string) string) *wakeHub {
	return &wakeHub{rdb: rdb, channel: channel, scopes: map[string]*scopeSub{}}
}

func (h *wakeHub) cluster() bool {
	_, ok := h.rdb.(*redis.ClusterClient)
	return ok
}

// subscribe registers a waiter of scope; its channel gets a (coalesced) signal on each
// wake-up. The returned function unregisters it.
func (h *wakeHub) subscribe(ctx context.Context, scope string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	sub := h.scopes[scope]
	if sub == nil {
		var ps *redis.PubSub
		if h.cluster() {
			ps = h.rdb.SSubscribe(context.WithoutCancel(ctx), h.channel(scope))
		} else {
			ps = h.rdb.Subscribe(context.WithoutCancel(ctx), h.channel(scope))
		}
		sub = &scopeSub{ps: ps, waiters: map[chan struct{}]struct{}{}}
		h.scopes[scope] = sub
		h.wg.Add(1)
		go h.deliver(scope, sub)
	}
	sub.waiters[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(sub.waiters, ch)
		if len(sub.waiters) == 0 && h.scopes[scope] == sub {
			delete(h.scopes, scope)
			_ = sub.ps.Close()
		}
	}
}

func (h *wakeHub) deliver(scope string, sub *scopeSub) {
	defer h.wg.Done()
	for range sub.ps.Channel() {
		h.mu.Lock()
		for ch := range sub.waiters {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		h.mu.Unlock()
	}
}

// publish tells every replica's waiters of scope that capacity was freed.
func (h *wakeHub) publish(ctx context.Context, scope string) error {
	if h.cluster() {
		return h.rdb.SPublish(ctx, h.channel(scope), "1").Err()
	}
	return h.rdb.Publish(ctx, h.channel(scope), "1").Err()
}

// close ends every subscription and waits for the delivery goroutines.
func (h *wakeHub) close() {
	h.mu.Lock()
	for scope, sub := range h.scopes {
		_ = sub.ps.Close()
		delete(h.scopes, scope)
	}
	h.mu.Unlock()
	h.wg.Wait()
}
