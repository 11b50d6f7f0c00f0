package sm

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Routes adds the session routes of SPEC §3 to r, which is mounted at /v1.
func (m *Manager) Routes(r chi.Router) {
	h := httpx.Adapter(m.log)
	r.With(httpx.Waits).Method(http.MethodPost, "/scopes/{scope}/sessions", h(m.handleRoute))
	r.Method(http.MethodGet, "/scopes/{scope}/sessions/{session}", h(onSession(m.Get, func(b Binding) any { return b })))
	r.Method(http.MethodDelete, "/scopes/{scope}/sessions/{session}", h(onSession(m.End, answer("released"))))
	r.Method(http.MethodPost, "/scopes/{scope}/sessions/{session}/touch", h(onSession(m.Touch, answer("touched"))))
}

type routeRequest struct {
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
}

// handleRoute routes a session and records the outcome and duration of the call.
func (m *Manager) handleRoute(w http.ResponseWriter, r *http.Request) (err error) {
	start := time.Now()
	var scope string
	var b Binding
	defer func() {
		if err != nil {
			m.cfg.ObserveRoute(scope, "", warmpool.ErrorCode(err), time.Since(start))
			return
		}
		m.cfg.ObserveRoute(scope, b.Source, "", time.Since(start))
	}()
	scope, err = httpx.Scope(r)
	if err != nil {
		return err
	}
	var req routeRequest
	if err := httpx.Decode(w, r, &req, false); err != nil {
		return err
	}
	if req.SessionID == "" {
		return warmpool.Errorf(warmpool.CodeValidation, "session_id: required")
	}
	requestID, err := httpx.IdempotencyKey(r, req.RequestID)
	if err != nil {
		return err
	}
	b, err = m.Route(r.Context(), scope, req.SessionID, requestID)
	if err != nil {
		return err
	}
	return httpx.OK(w, b)
}

// onSession serves a call on one session named by the URL ({scope}, {session}): the
// ids are validated, then call runs and its result is answered as reply(result).
func onSession[T any](call func(ctx context.Context, scope, session string) (T, error), reply func(T) any) httpx.Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		scope, err := httpx.Scope(r)
		if err != nil {
			return err
		}
		session, err := httpx.Session(r)
		if err != nil {
			return err
		}
		v, err := call(r.Context(), scope, session)
		if err != nil {
			return err
		}
		return httpx.OK(w, reply(v))
	}
}

// answer replies with the one-key object {key: v}, as end and touch do.
func answer(key string) func(bool) any {
	return func(v bool) any { return map[string]bool{key: v} }
}
