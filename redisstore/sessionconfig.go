package redisstore

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
)

// SessionConfig is what session_config.lua found of a session or hold live on a pod:
// its session_config as sealed (nil when it was routed without one) and the pod.
type SessionConfig struct {
	Sealed []byte
	Pod    warmpool.Pod
}

// SessionConfig runs session_config.lua: the sealed session_config of the session (or
// hold) id that is live on pod. Errors: ErrNoSession (not bound to that pod, ended,
// expired, unknown).
func (s *Store) SessionConfig(ctx context.Context, scope, id, pod string, now time.Time) (SessionConfig, error) {
	r, err := s.call(ctx, sessionConf, s.keys.scopeBase(scope), nil, ms(now), id, pod)
	if err != nil {
		return SessionConfig{}, err
	}
	if r.oneOf(0, "found", "unknown") == "unknown" {
		return SessionConfig{}, ErrNoSession
	}
	c := SessionConfig{Pod: r.pod(2, 3)}
	if sealed := r.str(1); sealed != "" {
		c.Sealed = []byte(sealed)
	}
	return c, r.err()
}
