package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/redisstore"
)

// sandboxJSON is E2B's Sandbox: what create and connect answer. Without envd and a
// proxy of its own, warmpool gives no access tokens and no domain (the SDK then
// addresses the sandbox by E2B_SANDBOX_URL or its E2B_DOMAIN).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

func sandboxOf(scope, id string) sandboxJSON {
	return sandboxJSON{TemplateID: scope, SandboxID: id, ClientID: ClientID, EnvdVersion: EnvdVersion}
}

// listedJSON is E2B's ListedSandbox; detailJSON its SandboxDetail (GET).
type listedJSON struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

type detailJSON struct {
	listedJSON
	Domain    *string       `json:"domain"`
	Lifecycle lifecycleJSON `json:"lifecycle"`
}

// lifecycleJSON is E2B's SandboxLifecycle: a warmpool sandbox is killed at its
// timeout and never resumes.
type lifecycleJSON struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// listed is the listing of a live sandbox.
func (s *Server) listed(ctx context.Context, sb redisstore.Sandbox, b warmpool.Binding, sizes map[string]size) listedJSON {
	sz, ok := sizes[sb.Scope]
	if !ok {
		sz = s.sizeOf(ctx, sb.Scope)
		sizes[sb.Scope] = sz
	}
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return listedJSON{TemplateID: sb.Scope, SandboxID: sb.ID, ClientID: ClientID, StartedAt: sb.Started.UTC(),
		EndAt: b.ExpiresAt.UTC(), CPUCount: sz.cpus, MemoryMB: sz.memoryMB, Metadata: md, State: "running", EnvdVersion: EnvdVersion}
}

// newSandbox is E2B's NewSandbox (and NewSandboxV2). Fields E2B has and warmpool
// cannot honour are refused when set (unsupportedCreate); others are ignored, as E2B
// ignores fields it does not know.
type newSandbox struct {
	TemplateID          string                  `json:"templateID"`
	Timeout             *int64                  `json:"timeout"`
	Metadata            map[string]string       `json:"metadata"`
	EnvVars             map[string]string       `json:"envVars"`
	AutoPause           bool                    `json:"autoPause"`
	AutoResume          *struct{ Enabled bool } `json:"autoResume"`
	AllowInternetAccess *bool                   `json:"allow_internet_access"`
	Network             json.RawMessage         `json:"network"`
	MCP                 json.RawMessage         `json:"mcp"`
	IAM                 *struct {
		Tokens map[string]json.RawMessage `json:"tokens"`
	} `json:"iam"`
	VolumeMounts []json.RawMessage `json:"volumeMounts"`
}

// create answers POST /sandboxes and /v2/sandboxes (whose default timeout differs):
// the template's scope routes a new session, its expiry fixed at the timeout, and the
// sandbox is recorded. 201 Sandbox.
func (s *Server) create(defaultTimeout time.Duration) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		var req newSandbox
		if err := decode(w, r, &req, false); err != nil {
			return err
		}
		if err := req.check(); err != nil {
			return err
		}
		ttl, err := timeoutOf(req.Timeout, defaultTimeout)
		if err != nil {
			return err
		}
		if ttl == 0 {
			return warmpool.Errorf(warmpool.CodeValidation, "timeout: a sandbox needs at least 1 second")
		}
		opts := warmpool.RouteOptions{FixedTTL: ttl}
		if err := s.sessionConfig(req.TemplateID, req.EnvVars, &opts); err != nil {
			return err
		}
		ctx := r.Context()
		id, err := s.open(ctx, req.TemplateID, opts)
		if err != nil {
			return err
		}
		if err := s.record(ctx, id, req, ttl); err != nil {
			cleanup, cancel := redisstore.CleanupContext(ctx)
			defer cancel()
			if _, eerr := s.cfg.Sessions.End(cleanup, req.TemplateID, id); eerr != nil {
				s.log.WarnContext(ctx, "unrecorded sandbox's session not ended; it ends at its timeout", "sandbox", id, "err", eerr)
			}
			return err
		}
		if _, err := s.cfg.Records.SandboxPrune(ctx, s.cfg.Clock.Now().Add(-pruneGrace), pruneBatch); err != nil {
			s.log.WarnContext(ctx, "sandbox records not pruned; the next create prunes them", "err", err)
		}
		httpx.WriteJSON(w, http.StatusCreated, sandboxOf(req.TemplateID, id))
		return nil
	}
}

// record records a new sandbox: it started when its session was bound, its timeout
// before the session's expiry, which is the record's deadline.
func (s *Server) record(ctx context.Context, id string, req newSandbox, ttl time.Duration) error {
	b, err := s.cfg.Sessions.Get(ctx, req.TemplateID, id)
	if err != nil {
		return err
	}
	return s.cfg.Records.SandboxAdd(ctx, redisstore.Sandbox{ID: id, Scope: req.TemplateID, Started: b.ExpiresAt.Add(-ttl), Metadata: req.Metadata}, b.ExpiresAt)
}

// check refuses a request warmpool cannot honour.
func (req *newSandbox) check() error {
	if !warmpool.ValidScopeID(req.TemplateID) {
		return warmpool.Errorf(warmpool.CodeValidation, "templateID: %q is no template: a template is a warmpool scope id (^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$)", req.TemplateID)
	}
	if raw, _ := json.Marshal(req.Metadata); len(raw) > MaxMetadata {
		return warmpool.Errorf(warmpool.CodeValidation, "metadata: %d bytes as JSON, at most %d", len(raw), MaxMetadata)
	}
	var unsupported string
	switch {
	case req.AutoPause:
		unsupported = "autoPause (a sandbox is killed at its timeout)"
	case req.AutoResume != nil && req.AutoResume.Enabled:
		unsupported = "autoResume"
	case req.AllowInternetAccess != nil && !*req.AllowInternetAccess:
		unsupported = "allow_internet_access: false (egress is the scope's NetworkPolicy's)"
	case set(req.Network):
		unsupported = "network (egress is the scope's NetworkPolicy's)"
	case set(req.MCP):
		unsupported = "mcp"
	case req.IAM != nil && len(req.IAM.Tokens) > 0:
		unsupported = "iam"
	case len(req.VolumeMounts) > 0:
		unsupported = "volumeMounts (volumes are the scope's pod template's)"
	}
	if unsupported != "" {
		return warmpool.Errorf(warmpool.CodeValidation, "%s: not supported by warmpool", unsupported)
	}
	return nil
}

// set reports whether an optional JSON value was given as more than null or {}.
func set(raw json.RawMessage) bool {
	v := string(raw)
	return v != "" && v != "null" && v != "{}"
}

// sessionConfig makes a sandbox's envVars its session's config (SPEC §12.2), sealed
// into opts: the sandbox's agent fetches them with its pod token, as any session's.
// Errors: VALIDATION naming envVars (a bad name, too many or too large, per-session
// config off).
func (s *Server) sessionConfig(scope string, env map[string]string, opts *warmpool.RouteOptions) error {
	if len(env) == 0 {
		return nil
	}
	if s.cfg.Configs == nil {
		return warmpool.Errorf(warmpool.CodeValidation, "envVars: per-session config is off on this front door")
	}
	sealed, err := s.cfg.Configs.Seal(scope, &warmpool.SessionConfig{Env: env})
	if err != nil {
		var e *warmpool.Error
		if errors.As(err, &e) && e.Code == warmpool.CodeValidation {
			return warmpool.Errorf(warmpool.CodeValidation, "%s", envVarsField(e.Message))
		}
		return err
	}
	opts.Config = sealed
	return nil
}

// envVarsField is a session_config's VALIDATION message of its env as E2B names the
// field: envVars.NAME for session_config.env.NAME.
func envVarsField(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "session_config.env."); ok {
		return "envVars." + rest
	}
	if rest, ok := strings.CutPrefix(msg, "session_config"); ok {
		return "envVars" + rest
	}
	return msg
}

// openAttempts bounds the ids a create tries: one that names a session bound already
// (an id drawn twice) is left to its session, and the create draws another.
const openAttempts = 3

// open routes the session of a new sandbox of scope and returns its id. Errors: those
// of a route; an unknown scope is E2B's 404 of a template.
func (s *Server) open(ctx context.Context, scope string, opts warmpool.RouteOptions) (string, error) {
	for range openAttempts {
		id := s.cfg.NewID()
		b, err := s.cfg.Sessions.RouteWith(ctx, scope, id, opts)
		if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
			return "", warmpool.Errorf(warmpool.CodeScopeNotFound, "template %q not found: no warmpool scope of that id", scope)
		}
		if err != nil {
			return "", err
		}
		if b.New {
			return id, nil
		}
	}
	return "", warmpool.Errorf(warmpool.CodeInternal, "no free sandbox id in %d draws", openAttempts)
}

// timeoutOf is a request's timeout (seconds), or def when it has none.
func timeoutOf(seconds *int64, def time.Duration) (time.Duration, error) {
	if seconds == nil {
		return def, nil
	}
	if *seconds < 0 || *seconds > int64(MaxTimeout/time.Second) {
		return 0, warmpool.Errorf(warmpool.CodeValidation, "timeout: %d seconds, must be 0 to %d", *seconds, int64(MaxTimeout/time.Second))
	}
	return time.Duration(*seconds) * time.Second, nil
}

// sandboxID is the {sandboxID} of the path, checked: E2B's ids, as warmpool makes
// them, are lowercase letters and digits.
func sandboxID(r *http.Request) (string, error) {
	id := chi.URLParam(r, "sandboxID")
	if !validSandboxID(id) {
		return "", warmpool.Errorf(warmpool.CodeValidation, "sandboxID: %q is not a sandbox id (lowercase letters and digits)", id)
	}
	return id, nil
}

func validSandboxID(id string) bool {
	if len(id) == 0 || len(id) > 63 {
		return false
	}
	for _, c := range []byte(id) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// errNoSandbox is E2B's 404 of a sandbox.
func errNoSandbox(id string) error {
	return warmpool.Errorf(warmpool.CodeSessionNotFound, "sandbox %q not found", id)
}

// isGone reports whether err says the sandbox's session is no more (ended, expired, or
// its scope gone).
func isGone(err error) bool {
	c := warmpool.ErrorCode(err)
	return c == warmpool.CodeSessionNotFound || c == warmpool.CodeScopeNotFound
}

// lookup is the record of the sandbox id; a missing one is E2B's 404.
func (s *Server) lookup(ctx context.Context, id string) (redisstore.Sandbox, error) {
	sb, ok, err := s.cfg.Records.SandboxGet(ctx, id)
	if err != nil {
		return redisstore.Sandbox{}, err
	}
	if !ok {
		return redisstore.Sandbox{}, errNoSandbox(id)
	}
	return sb, nil
}

// live is the record and the session of a live sandbox. The record of a sandbox whose
// session has gone is dropped, and the sandbox is E2B's 404.
func (s *Server) live(ctx context.Context, id string) (redisstore.Sandbox, warmpool.Binding, error) {
	sb, err := s.lookup(ctx, id)
	if err != nil {
		return redisstore.Sandbox{}, warmpool.Binding{}, err
	}
	b, err := s.cfg.Sessions.Get(ctx, sb.Scope, id)
	if isGone(err) {
		s.forget(ctx, id)
		return redisstore.Sandbox{}, warmpool.Binding{}, errNoSandbox(id)
	}
	return sb, b, err
}

// forget drops the records of sandboxes whose sessions have gone; a failure leaves
// them to the next look or the prune.
func (s *Server) forget(ctx context.Context, ids ...string) {
	if err := s.cfg.Records.SandboxRemove(ctx, ids...); err != nil {
		s.log.WarnContext(ctx, "records of gone sandboxes not dropped", "sandboxes", ids, "err", err)
	}
}

// get answers GET /sandboxes/{sandboxID}: 200 SandboxDetail.
func (s *Server) get(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sb, b, err := s.live(r.Context(), id)
	if err != nil {
		return err
	}
	d := detailJSON{listedJSON: s.listed(r.Context(), sb, b, map[string]size{}), Lifecycle: lifecycleJSON{OnTimeout: "kill"}}
	return httpx.OK(w, d)
}

// kill answers DELETE /sandboxes/{sandboxID}: the session ends (its slot freed), the
// record goes. 204.
func (s *Server) kill(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	sb, _, err := s.live(ctx, id)
	if err != nil {
		return err
	}
	ended, err := s.cfg.Sessions.End(ctx, sb.Scope, id)
	if err != nil && !isGone(err) {
		return err
	}
	s.forget(ctx, id)
	if !ended {
		return errNoSandbox(id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
}

// setTimeout answers POST /sandboxes/{sandboxID}/timeout: the sandbox ends timeout
// seconds from now, sooner or later than it would have. 204.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req timeoutRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	if req.Timeout == nil {
		return warmpool.Errorf(warmpool.CodeValidation, "timeout: required")
	}
	ttl, err := timeoutOf(req.Timeout, 0)
	if err != nil {
		return err
	}
	if _, err := s.deadline(r.Context(), id, ttl, false); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect answers POST /sandboxes/{sandboxID}/connect (timeout required, def 0) and
// /v2/…/connect (timeout optional, def its default): the sandbox ends no sooner than
// timeout seconds from now (its end only moves later, as E2B's connect does). 200
// Sandbox.
func (s *Server) connect(def time.Duration) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := sandboxID(r)
		if err != nil {
			return err
		}
		var req timeoutRequest
		if err := decode(w, r, &req, def > 0); err != nil {
			return err
		}
		if req.Timeout == nil && def == 0 {
			return warmpool.Errorf(warmpool.CodeValidation, "timeout: required")
		}
		ttl, err := timeoutOf(req.Timeout, def)
		if err != nil {
			return err
		}
		sb, err := s.deadline(r.Context(), id, ttl, true)
		if err != nil {
			return err
		}
		return httpx.OK(w, sandboxOf(sb.Scope, id))
	}
}

// deadline moves a sandbox's end to ttl from now (with later, only later), in its
// session and then in its record.
func (s *Server) deadline(ctx context.Context, id string, ttl time.Duration, later bool) (redisstore.Sandbox, error) {
	sb, err := s.lookup(ctx, id)
	if err != nil {
		return redisstore.Sandbox{}, err
	}
	at, err := s.cfg.Sessions.Deadline(ctx, sb.Scope, id, ttl, later)
	if isGone(err) {
		s.forget(ctx, id)
		return redisstore.Sandbox{}, errNoSandbox(id)
	}
	if err != nil {
		return redisstore.Sandbox{}, err
	}
	return sb, s.cfg.Records.SandboxDeadline(ctx, id, at)
}

// decode reads a JSON object body into v as E2B does: unknown fields are ignored,
// bodies over httpx.MaxBody are 413; an empty body leaves v as it is when
// allowEmpty.
func decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	body, err := httpx.Body(w, r)
	if err != nil {
		return err
	}
	if allowEmpty && len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) || len(body) == 0 {
			return warmpool.Errorf(warmpool.CodeValidation, "body: malformed JSON")
		}
		return warmpool.Errorf(warmpool.CodeValidation, "body: %v", err)
	}
	return nil
}
