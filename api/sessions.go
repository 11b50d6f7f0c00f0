package api

import (
	"context"
	"net/http"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

type routeRequest struct {
	SessionID     string                  `json:"session_id"`
	RequestID     string                  `json:"request_id"`
	SessionConfig *warmpool.SessionConfig `json:"session_config"`
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
	config, err := a.SessionConfigs.Seal(scope, req.SessionConfig)
	if err != nil {
		return err
	}
	b, err := a.Sessions.RouteWith(r.Context(), scope, req.SessionID, warmpool.RouteOptions{RequestID: requestID, Config: config})
	if err != nil {
		return err
	}
	return httpx.OK(w, a.ticketed(b))
}

// ticketedBinding is a binding as a route or a GET of the session answers it: with
// its session_ticket when reports are on (SPEC §12.4).
type ticketedBinding struct {
	warmpool.Binding
	// SessionTicket proves, in the reports of the pod's agent, that the session was
	// routed to the pod: the gateway passes it to the pod with the session (the SSE
	// request's query parameter session_ticket), and the agent sends it back in its
	// reports, so that after a Redis data loss the session is bound to that pod again
	// and to no other.
	SessionTicket string `json:"session_ticket,omitempty"`
}

// ticketed is b with its ticket, made here rather than in sm, which never sees the
// report secret; none when reports are off (no report key).
func (a *handlers) ticketed(b warmpool.Binding) ticketedBinding {
	t := ticketedBinding{Binding: b}
	if a.ReportKey != nil {
		t.SessionTicket = a.ReportKey.Ticket(b.ScopeID, b.SessionID, b.PodID)
	}
	return t
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
