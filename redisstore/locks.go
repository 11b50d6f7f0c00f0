package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
)

// Lock is a lease lock: a key holding a random token for a short lease, extended by
// its holder while its work runs (KeepAlive) and released with a token check, so only
// its holder ever extends or releases it (SPEC §6.10). A crashed holder blocks the
// work for one lease at most.
type Lock struct {
	store *Store
	key   string
	token string
	ttl   time.Duration
}

// Obtain takes the lock key for ttl under a new token, with lock_obtain.lua.
// Errors: warmpool.ErrNotObtained when another holder has it, STORE_UNAVAILABLE.
func (s *Store) Obtain(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	l := &Lock{store: s, key: key, token: warmpool.NewID(), ttl: ttl}
	r, err := s.call(ctx, lockObtain, ScopeKeys{}, []string{key}, l.token, ttl.Milliseconds())
	if err != nil {
		return nil, err
	}
	ok := r.flag(0)
	if err := r.err(); err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("lock %s: %w", key, warmpool.ErrNotObtained)
	}
	return l, nil
}

// Held reports whether anyone holds the lock key. Errors: STORE_UNAVAILABLE.
func (s *Store) Held(ctx context.Context, key string) (bool, error) {
	n, err := s.rdb.Exists(ctx, key).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	return n == 1, nil
}

// extend runs lock_extend.lua; false means the lock is no longer the holder's.
func (l *Lock) extend(ctx context.Context) (bool, error) {
	r, err := l.store.call(ctx, lockExtend, ScopeKeys{}, []string{l.key}, l.token, l.ttl.Milliseconds())
	if err != nil {
		return false, err
	}
	ok := r.flag(0)
	return ok, r.err()
}

// KeepAlive extends the lock every ttl/3 while its work runs. The returned context,
// derived from ctx, is cancelled with cause warmpool.ErrLockNotHeld when the lock is
// lost, and the work must then commit nothing more. stop ends the extensions (call it
// when the work is done, before Release) and returns the loss, if any.
func (l *Lock) KeepAlive(ctx context.Context) (context.Context, func() error) {
	return keepAlive(ctx, l.ttl, time.Now, l.extend)
}

// Release gives the lock up with lock_release.lua. Errors: warmpool.ErrLockNotHeld
// when it is no longer the holder's (expired, or taken by another), STORE_UNAVAILABLE.
func (l *Lock) Release(ctx context.Context) error {
	r, err := l.store.call(ctx, lockRelease, ScopeKeys{}, []string{l.key}, l.token)
	if err != nil {
		return err
	}
	ok := r.flag(0)
	if err := r.err(); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("lock %s: %w", l.key, warmpool.ErrLockNotHeld)
	}
	return nil
}

// keepAlive is the one lease keep-alive, for locks and deploy leases alike: it calls
// extend every ttl/3, from now (the lease was just obtained or extended) until stop is
// called or ctx ends. The returned context is cancelled with cause
// warmpool.ErrLockNotHeld when the lease is lost:
//   - extend answers false: the lease is someone else's, or expired;
//   - extend keeps failing (Redis silent) from half the lease on: the next try comes
//     ttl/3 later and may find the lease run out, so the work stops before anyone else
//     can hold it.
//
// Each try is bounded by ttl/6, so a hung call cannot outlast the lease. stop returns
// the loss, if any, and releases the context. A lease last extended a ttl or more ago
// is a loss too, though no try said so: a process stopped (SIGSTOP, a VM paused) past
// its lease may resume with its ticks not yet run, and its work may end first. now is
// the clock of that judgement (time.Now; a test's own).
func keepAlive(ctx context.Context, ttl time.Duration, now func() time.Time, extend func(context.Context) (bool, error)) (context.Context, func() error) {
	kctx, cancel := context.WithCancelCause(ctx)
	every := ttl / 3
	quit, done := make(chan struct{}), make(chan struct{})
	var lost error
	held := now() // the lease runs at least until held + ttl
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-kctx.Done():
				return
			case <-t.C:
			}
			sent := now()
			tctx, tcancel := context.WithTimeout(kctx, every/2)
			ok, err := extend(tctx)
			tcancel()
			switch {
			case err == nil && ok:
				held = sent
				continue
			case err == nil:
				lost = warmpool.ErrLockNotHeld
			case kctx.Err() != nil:
				return // ctx ended while extending: not a loss
			case now().Sub(held) < ttl/2:
				continue
			default:
				lost = fmt.Errorf("%w: not extended for %s: %w", warmpool.ErrLockNotHeld, now().Sub(held).Round(time.Millisecond), err)
			}
			cancel(lost)
			return
		}
	}()
	return kctx, func() error {
		close(quit)
		<-done
		if since := now().Sub(held); lost == nil && since >= ttl {
			lost = fmt.Errorf("%w: not extended for %s", warmpool.ErrLockNotHeld, since.Round(time.Millisecond))
		}
		cancel(nil)
		return lost
	}
}
