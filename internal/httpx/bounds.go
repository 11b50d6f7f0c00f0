package httpx

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/warmpool/warmpool"
)

// WriteMargin is how long a call that ran into its bound has to write its answer:
// the connection's write deadline is the call's bound plus this.
const WriteMargin = 5 * time.Second

// bounds are the time bounds of one request (Bounds), kept in its request state.
type bounds struct {
	call  time.Duration // the handler's context of a call that does not wait
	wait  time.Duration // the write deadline of a call that waits
	waits bool          // the route is marked with Waits
}

// Bounds gives every request the bounds of a call that does not wait: its handler's
// context ends after call (so that it answers STORE_UNAVAILABLE instead of running on
// with nobody reading), and its answer must be written within call + WriteMargin.
// Routes marked with Waits may run up to wait instead. A slow client or a stuck call
// therefore holds a connection for seconds, not for the longest legitimate wait.
func Bounds(call, wait time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(call + WriteMargin))
			st, r := stateOf(r)
			st.bounds, st.bounded = bounds{call: call, wait: wait}, true
			next.ServeHTTP(w, r)
		})
	}
}

// Waits marks a route whose call may wait long: a session route or an acquire, which
// queue for capacity and wait for a deploy within the scope's wait_timeout_s and
// ready_timeout_s. Its answer may take the wait bound of Bounds, and its handler's
// context keeps no call bound (the managers bound their own waits).
func Waits(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, ok := r.Context().Value(requestKey{}).(*request)
		if !ok || !st.bounded {
			next.ServeHTTP(w, r)
			return
		}
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(st.bounds.wait))
		st.bounds.waits = true
		next.ServeHTTP(w, r)
	})
}

// CallContext bounds the context of a request that Bounds saw and Waits did not mark,
// as Adapter does for its handlers: a handler of another shape calls it first.
func CallContext(r *http.Request) (*http.Request, context.CancelFunc) {
	st, ok := r.Context().Value(requestKey{}).(*request)
	if !ok || !st.bounded || st.bounds.waits || st.bounds.call <= 0 {
		return r, func() {}
	}
	ctx, cancel := context.WithTimeout(r.Context(), st.bounds.call)
	return r.WithContext(ctx), cancel
}

// LimitBody answers 413 PAYLOAD_TOO_LARGE at once to a request that declares a
// Content-Length over MaxBody, without waiting for a body it would refuse anyway; the
// connection is closed after the answer, as its unread body cannot be skipped. Bodies
// of no declared length are cut at MaxBody as they are read (Body).
func LimitBody(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > MaxBody {
				w.Header().Set("Connection", "close")
				WriteError(w, r, log, warmpool.Errorf(warmpool.CodePayloadTooLarge,
					"body: Content-Length %s is over the limit of %d bytes", strconv.FormatInt(r.ContentLength, 10), MaxBody))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
