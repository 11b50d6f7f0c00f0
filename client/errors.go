package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Code is an error code of the API (the "code" of the error envelope). A Code is
// also an error: each constant is the sentinel that errors.Is matches an *Error of
// that code with, so a gateway may write either
//
//	errors.Is(err, client.CodeNoPodAvailable)
//	switch client.CodeOf(err) { case client.CodeNoPodAvailable: … }
type Code string

// The codes of the contract, with the status the server answers each with.
const (
	CodeValidation       Code = "VALIDATION"         // 400: a malformed body or a bad id; the message names the field
	CodeUnauthorized     Code = "UNAUTHORIZED"       // 401: the bearer token is missing or wrong
	CodeForbidden        Code = "FORBIDDEN"          // 403: an admin call with the gateway token
	CodeScopeNotFound    Code = "SCOPE_NOT_FOUND"    // 404: no config for the scope
	CodeSessionNotFound  Code = "SESSION_NOT_FOUND"  // 404: Get of a session that is not bound
	CodeHoldNotFound     Code = "HOLD_NOT_FOUND"     // 404: the hold was released or has expired
	CodePodNotFound      Code = "POD_NOT_FOUND"      // 404: a pod the pool does not have (agent reports)
	CodeTenantNotFound   Code = "TENANT_NOT_FOUND"   // 404: a tenant without quotas that no scope names
	CodeNotFound         Code = "NOT_FOUND"          // 404: no such route (a wrong base URL)
	CodeMethodNotAllowed Code = "METHOD_NOT_ALLOWED" // 405: the route does not take the method
	CodeConfigSyncBusy   Code = "CONFIG_SYNC_BUSY"   // 409: a config sync is running
	CodePayloadTooLarge  Code = "PAYLOAD_TOO_LARGE"  // 413: the request body is over 1 MiB
	// CodeIdempotencyMismatch (422): the Idempotency-Key was used before for another
	// request; nothing changed.
	CodeIdempotencyMismatch Code = "IDEMPOTENCY_MISMATCH"
	// CodeQuotaExceeded (429): a tenant quota refused the call; Error.Quota says which.
	// Retried.
	CodeQuotaExceeded Code = "QUOTA_EXCEEDED"
	CodeInternal      Code = "INTERNAL"      // 500: a bug of the server
	CodeDeployFailed  Code = "DEPLOY_FAILED" // 502: the pod could not be deployed; the message says why
	// CodeNoPodAvailable (503): the scope is full and cannot queue the call. Retried.
	CodeNoPodAvailable Code = "NO_POD_AVAILABLE"
	// CodeQueueFull (503): the scope's waiter queue is full. Retried.
	CodeQueueFull Code = "QUEUE_FULL"
	// CodeStoreUnavailable (503): Redis or the config store did not answer. Retried.
	CodeStoreUnavailable Code = "STORE_UNAVAILABLE"
	CodeWaitTimeout      Code = "WAIT_TIMEOUT" // 504: the call waited wait_timeout_s in the queue
)

// Error returns the code itself.
func (c Code) Error() string { return string(c) }

// retryable are the codes a call is repeated after: the server had no room, or no
// store, for it now, and nothing was done.
var retryable = map[Code]bool{
	CodeNoPodAvailable:   true,
	CodeQueueFull:        true,
	CodeStoreUnavailable: true,
	CodeQuotaExceeded:    true,
}

// Error is an answer of the server that is not a 2xx: its status and the error
// envelope, when the body was one (an answer of a proxy in between has Status and
// Message only).
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the envelope's code, "" when the body was no envelope.
	Code Code
	// Message says what went wrong; without an envelope, the start of the body.
	Message string
	// RetryAfter is the wait the server asked for before a retry (the Retry-After
	// header, else the envelope's retry_after), 0 when it named none.
	RetryAfter time.Duration
	// Details is the envelope's "details" object as sent, nil when absent; Quota
	// decodes those of QUOTA_EXCEEDED.
	Details json.RawMessage
	// RequestID is the answer's X-Request-Id: the id of the call in the server's logs.
	RequestID string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("warmpool: ")
	b.WriteString(strconv.Itoa(e.Status))
	if e.Code != "" {
		b.WriteString(" " + string(e.Code))
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RequestID != "" {
		b.WriteString(" (request id " + e.RequestID + ")")
	}
	return b.String()
}

// Is reports whether target is e's Code, so that errors.Is(err, client.CodeX) works.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// QuotaDetails are the details of a QUOTA_EXCEEDED answer: which tenant quota refused
// the call, its limit and the tenant's use when it was refused.
type QuotaDetails struct {
	Tenant string `json:"tenant"`
	// Quota names the quota that refused it, e.g. max_pods or max_memory.
	Quota string   `json:"quota"`
	Limit Quantity `json:"limit"`
	Use   Quantity `json:"use"`
}

// Quantity is a quota's amount as the server wrote it: a count ("4") or a Kubernetes
// quantity ("8Gi", "500m"). It decodes from a JSON number or string.
type Quantity string

// UnmarshalJSON takes a JSON string or number.
func (q *Quantity) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*q = Quantity(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("quantity: want a string or a number, got %s", b)
	}
	*q = Quantity(n)
	return nil
}

// Quota returns the details of a QUOTA_EXCEEDED answer; ok is false for any other
// error, or when the details are absent or not of that shape.
func (e *Error) Quota() (d QuotaDetails, ok bool) {
	if e.Code != CodeQuotaExceeded || len(e.Details) == 0 {
		return QuotaDetails{}, false
	}
	if err := json.Unmarshal(e.Details, &d); err != nil {
		return QuotaDetails{}, false
	}
	return d, true
}

// CodeOf returns the code of the first *Error in err's chain, "" when there is none
// (nil, a transport error, a cancelled context).
func CodeOf(err error) Code {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return ""
}

// envelope is the error body of the API.
type envelope struct {
	Error struct {
		Code       Code            `json:"code"`
		Message    string          `json:"message"`
		RetryAfter int             `json:"retry_after"`
		Details    json.RawMessage `json:"details"`
	} `json:"error"`
}

// maxMessage bounds the Message taken from a body that is no envelope.
const maxMessage = 512

// errorOf builds the *Error of a non-2xx answer whose body is body.
func errorOf(resp *http.Response, body []byte) *Error {
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	var env envelope
	if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message, e.Details = env.Error.Code, env.Error.Message, env.Error.Details
		if env.Error.RetryAfter > 0 {
			e.RetryAfter = time.Duration(env.Error.RetryAfter) * time.Second
		}
	} else {
		msg := strings.TrimSpace(string(body))
		if len(msg) > maxMessage {
			msg = msg[:maxMessage] + "…"
		}
		e.Message = msg
	}
	if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		e.RetryAfter = d
	}
	return e
}

// retryAfter reads a Retry-After header: delay seconds or an HTTP date (RFC 9110
// §10.2.3); ok is false when it is absent or neither.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil {
		return time.Duration(max(s, 0)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
