package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Binding is where a session goes: the answer of Route and Get.
type Binding struct {
	ScopeID   string `json:"scope_id"`
	SessionID string `json:"session_id"`
	PodID     string `json:"pod_id"`
	// PodSSEURL is the pod's stream, where the gateway sends the session's traffic.
	PodSSEURL string `json:"pod_sse_url"`
	DeployVer string `json:"deploy_ver"`
	// New is true when this call bound the session, false when it was bound already.
	New bool `json:"new"`
	// SessionTicket is the server's ticket of the binding, when its pods report ("" when
	// not): an agent that holds it may restore the binding after a Redis data loss.
	SessionTicket string `json:"session_ticket,omitempty"`
}

// Hold is a pod slot held for an API caller: the answer of Acquire.
type Hold struct {
	PodID     string `json:"pod_id"`
	PodSSEURL string `json:"pod_sse_url"`
	DeployVer string `json:"deploy_ver"`
	// Source says where the pod came from: "warm", "deployed" or "follower".
	Source string `json:"source"`
	// HoldID names the hold to TouchHold and Release.
	HoldID string `json:"hold_id"`
	// HoldUntil is when the hold ends by itself unless touched.
	HoldUntil time.Time `json:"hold_until"`
}

// sessionPath is /v1/scopes/{scope}/sessions[/{session}], the ids path-escaped.
func sessionPath(scope, session string) string {
	p := "/v1/scopes/" + url.PathEscape(scope) + "/sessions"
	if session != "" {
		p += "/" + url.PathEscape(session)
	}
	return p
}

// podPath is /v1/scopes/{scope}/pods/{pod}/{op}, the ids path-escaped.
func podPath(scope, pod, op string) string {
	return "/v1/scopes/" + url.PathEscape(scope) + "/pods/" + url.PathEscape(pod) + "/" + op
}

// mutating is a call that changes state: it carries an Idempotency-Key, the caller's
// or a new one, the same on every attempt.
func mutating(method, path string, body any, cs callSettings) call {
	key := cs.idemKey
	if key == "" {
		key = newIdemKey()
	}
	return call{method: method, path: path, body: body, idemKey: key}
}

type routeRequest struct {
	SessionID     string         `json:"session_id"`
	SessionConfig *SessionConfig `json:"session_config,omitempty"`
}

// Route answers the pod of the session (POST /v1/scopes/{scope}/sessions): the pod it
// is bound to (New false, its TTL refreshed), else a pod with room now, else one the
// server deploys or, when the scope is full, one freed while the call waits in the
// queue. Options: WithIdempotencyKey, WithSessionConfig. Errors: VALIDATION,
// UNAUTHORIZED, SCOPE_NOT_FOUND, IDEMPOTENCY_MISMATCH, QUOTA_EXCEEDED,
// NO_POD_AVAILABLE, QUEUE_FULL, STORE_UNAVAILABLE (those four after the retries),
// WAIT_TIMEOUT, DEPLOY_FAILED.
func (c *Client) Route(ctx context.Context, scope, session string, opts ...CallOption) (Binding, error) {
	cs, err := callOptions(opts, true)
	if err != nil {
		return Binding{}, err
	}
	var b Binding
	err = c.do(ctx, mutating(http.MethodPost, sessionPath(scope, ""),
		routeRequest{SessionID: session, SessionConfig: cs.sessionConfig}, cs), &b)
	return b, err
}

// Get answers the session's binding (GET /v1/scopes/{scope}/sessions/{session}).
// Errors: VALIDATION, UNAUTHORIZED, SCOPE_NOT_FOUND, SESSION_NOT_FOUND,
// STORE_UNAVAILABLE.
func (c *Client) Get(ctx context.Context, scope, session string) (Binding, error) {
	var b Binding
	err := c.do(ctx, call{method: http.MethodGet, path: sessionPath(scope, session)}, &b)
	return b, err
}

// Touch keeps the session alive for its TTL
// (POST /v1/scopes/{scope}/sessions/{session}/touch); false when it had expired (the
// server freed its slot then) or never existed: route it again. Options:
// WithIdempotencyKey. Errors: VALIDATION, UNAUTHORIZED, SCOPE_NOT_FOUND,
// STORE_UNAVAILABLE.
func (c *Client) Touch(ctx context.Context, scope, session string, opts ...CallOption) (bool, error) {
	cs, err := callOptions(opts, false)
	if err != nil {
		return false, err
	}
	var out struct {
		Touched bool `json:"touched"`
	}
	err = c.do(ctx, mutating(http.MethodPost, sessionPath(scope, session)+"/touch", nil, cs), &out)
	return out.Touched, err
}

// End ends the session and frees its slot (DELETE
// /v1/scopes/{scope}/sessions/{session}); false when it was not bound. Options:
// WithIdempotencyKey. Errors: VALIDATION, UNAUTHORIZED, SCOPE_NOT_FOUND,
// STORE_UNAVAILABLE.
func (c *Client) End(ctx context.Context, scope, session string, opts ...CallOption) (bool, error) {
	cs, err := callOptions(opts, false)
	if err != nil {
		return false, err
	}
	var out struct {
		Released bool `json:"released"`
	}
	err = c.do(ctx, mutating(http.MethodDelete, sessionPath(scope, session), nil, cs), &out)
	return out.Released, err
}

type acquireRequest struct {
	SessionConfig *SessionConfig `json:"session_config,omitempty"`
}

// Acquire holds a slot of a pod of the scope (POST /v1/scopes/{scope}/pods/acquire)
// until Release or HoldUntil, which TouchHold moves on. Options: WithIdempotencyKey,
// WithSessionConfig. Errors: as Route's.
func (c *Client) Acquire(ctx context.Context, scope string, opts ...CallOption) (Hold, error) {
	cs, err := callOptions(opts, true)
	if err != nil {
		return Hold{}, err
	}
	var h Hold
	err = c.do(ctx, mutating(http.MethodPost, "/v1/scopes/"+url.PathEscape(scope)+"/pods/acquire",
		acquireRequest{SessionConfig: cs.sessionConfig}, cs), &h)
	return h, err
}

type holdRequest struct {
	HoldID string `json:"hold_id"`
}

// TouchHold keeps the hold for another hold_ttl_s (POST
// /v1/scopes/{scope}/pods/{pod}/touch) and answers its new end. Options:
// WithIdempotencyKey. Errors: VALIDATION, UNAUTHORIZED, SCOPE_NOT_FOUND,
// HOLD_NOT_FOUND (released, expired or of another pod: acquire again),
// STORE_UNAVAILABLE.
func (c *Client) TouchHold(ctx context.Context, scope, pod, holdID string, opts ...CallOption) (time.Time, error) {
	cs, err := callOptions(opts, false)
	if err != nil {
		return time.Time{}, err
	}
	var out struct {
		HoldUntil time.Time `json:"hold_until"`
	}
	err = c.do(ctx, mutating(http.MethodPost, podPath(scope, pod, "touch"), holdRequest{HoldID: holdID}, cs), &out)
	return out.HoldUntil, err
}

// Release ends the hold (POST /v1/scopes/{scope}/pods/{pod}/release): released says
// the hold was live and is ended now, idle that the pod has nothing left on it.
// Options: WithIdempotencyKey. Errors: VALIDATION, UNAUTHORIZED, SCOPE_NOT_FOUND,
// HOLD_NOT_FOUND (it had ended already), STORE_UNAVAILABLE.
func (c *Client) Release(ctx context.Context, scope, pod, holdID string, opts ...CallOption) (released, idle bool, err error) {
	cs, err := callOptions(opts, false)
	if err != nil {
		return false, false, err
	}
	var out struct {
		Released bool `json:"released"`
		Idle     bool `json:"idle"`
	}
	err = c.do(ctx, mutating(http.MethodPost, podPath(scope, pod, "release"), holdRequest{HoldID: holdID}, cs), &out)
	return out.Released, out.Idle, err
}
