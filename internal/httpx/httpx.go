// Package httpx holds what every HTTP handler of warmpool shares: the handler shape
// and its error envelope, strict JSON decoding with a size limit, bearer auth, request
// ids and access logs.
//
// Every handler is a Handler: it answers with OK (or WriteJSON) and returns nil, or
// returns an error and writes nothing. Each resource (rm, sm, scopes, the server's
// operations) adds its Handlers to the router in a Routes(chi.Router) method, wrapped
// by one Adapter that writes a returned error as the envelope.
package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool"
)

// MaxBody is the largest request body accepted (SPEC §3).
const MaxBody = 1 << 20

// envelope is the one error shape of the API.
type envelope struct {
	Error envelopeBody `json:"error"`
}

type envelopeBody struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retry_after,omitempty"`
	Details    any    `json:"details,omitempty"`
}

// WriteJSON writes v with the status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Handler is the one shape of warmpool's HTTP handlers (go-chi's custom-handler
// example): it writes its answer and returns nil, or returns an error and writes
// nothing, leaving the error to its Adapter.
type Handler func(w http.ResponseWriter, r *http.Request) error

// Adapter returns the adapter that serves Handlers: a returned error is written as the
// envelope (WriteError), and an INTERNAL one is logged to log. Under Bounds, the
// handler's context ends at the call bound unless the route is marked with Waits.
func Adapter(log *slog.Logger) func(Handler) http.Handler {
	return func(h Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r, cancel := CallContext(r)
			defer cancel()
			if err := h(w, r); err != nil {
				WriteError(w, r, log, err)
			}
		})
	}
}

// OK writes v as JSON with status 200; a Handler ends with `return httpx.OK(w, v)`.
func OK(w http.ResponseWriter, v any) error {
	WriteJSON(w, http.StatusOK, v)
	return nil
}

// WriteError turns any error into the envelope and its status, with a Retry-After
// header when the error sets retry_after and WWW-Authenticate on a 401. Only INTERNAL
// is logged, as an error; a caller that went away gets nothing.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	e := ErrorOf(r, log, err)
	if e == nil {
		return
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Code == warmpool.CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	WriteJSON(w, Status(e.Code), envelope{Error: envelopeBody{Code: string(e.Code), Message: e.Message, RetryAfter: e.RetryAfter, Details: e.Details}})
}

// ErrorOf is the domain error that answers err, the one rule of every API's answers:
// a *warmpool.Error as it is, a deadline as STORE_UNAVAILABLE, anything else as
// INTERNAL, logged to log as an error. It is nil when the caller went away (nobody
// reads an answer).
func ErrorOf(r *http.Request, log *slog.Logger, err error) *warmpool.Error {
	var e *warmpool.Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		e = &warmpool.Error{Code: warmpool.CodeStoreUnavailable, Message: "timed out: " + err.Error(), RetryAfter: 1}
	default:
		e = &warmpool.Error{Code: warmpool.CodeInternal, Message: "internal error"}
	}
	if e.Code == warmpool.CodeInternal {
		log.ErrorContext(r.Context(), "internal error", "err", err, "method", r.Method, "path", r.URL.Path)
	}
	return e
}

// Body reads the request body, at most MaxBody bytes: a larger one is
// PAYLOAD_TOO_LARGE.
func Body(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var b bytes.Buffer
	if err := readBody(w, r, &b, MaxBody); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// readBody reads the request body into b as Body does, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, b *bytes.Buffer, limit int64) error {
	if _, err := b.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return warmpool.Errorf(warmpool.CodePayloadTooLarge, "body: larger than %d bytes", limit)
		}
		var timeout net.Error
		if errors.As(err, &timeout) && timeout.Timeout() {
			return warmpool.Errorf(warmpool.CodeValidation, "body: not complete within the read timeout")
		}
		return warmpool.Errorf(warmpool.CodeValidation, "body: %v", err)
	}
	return nil
}

// bodies are the buffers Decode reads bodies into: the decoder copies what it keeps,
// so a buffer is reused by the next request instead of being garbage (512 bytes and
// more a call). One that grew past keptBody is left to the collector.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const keptBody = 64 << 10

// Decode reads a JSON object body into v strictly: unknown fields are named, bodies over
// MaxBody are PAYLOAD_TOO_LARGE. An empty body leaves v as it is when allowEmpty.
func Decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	return decode(w, r, v, allowEmpty, MaxBody)
}

// DecodeAtMost is Decode of a body that may take at most limit bytes (no more than
// MaxBody): a larger one is PAYLOAD_TOO_LARGE, at once when its declared
// Content-Length is, and is read no further than limit.
func DecodeAtMost(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	limit = min(limit, MaxBody)
	if r.ContentLength > limit {
		return warmpool.Errorf(warmpool.CodePayloadTooLarge, "body: Content-Length %d is over this call's limit of %d bytes", r.ContentLength, limit)
	}
	return decode(w, r, v, false, limit)
}

func decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool, limit int64) error {
	b := bodies.Get().(*bytes.Buffer)
	defer func() {
		if b.Cap() <= keptBody {
			b.Reset()
			bodies.Put(b)
		}
	}()
	if err := readBody(w, r, b, limit); err != nil {
		return err
	}
	if allowEmpty && len(bytes.TrimSpace(b.Bytes())) == 0 {
		return nil
	}
	return DecodeStrict(b.Bytes(), v)
}

// noBodyMax is the most of a body that a call taking none reads: "{}" and some white
// space around it.
const noBodyMax = 64

// NoBody checks the body of a call that takes none: nothing, or the empty object {}
// (white space around either). Anything else, a list, trailing data, a field or a body
// longer than "{}" and some white space, is a VALIDATION error, found without reading
// more than noBodyMax bytes of it.
func NoBody(r *http.Request) error {
	var buf [noBodyMax + 1]byte
	n, err := io.ReadFull(r.Body, buf[:])
	switch {
	case n > noBodyMax:
		return warmpool.Errorf(warmpool.CodeValidation, "body: this call takes no body: send none, or {}")
	case err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
		return warmpool.Errorf(warmpool.CodeValidation, "body: %v", err)
	}
	b := bytes.TrimSpace(buf[:n])
	if len(b) == 0 {
		return nil
	}
	if err := DecodeStrict(b, &struct{}{}); err != nil {
		msg := err.Error()
		if e := (*warmpool.Error)(nil); errors.As(err, &e) {
			msg = e.Message
		}
		return warmpool.Errorf(warmpool.CodeValidation, "%s (this call takes no body: send none, or {})", msg)
	}
	return nil
}

// Bodyless is h for a call that takes no body: a body other than none or {} is refused
// (NoBody) before h runs.
func Bodyless(h Handler) Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := NoBody(r); err != nil {
			return err
		}
		return h(w, r)
	}
}

// Param returns a URL parameter checked by valid; a bad one is a VALIDATION error that
// names it.
func Param(r *http.Request, name string, valid func(string) bool, pattern string) (string, error) {
	v := chi.URLParam(r, name)
	if !valid(v) {
		return "", warmpool.Errorf(warmpool.CodeValidation, "%s: must match %s", name, pattern)
	}
	return v, nil
}

// Scope returns the {scope} URL parameter, validated.
func Scope(r *http.Request) (string, error) {
	return Param(r, "scope", warmpool.ValidScopeID, "^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
}

// Session returns the {session} URL parameter, validated.
func Session(r *http.Request) (string, error) {
	return Param(r, "session", warmpool.ValidSessionID, "^[A-Za-z0-9._:-]{1,128}$")
}

// OnScope serves a call on the scope the URL names ({scope}): the id is validated,
// then call runs and its result is answered as reply(scope, result).
func OnScope[T any](call func(ctx context.Context, scope string) (T, error), reply func(scope string, v T) any) Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		scope, err := Scope(r)
		if err != nil {
			return err
		}
		v, err := call(r.Context(), scope)
		if err != nil {
			return err
		}
		return OK(w, reply(scope, v))
	}
}

// Recover turns a panic in a handler into an INTERNAL envelope instead of a dropped
// connection; WriteError logs the panic with its request id.
func Recover(log *slog.Logger) func(http.Handler) http.Handler {
	return RecoverWith(func(w http.ResponseWriter, r *http.Request, err error) { WriteError(w, r, log, err) })
}

// RecoverWith is Recover with the answer written by write (an API of another error
// shape), which must log the INTERNAL error it is given.
func RecoverWith(write func(w http.ResponseWriter, r *http.Request, err error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if p := recover(); p != nil {
					if p == http.ErrAbortHandler {
						panic(p)
					}
					write(w, r, fmt.Errorf("panic: %v", p))
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// AccessLog logs each request, with its request id when it runs inside RequestID and
// log's handler is a LogHandler: successes at debug level, 4xx answers at info, 5xx
// answers at error.
func AccessLog(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ww := &statusWriter{ResponseWriter: w}
			start := time.Now()
			next.ServeHTTP(ww, r)
			level := slog.LevelDebug
			switch status := ww.Status(); {
			case status >= 500:
				level = slog.LevelError
			case status >= 400:
				level = slog.LevelInfo
			}
			// Asked first: the arguments of a line that is not logged cost allocations
			// on every call (debug lines are off in production).
			if log.Enabled(r.Context(), level) {
				log.Log(r.Context(), level, "http", "method", r.Method, "path", r.URL.Path, "status", ww.Status(),
					"took", time.Since(start))
			}
		})
	}
}

// statusWriter keeps the status of an answer for AccessLog. It is written here, not
// taken from chi's middleware package, because that package imports net/http/pprof:
// linking it keeps the runtime's memory profiling on (a sampled stack for every
// 512 KiB allocated, 1.5 MB of a fresh replica's RSS) for a profile nothing serves.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= http.StatusOK || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status is the status the client got: 200 when the handler wrote nothing.
func (w *statusWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// NotFound and MethodNotAllowed answer unknown routes in the envelope.
func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusNotFound, envelope{Error: envelopeBody{Code: "NOT_FOUND", Message: "no route " + r.Method + " " + r.URL.Path}})
}

// MethodNotAllowed answers a known path with the wrong method.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusMethodNotAllowed, envelope{Error: envelopeBody{Code: "METHOD_NOT_ALLOWED", Message: r.Method + " is not allowed on " + r.URL.Path}})
}
