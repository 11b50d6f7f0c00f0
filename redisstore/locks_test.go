package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
)

func newStore(t *testing.T) (*Store, *testredis.Redis) {
	t.Helper()
	r := testredis.New(t)
	return NewStore(r.Client, r.Prefix), r
}

func TestLocksAreTokenChecked(t *testing.T) {
	s, r := newStore(t)
	ctx := t.Context()
	key := s.Keys().Lock("job")
	a, err := s.Obtain(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("a could not obtain a free lock: %v", err)
	}
	if _, err := s.Obtain(ctx, key, time.Minute); !errors.Is(err, warmpool.ErrNotObtained) {
		t.Fatalf("obtain of a held lock: %v, want ErrNotObtained", err)
	}
	if ok, err := a.extend(ctx); err != nil || !ok {
		t.Fatalf("a could not extend its lock: %v, %v", ok, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("a could not release its lock: %v", err)
	}
	b, err := s.Obtain(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("b could not obtain the released lock: %v", err)
	}
	if ok, err := a.extend(ctx); err != nil || ok {
		t.Fatalf("a extended b's lock: %v, %v", ok, err)
	}
	if err := a.Release(ctx); !errors.Is(err, warmpool.ErrLockNotHeld) {
		t.Fatalf("a released b's lock: %v, want ErrLockNotHeld", err)
	}
	if v, _ := r.Client.Get(ctx, key).Result(); v != b.token {
		t.Fatalf("lock holds %q, want b's token", v)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("b could not release its lock: %v", err)
	}
}

// A lock taken from its holder (its lease ran out and another holder got it)
// cancels the holder's work at the next extension, and the other holder keeps it.
func TestKeepAliveCancelsTheWorkWhenTheLockIsTaken(t *testing.T) {
	s, r := newStore(t)
	ctx := t.Context()
	key := s.Keys().Lock("job")
	l, err := s.Obtain(ctx, key, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	work, stop := l.KeepAlive(ctx)
	if err := r.Client.Set(ctx, key, "thief", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, work, "the lock was taken")
	if !errors.Is(context.Cause(work), warmpool.ErrLockNotHeld) {
		t.Fatalf("cause %v, want ErrLockNotHeld", context.Cause(work))
	}
	if err := stop(); !errors.Is(err, warmpool.ErrLockNotHeld) {
		t.Fatalf("stop = %v, want ErrLockNotHeld", err)
	}
	if err := l.Release(ctx); !errors.Is(err, warmpool.ErrLockNotHeld) {
		t.Fatalf("release of a lost lock = %v, want ErrLockNotHeld", err)
	}
	if v, _ := r.Client.Get(ctx, key).Result(); v != "thief" {
		t.Fatalf("lock now %q: the holder touched another holder's lock", v)
	}
}

// extender is an extend function whose answers the test scripts; it counts its calls
// and signals each one.
type extender struct {
	calls  atomic.Int32
	called chan struct{}
	answer func(call int32) (bool, error)
}

func newExtender(answer func(call int32) (bool, error)) *extender {
	return &extender{called: make(chan struct{}, 64), answer: answer}
}

func (e *extender) extend(context.Context) (bool, error) {
	ok, err := e.answer(e.calls.Add(1))
	select {
	case e.called <- struct{}{}:
	default: // nobody counts any more
	}
	return ok, err
}

// waitCalls waits until the extender was called n times, or fails the test.
func (e *extender) waitCalls(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-e.called:
		case <-time.After(10 * time.Second):
			t.Fatalf("extend called %d times, want %d", i, n)
		}
	}
}

var errSilent = errors.New("redis does not answer")

// waitDone waits for the work context to be cancelled, or fails the test.
func waitDone(t *testing.T, work context.Context, after string) {
	t.Helper()
	select {
	case <-work.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("work not cancelled after %s", after)
	}
}

func TestKeepAlive(t *testing.T) {
	const ttl = 150 * time.Millisecond
	t.Run("extends while held", func(t *testing.T) {
		e := newExtender(func(int32) (bool, error) { return true, nil })
		work, stop := keepAlive(t.Context(), ttl, time.Now, e.extend)
		e.waitCalls(t, 4)
		if work.Err() != nil {
			t.Fatalf("work cancelled while its lease was extended: %v", context.Cause(work))
		}
		if err := stop(); err != nil {
			t.Fatalf("stop = %v", err)
		}
		if work.Err() == nil {
			t.Fatal("stop did not release the work context")
		}
	})
	t.Run("a refused extension is a loss", func(t *testing.T) {
		e := newExtender(func(n int32) (bool, error) { return n < 2, nil })
		work, stop := keepAlive(t.Context(), ttl, time.Now, e.extend)
		waitDone(t, work, "the lease was lost")
		if !errors.Is(context.Cause(work), warmpool.ErrLockNotHeld) || e.calls.Load() != 2 {
			t.Fatalf("cause %v after %d calls, want ErrLockNotHeld after 2", context.Cause(work), e.calls.Load())
		}
		if err := stop(); !errors.Is(err, warmpool.ErrLockNotHeld) {
			t.Fatalf("stop = %v, want ErrLockNotHeld", err)
		}
	})
	t.Run("one failed try is retried", func(t *testing.T) {
		e := newExtender(func(n int32) (bool, error) {
			if n == 1 {
				return false, errSilent
			}
			return true, nil
		})
		// A lease long enough that a loaded machine's late ticks stay within its first
		// half: the try after the failed one comes in time.
		work, stop := keepAlive(t.Context(), 1500*time.Millisecond, time.Now, e.extend)
		e.waitCalls(t, 4)
		if work.Err() != nil {
			t.Fatalf("work cancelled after one failed try: %v", context.Cause(work))
		}
		if err := stop(); err != nil {
			t.Fatalf("stop = %v", err)
		}
	})
	t.Run("a silent Redis is a loss before the lease ends", func(t *testing.T) {
		const long = 3 * time.Second
		e := newExtender(func(int32) (bool, error) { return false, errSilent })
		start := time.Now()
		work, stop := keepAlive(t.Context(), long, time.Now, e.extend)
		waitDone(t, work, "the lease was lost")
		if took := time.Since(start); took >= long {
			t.Fatalf("work cancelled %s after the last extension, not before the %s lease ran out", took, long)
		}
		if err := stop(); !errors.Is(err, warmpool.ErrLockNotHeld) || !errors.Is(err, errSilent) {
			t.Fatalf("stop = %v, want ErrLockNotHeld naming the failure", err)
		}
	})
	t.Run("a lease not extended for a ttl is a loss at stop", func(t *testing.T) {
		// A process stopped past its lease: its ticks have not run when its work ends.
		// The ticker of an hour's lease never fires here; the clock jumps instead.
		const hour = time.Hour
		var jumped atomic.Int64
		now := func() time.Time { return time.Now().Add(time.Duration(jumped.Load())) }
		e := newExtender(func(int32) (bool, error) { return true, nil })
		_, stop := keepAlive(t.Context(), hour, now, e.extend)
		jumped.Store(int64(hour))
		if err := stop(); !errors.Is(err, warmpool.ErrLockNotHeld) || e.calls.Load() != 0 {
			t.Fatalf("stop = %v after %d extensions, want ErrLockNotHeld after none", err, e.calls.Load())
		}
		jumped.Store(0)
		_, stop = keepAlive(t.Context(), hour, now, e.extend)
		jumped.Store(int64(hour / 2))
		if err := stop(); err != nil {
			t.Fatalf("stop = %v half a lease on, want nil", err)
		}
	})
	t.Run("the end of ctx is no loss", func(t *testing.T) {
		e := newExtender(func(int32) (bool, error) { return true, nil })
		ctx, cancel := context.WithCancel(t.Context())
		work, stop := keepAlive(ctx, ttl, time.Now, e.extend)
		cancel()
		waitDone(t, work, "its parent context ended")
		if err := stop(); err != nil {
			t.Fatalf("stop = %v, want nil", err)
		}
	})
}
