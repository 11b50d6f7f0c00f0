// Package e2b is warmpool's E2B-compatible front door (SPEC §12.3): the part of E2B's
// control plane an E2B SDK needs to create, look up, list, time out, connect to and
// kill sandboxes, served on a listener of its own (`serve --e2b-listen`), in E2B's
// routes, shapes and error codes (docs/e2b.md).
//
// A sandbox is a session of the scope its templateID names, whose session id is the
// sandbox id: the agent is reached as any session's, at its pod (GET
// /v1/scopes/{templateID}/sessions/{sandboxID}). The session's expiry is fixed at the
// sandbox's timeout, which activity does not move (warmpool.RouteOptions.FixedTTL). A small
// record per sandbox (redisstore.Sandbox: scope, start, metadata) lets a call that names only
// the sandbox find its scope with one read, and orders the list.
package e2b

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/redisstore"
)

// Defaults and bounds of the front door, E2B's where E2B has one.
const (
	// DefaultTimeout is the timeout of a sandbox created (POST /v2/sandboxes) or
	// connected to without one, DefaultTimeoutV1 that of POST /sandboxes.
	DefaultTimeout   = 300 * time.Second
	DefaultTimeoutV1 = 15 * time.Second
	// MaxTimeout bounds every timeout, as E2B's longest plan does.
	MaxTimeout = 24 * time.Hour
	// MaxMetadata bounds a sandbox's metadata, encoded as JSON.
	MaxMetadata = 16 << 10
	// EnvdPort is the port of the daemon (envd) an E2B sandbox runs, which the SDK
	// addresses for the sandbox's health (isRunning) and its files and commands.
	EnvdPort = 49983
	// EnvdVersion is the envd version the answers name: warmpool runs no envd, and
	// the SDK refuses a sandbox whose envd is older than 0.1.0.
	EnvdVersion = "0.1.0"
	// ClientID fills E2B's deprecated clientID field.
	ClientID = "warmpool"
	// pruneGrace is how long past its deadline a sandbox's record is kept before a
	// create prunes it: a deadline moved meanwhile (set_timeout, connect) is written
	// after the session's, so a record is never pruned under a live session.
	pruneGrace = time.Minute
	// pruneBatch bounds the records one create prunes.
	pruneBatch = 100
)

// Sessions is what the front door needs of the session manager (sm.Manager).
type Sessions interface {
	// RouteWith binds a new sandbox's session (with a fixed TTL).
	RouteWith(ctx context.Context, scope, session string, o warmpool.RouteOptions) (warmpool.Binding, error)
	Get(ctx context.Context, scope, session string) (warmpool.Binding, error)
	End(ctx context.Context, scope, session string) (bool, error)
	Deadline(ctx context.Context, scope, session string, ttl time.Duration, later bool) (time.Time, error)
}

// Records is the store of the sandboxes' records (redisstore.Store).
type Records interface {
	SandboxAdd(ctx context.Context, sb redisstore.Sandbox, deadline time.Time) error
	SandboxGet(ctx context.Context, id string) (redisstore.Sandbox, bool, error)
	SandboxDeadline(ctx context.Context, id string, deadline time.Time) error
	SandboxRemove(ctx context.Context, ids ...string) error
	SandboxPrune(ctx context.Context, before time.Time, limit int) (int, error)
	SandboxScan(ctx context.Context, asc bool, after redisstore.SandboxCursor, n int) ([]redisstore.Sandbox, error)
}

// Scopes reads a scope's published config (redisstore.Store), for the sizes a sandbox
// reports (cpuCount, memoryMB).
type Scopes interface {
	Scope(ctx context.Context, scope string) (redisstore.ScopeRecord, error)
}

// Configs seals a sandbox's envVars as its session's config (sessionconfig.Service).
type Configs interface {
	Seal(scope string, c *warmpool.SessionConfig) ([]byte, error)
}

// Config is what a Server is built from; zero fields take defaults.
type Config struct {
	Sessions Sessions
	Records  Records
	Scopes   Scopes
	// Configs seals envVars (SPEC §12.2); nil: a sandbox with envVars is refused.
	Configs Configs
	// Gateway and Admin are the tokens X-API-Key is checked against, as the bearer
	// token of /v1 is (httpx.Auth): with a gateway token set, a call needs it or the
	// admin token; with none, every call is open. Either may be nil.
	Gateway, Admin *httpx.Token
	Clock          warmpool.Clock
	Logger         *slog.Logger
	// NewID makes sandbox ids (default: 20 lowercase hex digits, of warmpool.NewID).
	NewID func() string
}

// Server serves the front door.
type Server struct {
	cfg Config
	log *slog.Logger
}

// New returns the front door of cfg.
func New(cfg Config) *Server {
	cfg.Clock, cfg.Logger = defaults.Clock(cfg.Clock), defaults.Logger(cfg.Logger)
	if cfg.NewID == nil {
		cfg.NewID = func() string { return warmpool.NewID()[:20] }
	}
	return &Server{cfg: cfg, log: cfg.Logger.With("component", "e2b")}
}

// handler is the shape of the front door's handlers (httpx.Handler's): an error it
// returns is written in E2B's shape by adapt.
type handler func(w http.ResponseWriter, r *http.Request) error

// Handler is the front door's router behind middleware (the replica's request ids,
// access log and time bounds): the one place that lists its routes.
func (s *Server) Handler(middleware ...func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware...)
	r.Use(httpx.RecoverWith(s.writeError), s.sandboxTraffic)
	r.NotFound(s.adapt(notFound))
	r.MethodNotAllowed(s.adapt(methodNotAllowed))
	r.Method(http.MethodGet, "/health", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	r.Group(func(r chi.Router) {
		r.Use(s.auth)
		r.With(httpx.Waits).Method(http.MethodPost, "/sandboxes", s.adapt(s.create(DefaultTimeoutV1)))
		r.With(httpx.Waits).Method(http.MethodPost, "/v2/sandboxes", s.adapt(s.create(DefaultTimeout)))
		r.Method(http.MethodGet, "/sandboxes", s.adapt(s.listAll))
		r.Method(http.MethodGet, "/v2/sandboxes", s.adapt(s.listPage))
		r.Method(http.MethodGet, "/sandboxes/{sandboxID}", s.adapt(s.get))
		r.Method(http.MethodDelete, "/sandboxes/{sandboxID}", s.adapt(s.kill))
		r.Method(http.MethodPost, "/sandboxes/{sandboxID}/timeout", s.adapt(s.setTimeout))
		r.Method(http.MethodPost, "/sandboxes/{sandboxID}/connect", s.adapt(s.connect(0)))
		r.Method(http.MethodPost, "/v2/sandboxes/{sandboxID}/connect", s.adapt(s.connect(DefaultTimeout)))
		s.unsupported(r)
	})
	return r
}

// adapt serves a handler, within the request's call bound (httpx.Bounds), writing
// the error it returns in E2B's shape.
func (s *Server) adapt(h handler) http.HandlerFunc {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, cancel := httpx.CallContext(r)
		defer cancel()
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// apiError is E2B's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// refusal is an answer of the front door's own with its status: a route it does not
// know (404), a method (405), what it does not support (501), a gone sandbox's envd
// (502).
type refusal struct {
	status  int
	message string
}

func (e *refusal) Error() string { return e.message }

func refuse(status int, format string, args ...any) error {
	return &refusal{status: status, message: fmt.Sprintf(format, args...)}
}

// writeError answers err in E2B's shape: a refusal with its status, a domain error
// with the status warmpool gives its code (the status E2B answers the like with: 400,
// 401, 404, 413, 502, 503, 504, …) and Retry-After when it has one.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if ref, ok := errors.AsType[*refusal](err); ok {
		httpx.WriteJSON(w, ref.status, apiError{Code: ref.status, Message: ref.message})
		return
	}
	e := httpx.ErrorOf(r, s.log, err)
	if e == nil {
		return
	}
	status := httpx.Status(e.Code)
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	httpx.WriteJSON(w, status, apiError{Code: status, Message: e.Message})
}

// auth checks X-API-Key (see Config.Gateway).
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Gateway != nil {
			key := []byte(r.Header.Get("X-API-Key"))
			if !s.cfg.Gateway.Matches(key) && !s.cfg.Admin.Matches(key) {
				s.writeError(w, r, warmpool.Errorf(warmpool.CodeUnauthorized, "missing or wrong X-API-Key"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func notFound(_ http.ResponseWriter, r *http.Request) error {
	return refuse(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
}

func methodNotAllowed(_ http.ResponseWriter, r *http.Request) error {
	return refuse(http.StatusMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path)
}
