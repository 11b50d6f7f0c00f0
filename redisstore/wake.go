package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Broadcast is the wake-up message for every waiter of a scope (Wake.Publish); any other
// message names the waiter a script handed a slot to, or (DeployWaiter) the followers
// of a deploy that ended.
const Broadcast = "*"

// DeployWaiter is the waiter name the followers of a deploy subscribe under:
// pod_register.lua and deploy_abort.lua publish it when the deploy's room is settled.
func DeployWaiter(deploy string) string { return "deploy:" + deploy }

// subscribeWait bounds how long Subscribe waits for Redis to confirm a new subscription.
const subscribeWait = 2 * time.Second

// Wake delivers a scope's wake-up messages to the waiters of this replica, over one
// pub/sub channel per scope (sharded pub/sub on a Redis Cluster). A message names the
// waiter a script handed a slot to, and only that waiter is woken; Broadcast wakes them
// all. It holds one subscription per scope that has local waiters, opened with the first
// waiter and closed with the last. A lost message only delays a waiter until its next
// periodic re-check.
type Wake struct {
	store *Store

	mu     sync.Mutex
	scopes map[string]*scopeSub
	wg     sync.WaitGroup
}

type scopeSub struct {
	ps *redis.PubSub
	// ready is closed once Redis confirmed the subscription (or gave up on it).
	ready chan struct{}
	// waiters are the channels of each waiter name: one for a queued session, one per
	// follower of a deploy for a DeployWaiter.
	waiters map[string]map[chan struct{}]bool
}

// NewWake returns the wake-up hub of this replica; Close it when done.
func (s *Store) NewWake() *Wake {
	return &Wake{store: s, scopes: map[string]*scopeSub{}}
}

// Subscribe registers waiter of scope; its channel gets a (coalesced) signal when a
// message names it or is a Broadcast. It returns once the subscription is live (or
// after a bounded wait when Redis does not confirm it), so a message published after it
// returns reaches the waiter. The returned function unregisters it.
func (w *Wake) Subscribe(ctx context.Context, scope, waiter string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	sub := w.scopes[scope]
	if sub == nil {
		channel := w.store.keys.WakeChannel(scope)
		var ps *redis.PubSub
		if w.store.cluster() {
			ps = w.store.rdb.SSubscribe(context.WithoutCancel(ctx), channel)
		} else {
			ps = w.store.rdb.Subscribe(context.WithoutCancel(ctx), channel)
		}
		sub = &scopeSub{ps: ps, ready: make(chan struct{}), waiters: map[string]map[chan struct{}]bool{}}
		w.scopes[scope] = sub
		w.wg.Add(1)
		go w.deliver(ctx, sub)
	}
	if sub.waiters[waiter] == nil {
		sub.waiters[waiter] = map[chan struct{}]bool{}
	}
	sub.waiters[waiter][ch] = true
	w.mu.Unlock()
	select {
	case <-sub.ready:
	case <-ctx.Done():
	}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(sub.waiters[waiter], ch)
		if len(sub.waiters[waiter]) == 0 {
			delete(sub.waiters, waiter)
		}
		if len(sub.waiters) == 0 && w.scopes[scope] == sub {
			delete(w.scopes, scope)
			_ = sub.ps.Close()
		}
	}
}

func (w *Wake) deliver(ctx context.Context, sub *scopeSub) {
	defer w.wg.Done()
	// The first answer on a new subscription is its confirmation; a failure leaves the
	// reconnects to the channel below and the waiters to their re-checks.
	confirm, cancel := context.WithTimeout(context.WithoutCancel(ctx), subscribeWait)
	_, _ = sub.ps.Receive(confirm)
	cancel()
	close(sub.ready)
	for msg := range sub.ps.Channel() {
		w.mu.Lock()
		if msg.Payload == Broadcast {
			for _, chans := range sub.waiters {
				signalAll(chans)
			}
		} else {
			signalAll(sub.waiters[msg.Payload])
		}
		w.mu.Unlock()
	}
}

// signalAll wakes every channel of one waiter name.
func signalAll(chans map[chan struct{}]bool) {
	for ch := range chans {
		signal(ch)
	}
}

// signal wakes a waiter; a signal already pending covers this one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Publish wakes every waiter of scope on every replica: capacity may have come back
// that no script handed on (a pod was purged below max_pods, or adopted).
// Errors: STORE_UNAVAILABLE.
func (w *Wake) Publish(ctx context.Context, scope string) error {
	channel := w.store.keys.WakeChannel(scope)
	var err error
	if w.store.cluster() {
		err = w.store.rdb.SPublish(ctx, channel, Broadcast).Err()
	} else {
		err = w.store.rdb.Publish(ctx, channel, Broadcast).Err()
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
