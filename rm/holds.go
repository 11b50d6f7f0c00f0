package rm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// Hold acquires a pod as Acquire does and keeps the claimed slot as a hold. With a
// request id, a repeated call returns the first answer: the same hold; a request id
// used for a route is refused. Errors: as Acquire's, IDEMPOTENCY_MISMATCH.
func (m *Manager) Hold(ctx context.Context, scope, requestID string) (warmpool.Hold, error) {
	return m.HoldWith(ctx, scope, requestID, nil)
}

// HoldWith is Hold that keeps config, a sealed session_config (SPEC §12.2), as the
// hold's, for the pod's agent to fetch under the hold id; a repeated call keeps the
// first call's.
func (m *Manager) HoldWith(ctx context.Context, scope, requestID string, config []byte) (warmpool.Hold, error) {
	if requestID == "" {
		return m.hold(ctx, scope, config)
	}
	// A repeat waits for the first call's answer at most as long as any deploy may
	// take; the pending mark expires with IdemTTL anyway.
	wait := time.Duration(warmpool.MaxReadyTimeoutS)*time.Second + m.cfg.FollowerMargin
	req := redisstore.IdemRequest{Scope: scope, ID: requestID, Fingerprint: redisstore.AcquireFingerprint}
	res, err := m.store.Idempotent(ctx, req, m.cfg.IdemTTL, wait, m.cfg.PollInterval, func() ([]byte, error) {
		h, err := m.hold(ctx, scope, config)
		if err != nil {
			return nil, err
		}
		return json.Marshal(h)
	})
	if res.Unkept != nil {
		m.log.WarnContext(ctx, "acquire's request id mark not completed", "scope", scope, "err", res.Unkept)
	}
	if err != nil {
		return warmpool.Hold{}, err
	}
	var h warmpool.Hold
	if err := json.Unmarshal(res.Answer, &h); err != nil {
		return warmpool.Hold{}, fmt.Errorf("acquire %q: cached answer: %w", scope, err)
	}
	return h, nil
}

func (m *Manager) hold(ctx context.Context, scope string, config []byte) (warmpool.Hold, error) {
	l, err := m.Acquire(ctx, scope)
	if err != nil {
		return warmpool.Hold{}, err
	}
	until, err := m.store.HoldTouch(ctx, scope, l.Claim, l.Pod.ID, m.clock.Now(), config)
	if err != nil {
		cleanup, cancel := redisstore.CleanupContext(ctx)
		defer cancel()
		if rerr := m.ReleaseClaim(cleanup, scope, l.Claim); rerr != nil {
			m.log.WarnContext(ctx, "claim not given back; it expires by its deadline", "scope", scope, "err", rerr)
		}
		if errors.Is(err, redisstore.ErrNoHold) {
			// The pod went away between the two steps.
			err = warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: the pod handed out went away; retry", scope).Retry(1)
		}
		return warmpool.Hold{}, fmt.Errorf("acquire %q: %w", scope, err)
	}
	return warmpool.Hold{Pod: l.Pod, Source: l.Source, ID: l.Claim, Until: until.UTC()}, nil
}

// TouchHold extends a live hold on pod to pool.hold_ttl_s from now and returns its new
// deadline. Errors: HOLD_NOT_FOUND (unknown, released, expired, or of another pod),
// SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) TouchHold(ctx context.Context, scope, pod, hold string) (time.Time, error) {
	return m.store.HoldTouch(ctx, scope, hold, pod, m.clock.Now(), nil)
}

// ReleaseHold releases a live hold on pod: its slot goes to the oldest waiter of the
// scope, or is freed (the pod goes idle when it was its last slot). It reports whether
// the pod is idle now. Errors: HOLD_NOT_FOUND, SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) ReleaseHold(ctx context.Context, scope, pod, hold string) (bool, error) {
	return m.store.HoldRelease(ctx, scope, hold, pod, m.clock.Now())
}
