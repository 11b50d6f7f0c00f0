package lua

import (
	"context"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
)

// The states of a request id's mark, as IdemClaim finds it.
const (
	// IdemWon: the mark was free and is the caller's now: its request is the first.
	IdemWon = "won"
	// IdemRunning: the first request of the id still runs.
	IdemRunning = "running"
	// IdemDone: the first request of the id answered; the answer is kept.
	IdemDone = "done"
)

// IdemMark is idem_claim.lua's answer: the mark's state and, when it is IdemDone, the
// first request's answer.
type IdemMark struct {
	State  string
	Answer []byte
}

// IdemClaim runs idem_claim.lua: it takes the mark at key for a first request under
// token, for ttl, or reads what an earlier request of the id left there.
// Errors: STORE_UNAVAILABLE.
func (s *Store) IdemClaim(ctx context.Context, key, token string, ttl time.Duration) (IdemMark, error) {
	r, err := s.call(ctx, idemClaim, "", []string{key}, token, ttl.Milliseconds())
	if err != nil {
		return IdemMark{}, err
	}
	m := IdemMark{State: r.oneOf(0, IdemWon, IdemRunning, IdemDone)}
	if m.State == IdemDone {
		m.Answer = []byte(r.str(1))
	}
	return m, r.err()
}

// IdemAnswer runs idem_answer.lua: it keeps answer under the mark at key for ttl, if
// the mark is token's and its request still runs. It reports whether it kept it.
// Errors: STORE_UNAVAILABLE.
func (s *Store) IdemAnswer(ctx context.Context, key, token string, answer []byte, ttl time.Duration) (bool, error) {
	r, err := s.call(ctx, idemAnswer, "", []string{key}, token, answer, ttl.Milliseconds())
	if err != nil {
		return false, err
	}
	kept := r.flag(0)
	return kept, r.err()
}

// IdemRelease runs idem_release.lua: it frees the mark at key, if the mark is token's
// and its request still runs. It reports whether it freed it.
// Errors: STORE_UNAVAILABLE.
func (s *Store) IdemRelease(ctx context.Context, key, token string) (bool, error) {
	r, err := s.call(ctx, idemRelease, "", []string{key}, token)
	if err != nil {
		return false, err
	}
	freed := r.flag(0)
	return freed, r.err()
}

// IdemResult is what Idempotent did.
type IdemResult struct {
	// Answer is fn's answer, or the first request's when Replayed.
	Answer   []byte
	Replayed bool
	// Unkept, when set, says why the mark of the call that ran fn was not completed
	// (its answer kept, or the mark freed after fn failed): Redis failed, or the mark
	// had expired while fn ran. The call's own answer or error stands; a retry of the
	// id within the ttl then waits on the mark or runs again.
	Unkept error
}

// Idempotent runs fn at most once at a time per key across replicas and caches its
// answer for ttl. The first call takes the key's mark under an owner token of its own
// (IdemClaim, never after its caller gave up); only the mark's owner keeps its answer
// there (IdemAnswer) or frees it when fn fails (IdemRelease), so a first call that
// outlived its mark leaves the mark a retry took as it is. A repeated call gets the
// cached answer (Replayed); a call that arrives while the first one runs waits up to
// wait for its answer, polling every poll. Errors are not cached, so a retry after a
// failure runs again. Errors: fn's, NO_POD_AVAILABLE (the wait ended),
// STORE_UNAVAILABLE.
func (s *Store) Idempotent(ctx context.Context, key string, ttl, wait, poll time.Duration, fn func() ([]byte, error)) (IdemResult, error) {
	token := warmpool.NewID()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		m, err := s.IdemClaim(ctx, key, token, ttl)
		if err != nil {
			return IdemResult{}, err
		}
		switch m.State {
		case IdemWon:
			return s.runFirst(ctx, key, token, ttl, fn)
		case IdemDone:
			return IdemResult{Answer: m.Answer, Replayed: true}, nil
		}
		select {
		case <-ctx.Done():
			return IdemResult{}, ctx.Err()
		case <-deadline.C:
			return IdemResult{}, warmpool.Errorf(warmpool.CodeNoPodAvailable, "request is still running on another replica").Retry(1)
		case <-time.After(poll):
		}
	}
}

// runFirst runs fn as the first request of the mark at key, which token holds, then
// keeps fn's answer under the mark or, when fn failed, frees it.
func (s *Store) runFirst(ctx context.Context, key, token string, ttl time.Duration, fn func() ([]byte, error)) (IdemResult, error) {
	answer, err := fn()
	// The first request's work is done whatever the caller's ctx says now.
	cleanup, cancel := CleanupContext(ctx)
	defer cancel()
	var done bool
	var derr error
	if err != nil {
		done, derr = s.IdemRelease(cleanup, key, token)
	} else {
		done, derr = s.IdemAnswer(cleanup, key, token, answer, ttl)
	}
	var unkept error
	switch {
	case derr != nil:
		unkept = fmt.Errorf("idempotency mark %s: %w", key, derr)
	case !done:
		unkept = fmt.Errorf("idempotency mark %s: it expired (ttl %s) before its first request ended", key, ttl)
	}
	if err != nil {
		return IdemResult{Unkept: unkept}, err
	}
	return IdemResult{Answer: answer, Unkept: unkept}, nil
}
