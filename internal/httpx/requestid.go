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

type requestIDKey struct{}

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
		next.ServeHTTP(w, r.WithContext(WithRequestID(r.Context(), id)))
	})
}

// WithRequestID returns ctx carrying the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFrom is the request id ctx carries, "" for none.
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
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
