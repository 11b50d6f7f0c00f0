// Package sessionconfig keeps the per-session config of SPEC §12.2 between the route
// (or acquire) that gives it and the pod's agent that fetches it: Seal checks a
// session_config and seals it for Redis (httpx.ReportKey.Seal: AES-GCM under a key
// derived from the report secret), where the route's script keeps it beside the
// session's binding and every path that ends the session drops it (lua: the sconf
// key); Env opens it for the agent of the pod the session is bound to, its secret
// refs resolved to values through the driver at that moment. The config is never in
// the pod spec, and neither the values nor the config are logged or counted.
package sessionconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/redisstore"
)

// Store reads a sealed config for a pod's agent (redisstore.Store).
type Store interface {
	SessionConfig(ctx context.Context, scope, id, pod string, now time.Time) (redisstore.SessionConfig, error)
}

// Service seals and opens session configs.
type Service struct {
	key     *httpx.ReportKey
	store   Store
	secrets warmpool.SecretReader
	clock   warmpool.Clock
}

// New returns the service of key (nil: reports are off, and no config is taken),
// store and secrets (nil: the driver reads no secrets, and no secret ref is taken).
func New(key *httpx.ReportKey, store Store, secrets warmpool.SecretReader, clock warmpool.Clock) *Service {
	if clock == nil {
		clock = warmpool.SystemClock{}
	}
	return &Service{key: key, store: store, secrets: secrets, clock: clock}
}

// Seal checks c and seals it for a session or hold of scope; nil for an empty one.
// Errors: VALIDATION naming the field (c.Check), a config while reports are off (no
// agent could fetch it), secret refs while the driver reads no secrets;
// STORE_UNAVAILABLE while the report secret cannot be read.
func (s *Service) Seal(scope string, c *warmpool.SessionConfig) ([]byte, error) {
	if c.Empty() {
		return nil, nil
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	if s == nil || s.key == nil {
		return nil, warmpool.Errorf(warmpool.CodeValidation, "session_config: agent reports are off (no --report-secret): no agent could fetch it")
	}
	if len(c.SecretRefs) > 0 && s.secrets == nil {
		return nil, warmpool.Errorf(warmpool.CodeValidation, "session_config.secret_refs: this replica's pod driver reads no secrets")
	}
	plain, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return s.key.Seal(scope, plain)
}

// Env is the env of the session (or hold) id on pod of scope, as its agent fetches it:
// the config's env and its secret refs read now. A session routed without a config
// has an empty env. Errors: SESSION_NOT_FOUND (not bound to that pod: another pod's,
// ended, expired, unknown), VALIDATION (a secret or key the driver does not find),
// STORE_UNAVAILABLE.
func (s *Service) Env(ctx context.Context, scope, pod, id string) (map[string]string, error) {
	found, err := s.store.SessionConfig(ctx, scope, id, pod, s.clock.Now())
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	if found.Sealed == nil {
		return env, nil
	}
	plain, err := s.key.Open(scope, found.Sealed)
	if err != nil {
		return nil, fmt.Errorf("session %s/%s: its config does not open (was the report secret changed?): %w", scope, id, err)
	}
	var c warmpool.SessionConfig
	if err := json.Unmarshal(plain, &c); err != nil {
		return nil, fmt.Errorf("session %s/%s: its config: %w", scope, id, err)
	}
	for name, v := range c.Env {
		env[name] = v
	}
	if len(c.SecretRefs) > 0 && s.secrets == nil {
		return nil, warmpool.Errorf(warmpool.CodeValidation, "session_config.secret_refs: this replica's pod driver reads no secrets")
	}
	for name, ref := range c.SecretRefs {
		v, err := s.secrets.ReadSecret(ctx, found.Pod, ref.Secret, ref.Key)
		var e *warmpool.Error
		if errors.As(err, &e) {
			return nil, &warmpool.Error{Code: e.Code, Message: "session_config.secret_refs." + name + ": " + e.Message, RetryAfter: e.RetryAfter}
		}
		if err != nil {
			return nil, fmt.Errorf("session_config.secret_refs.%s: %w", name, err)
		}
		env[name] = v
	}
	return env, nil
}
