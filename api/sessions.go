package api

import (
	"context"
	"net/http"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

type routeRequest struct {
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
}

// routeSession answers POST /v1/scopes/{scope}/sessions: where the session goes.
func (a *handlers) routeSession(w http.ResponseWriter, r *http.Request) error {
	scope, err := httpx.Scope(r)
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
	b, err := a.Sessions.Route(r.Context(), scope, req.SessionID, requestID)
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
