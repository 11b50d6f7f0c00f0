package httpx

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/warmpool/warmpool"
)

// HeaderRequestID carries a request's id: from the caller, when it sends one, and back
// on every response.
const HeaderRequestID = "X-Request-Id"

// LogKeyRequestID is the log attribute of the id of the request a line is about.
const LogKeyRequestID = "request_id"

// request is what the middleware learn about one request, kept in its context under
// one key: RequestID puts it there and Bounds, Waits and Auth fill it in place, so
// that a request is copied once for all of them (each r.WithContext copies the
// request, about 300 bytes of a warm route's garbage) instead of once each. A
// middleware that finds none adds one (stateOf).
type request struct {
	id      string
	bounds  bounds // set by Bounds (bounded) and Waits
	bounded bool
	access  access // set by Auth; accessNone until it runs
}

type requestKey struct{}

// stateOf is r's request state, and r or, when no middleware added one yet, a copy
// of r that carries a new one.
func stateOf(r *http.Request) (*request, *http.Request) {
	if st, ok := r.Context().Value(requestKey{}).(*request); ok {
		return st, r
	}
	st := &request{}
	return st, r.WithContext(context.WithValue(r.Context(), requestKey{}, st))
}

// RequestID gives each request an id: the caller's X-Request-Id when it is a valid
// request id (1-128 chars of [A-Za-z0-9._:/+=-]), else a new warmpool.NewID. The id
// goes back in the response's X-Request-Id header and rides in the request's context,
// where LogHandler puts it on every line logged with that context: the access line and
// the lines of the managers and drivers working for the request.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderRequestID)
		if !warmpool.ValidRequestID(id) {
			id = warmpool.NewID()
		}
		w.Header().Set(HeaderRequestID, id)
		st, r := stateOf(r)
		st.id = id
		next.ServeHTTP(w, r)
	})
}

// WithRequestID returns ctx carrying the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestKey{}, &request{id: id})
}

// RequestIDFrom is the request id ctx carries, "" for none.
func RequestIDFrom(ctx context.Context) string {
	if st, ok := ctx.Value(requestKey{}).(*request); ok {
		return st.id
	}
	return ""
}

// LogHandler wraps h so that a record logged with a context that carries a request id
// gets the id as its request_id attribute.
func LogHandler(h slog.Handler) slog.Handler { return contextHandler{h} }

type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestIDFrom(ctx); id != "" {
		r = r.Clone()
		r.AddAttrs(slog.String(LogKeyRequestID, id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}
