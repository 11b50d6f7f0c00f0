package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
)

// A request id names one request of its scope: an operation and its parameters,
// written as the request's fingerprint, which the id's keys keep (ScopeKeys.IdemMark,
// RouteAnswer) and every script that claims or replays the id compares. The scope is
// not in it: it is in the keys, so the same id in another scope is another request.

// RouteFingerprint is the fingerprint of a route of session.
func RouteFingerprint(session string) string { return "route " + session }

// AcquireFingerprint is the fingerprint of an acquire (a hold); it has no parameters.
const AcquireFingerprint = "acquire"

// IdemRequest is a request with a request id: its scope, the id and its fingerprint.
type IdemRequest struct {
	Scope, ID, Fingerprint string
}

// mismatch is IDEMPOTENCY_MISMATCH for a request id used before for another request.
// It does not say which: that would tell one caller another's session.
func mismatch(scope, requestID string) error {
	return warmpool.Errorf(warmpool.CodeIdempotencyMismatch,
		"request id %q was used for another request in scope %q (another session, or another call); send a new request id", requestID, scope)
}

// The states of a request id's mark, as IdemClaim finds it.
const (
	// IdemWon: the mark was free and is the caller's now: its request is the first.
	IdemWon = "won"
	// IdemRunning: the first request of the id still runs.
	IdemRunning = "running"
	// IdemDone: the first request of the id answered; the answer is kept.
	IdemDone = "done"
)

// IdemClaimResult is idem_claim.lua's answer: the mark's state and, when it is
// IdemDone, the first request's answer.
type IdemClaimResult struct {
	State  string
	Answer []byte
}

// IdemClaim runs idem_claim.lua: it takes the request id's mark for r, a first
// request, under token for ttl, or reads what an earlier request of the id left there.
// Errors: IDEMPOTENCY_MISMATCH (the id names another request), STORE_UNAVAILABLE.
func (s *Store) IdemClaim(ctx context.Context, r IdemRequest, token string, ttl time.Duration) (IdemClaimResult, error) {
	k := s.keys.Scope(r.Scope)
	rep, err := s.call(ctx, idemClaim, k, []string{k.IdemMark(r.ID), k.RouteAnswer(r.ID)}, r.Fingerprint, token, ttl.Milliseconds())
	if err != nil {
		return IdemClaimResult{}, err
	}
	m := IdemClaimResult{State: rep.oneOf(0, IdemWon, IdemRunning, IdemDone, "mismatch")}
	switch m.State {
	case IdemDone:
		m.Answer = []byte(rep.str(1))
	case "mismatch":
		if err := rep.err(); err != nil {
			return IdemClaimResult{}, err
		}
		return IdemClaimResult{}, mismatch(r.Scope, r.ID)
	}
	return m, rep.err()
}

// IdemAnswer runs idem_answer.lua: it keeps answer under the request id's mark for
// ttl, if the mark is token's and its request still runs. It reports whether it kept
// it. Errors: STORE_UNAVAILABLE.
func (s *Store) IdemAnswer(ctx context.Context, scope, requestID, token string, answer []byte, ttl time.Duration) (bool, error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, idemAnswer, k, []string{k.IdemMark(requestID)}, token, answer, ttl.Milliseconds())
	if err != nil {
		return false, err
	}
	kept := r.flag(0)
	return kept, r.err()
}

// IdemRelease runs idem_release.lua: it frees the request id's mark, if the mark is
// token's and its request still runs. It reports whether it freed it.
// Errors: STORE_UNAVAILABLE.
func (s *Store) IdemRelease(ctx context.Context, scope, requestID, token string) (bool, error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, idemRelease, k, []string{k.IdemMark(requestID)}, token)
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

// Idempotent runs fn at most once at a time per request id across replicas and caches
// its answer for ttl. The first call takes the id's mark for r under an owner token of
// its own (IdemClaim, never after its caller gave up); only the mark's owner keeps its
// answer there (IdemAnswer) or frees it when fn fails (IdemRelease), so a first call
// that outlived its mark leaves the mark a retry took as it is. A repeated call gets
// the cached answer (Replayed); a call that arrives while the first one runs waits up
// to wait for its answer, polling every poll; a call whose fingerprint is not the
// first one's is refused. Errors are not cached, so a retry after a failure runs
// again. Errors: fn's, IDEMPOTENCY_MISMATCH, NO_POD_AVAILABLE (the wait ended),
// STORE_UNAVAILABLE.
func (s *Store) Idempotent(ctx context.Context, r IdemRequest, ttl, wait, poll time.Duration, fn func() ([]byte, error)) (IdemResult, error) {
	token := warmpool.NewID()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		m, err := s.IdemClaim(ctx, r, token, ttl)
		if err != nil {
			return IdemResult{}, err
		}
		switch m.State {
		case IdemWon:
			return s.runFirst(ctx, r, token, ttl, fn)
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

// runFirst runs fn as the first request of r's id, whose mark token holds, then keeps
// fn's answer under the mark or, when fn failed, frees it.
func (s *Store) runFirst(ctx context.Context, r IdemRequest, token string, ttl time.Duration, fn func() ([]byte, error)) (IdemResult, error) {
	answer, err := fn()
	// The first request's work is done whatever the caller's ctx says now.
	cleanup, cancel := CleanupContext(ctx)
	defer cancel()
	var done bool
	var derr error
	if err != nil {
		done, derr = s.IdemRelease(cleanup, r.Scope, r.ID, token)
	} else {
		done, derr = s.IdemAnswer(cleanup, r.Scope, r.ID, token, answer, ttl)
	}
	var unkept error
	switch {
	case derr != nil:
		unkept = fmt.Errorf("mark of request id %q: %w", r.ID, derr)
	case !done:
		unkept = fmt.Errorf("mark of request id %q: it expired (ttl %s) before its first request ended", r.ID, ttl)
	}
	if err != nil {
		return IdemResult{Unkept: unkept}, err
	}
	return IdemResult{Answer: answer, Unkept: unkept}, nil
}
