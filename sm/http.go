package sm

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Register adds the session routes of SPEC §3 to r, which is mounted at
// /v1/scopes/{scope}.
func (m *Manager) Register(r chi.Router) {
	r.Post("/sessions", m.handleRoute)
	r.Get("/sessions/{session}", m.handleGet)
	r.Delete("/sessions/{session}", m.handleEnd)
	r.Post("/sessions/{session}/touch", m.handleTouch)
}

type routeRequest struct {
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
}

func (m *Manager) handleRoute(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	b, err := m.serveRoute(w, r)
	outcome := "ok"
	if err != nil {
		outcome = string(warmpool.ErrorCode(err))
		httpx.WriteError(w, r, m.log, err)
	} else {
		httpx.WriteJSON(w, http.StatusOK, b)
	}
	m.cfg.ObserveRoute(outcome, time.Since(start))
}

func (m *Manager) serveRoute(w http.ResponseWriter, r *http.Request) (Binding, error) {
	scope, err := httpx.Scope(r)
	if err != nil {
		return Binding{}, err
	}
	var req routeRequest
	if err := httpx.Decode(w, r, &req, false); err != nil {
		return Binding{}, err
	}
	if req.SessionID == "" {
		return Binding{}, warmpool.Errorf(warmpool.CodeValidation, "session_id: required")
	}
	if req.RequestID == "" {
		req.RequestID = r.Header.Get("Idempotency-Key")
	}
	return m.Route(r.Context(), scope, req.SessionID, req.RequestID)
}

func (m *Manager) handleGet(w http.ResponseWriter, r *http.Request) {
	scope, session, err := ids(r)
	if err == nil {
		var b Binding
		if b, err = m.Get(r.Context(), scope, session); err == nil {
			httpx.WriteJSON(w, http.StatusOK, b)
			return
		}
	}
	httpx.WriteError(w, r, m.log, err)
}

func (m *Manager) handleEnd(w http.ResponseWriter, r *http.Request) {
	scope, session, err := ids(r)
	if err == nil {
		var released bool
		if released, err = m.End(r.Context(), scope, session); err == nil {
			httpx.WriteJSON(w, http.StatusOK, map[string]bool{"released": released})
			return
		}
	}
	httpx.WriteError(w, r, m.log, err)
}

func (m *Manager) handleTouch(w http.ResponseWriter, r *http.Request) {
	scope, session, err := ids(r)
	if err == nil {
		var touched bool
		if touched, err = m.Touch(r.Context(), scope, session); err == nil {
			httpx.WriteJSON(w, http.StatusOK, map[string]bool{"touched": touched})
			return
		}
	}
	httpx.WriteError(w, r, m.log, err)
}

func ids(r *http.Request) (scope, session string, err error) {
	if scope, err = httpx.Scope(r); err != nil {
		return "", "", err
	}
	session, err = httpx.Session(r)
	return scope, session, err
}
