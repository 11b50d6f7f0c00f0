package httpx

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/warmpool/warmpool"
)

// Token is one bearer token: a fixed value, or the content of a file that is re-read
// when the file changes, so a token rotates without a restart. A nil *Token is "no
// token configured".
type Token struct {
	path string
	log  *slog.Logger
	cur  atomic.Pointer[tokenState]
	mu   sync.Mutex // one reload at a time
}

// tokenState is what a Token holds at one moment: the digest of its value (nil when the
// file could not be read: nothing matches then) and the file's identity when read.
type tokenState struct {
	digest *[sha256.Size]byte
	file   os.FileInfo
}

// FixedToken returns a Token of value; an empty value is no token (nil).
func FixedToken(value string) *Token {
	if value == "" {
		return nil
	}
	t := &Token{}
	d := sha256.Sum256([]byte(value))
	t.cur.Store(&tokenState{digest: &d})
	return t
}

// FileToken returns a Token read from the file at path: its content without leading
// and trailing white space. The file must exist and hold a token now. Later, each check
// stats the file and re-reads it when its size, modification time or identity changed
// (an atomic rename or a Kubernetes Secret volume update); while it cannot be read or
// is empty, the token matches nothing, so access is refused, never opened.
func FileToken(path string, log *slog.Logger) (*Token, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Token{path: path, log: log}
	st, err := t.read()
	if err != nil {
		return nil, err
	}
	t.cur.Store(st)
	return t, nil
}

// read reads the token file into a state.
func (t *Token) read() (*tokenState, error) {
	info, err := os.Stat(t.path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	raw, err := os.ReadFile(t.path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	v := bytes.TrimSpace(raw)
	if len(v) == 0 {
		return &tokenState{file: info}, fmt.Errorf("token file %s: empty", t.path)
	}
	d := sha256.Sum256(v)
	return &tokenState{digest: &d, file: info}, nil
}

// state returns the current state, re-reading the file when it changed.
func (t *Token) state() *tokenState {
	st := t.cur.Load()
	if t.path == "" {
		return st
	}
	info, err := os.Stat(t.path)
	if err == nil && st.file != nil && sameFile(info, st.file) {
		return st
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st = t.cur.Load(); err == nil && st.file != nil && sameFile(info, st.file) {
		return st // another request reloaded it
	}
	next, err := t.read()
	if next == nil {
		next = &tokenState{}
	}
	if err != nil {
		if st.digest != nil {
			t.log.Error("token file unreadable: the token is refused until it is fixed", "path", t.path, "err", err)
		}
	} else {
		t.log.Info("token file changed: the new token is in use", "path", t.path)
	}
	t.cur.Store(next)
	return next
}

// sameFile reports whether a and b describe the same, unchanged file.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// Matches reports in constant time whether got is the token (false for a nil Token:
// none configured). Comparing digests keeps the time independent of the token's
// length too.
func (t *Token) Matches(got []byte) bool {
	if t == nil || got == nil {
		return false
	}
	st := t.state()
	if st.digest == nil {
		return false
	}
	d := sha256.Sum256(got)
	return subtle.ConstantTimeCompare(d[:], st.digest[:]) == 1
}

// access is what a request's credentials allow.
type access int

const (
	accessNone    access = iota // no valid token: only the calls open to anyone
	accessGateway               // the gateway token: every call but the admin ones
	accessAdmin                 // the admin token (or no auth at all): every call
)

// Auth checks the bearer token of every request it guards (SPEC §10, "Two tokens").
// With a gateway token set, every call needs the gateway or the admin token; admin
// calls (marked with RequireAdmin) need the admin token when one is set, and get 403
// FORBIDDEN with the gateway token. The admin token is accepted everywhere. Either
// token may be nil (not configured); with neither, every call is open.
func Auth(gateway, admin *Token, log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := bearer(r)
			var acc access
			switch {
			case admin.Matches(got):
				acc = accessAdmin
			case gateway.Matches(got):
				acc = accessGateway
				if admin == nil {
					acc = accessAdmin // without an admin token the gateway token does everything
				}
			case gateway != nil:
				WriteError(w, r, log, warmpool.Errorf(warmpool.CodeUnauthorized, "missing or wrong bearer token"))
				return
			case admin != nil:
				acc = accessNone
			default:
				acc = accessAdmin
			}
			st, r := stateOf(r)
			st.access = acc
			next.ServeHTTP(w, r)
		})
	}
}

// RequireAdmin lets only requests that Auth found to carry the admin token (or that
// need none) through: the gateway token gets 403 FORBIDDEN, no token 401. A request
// Auth did not see is refused.
func RequireAdmin(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			acc := accessNone // a request Auth did not see
			if st, ok := r.Context().Value(requestKey{}).(*request); ok {
				acc = st.access
			}
			switch acc {
			case accessAdmin:
				next.ServeHTTP(w, r)
			case accessGateway:
				WriteError(w, r, log, warmpool.Errorf(warmpool.CodeForbidden, "%s %s needs the admin token", r.Method, r.URL.Path))
			default:
				WriteError(w, r, log, warmpool.Errorf(warmpool.CodeUnauthorized, "%s %s needs the admin token", r.Method, r.URL.Path))
			}
		})
	}
}

// bearer returns the token of an "Authorization: Bearer <token>" header, the scheme
// matched case-insensitively (RFC 9110 §11.1), or nil.
func bearer(r *http.Request) []byte {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return nil
	}
	return []byte(token)
}
