package client

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The defaults of New.
const (
	// DefaultMaxAttempts is how many times a call is sent at most, its first time
	// included.
	DefaultMaxAttempts = 5
	// DefaultRetryBudget bounds a call with its retries and the waits between them.
	DefaultRetryBudget = 30 * time.Second
	// DefaultBackoffBase is the wait before the first retry, doubled for each next
	// one (unless the server's Retry-After is longer).
	DefaultBackoffBase = 100 * time.Millisecond
	// DefaultBackoffMax caps the doubled wait.
	DefaultBackoffMax = 5 * time.Second
	// DefaultUserAgent is the User-Agent of every call.
	DefaultUserAgent = "warmpool-go-client"
)

// Client calls one warmpool service (one replica, or the Service in front of
// several). It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[/path], no trailing slash
	http      *http.Client
	token     string
	userAgent string
	log       *slog.Logger
	retry     retryPolicy
}

// settings are what the Options set, checked by New.
type settings struct {
	httpClient *http.Client
	transport  http.RoundTripper
	token      string
	userAgent  string
	log        *slog.Logger
	retry      retryPolicy
}

// Option configures a Client.
type Option func(*settings)

// WithToken sends "Authorization: Bearer token" on every call: the gateway token of
// --auth-token.
func WithToken(token string) Option { return func(s *settings) { s.token = token } }

// WithHTTPClient makes the calls with a copy of hc (its Timeout bounds each attempt,
// its Transport carries them). Default: a client of http.DefaultTransport.
func WithHTTPClient(hc *http.Client) Option { return func(s *settings) { s.httpClient = hc } }

// WithTransport carries every attempt through rt, whichever http.Client is used: the
// hook to add tracing, metrics, mTLS or a test double.
func WithTransport(rt http.RoundTripper) Option { return func(s *settings) { s.transport = rt } }

// WithMaxAttempts sends a call at most n times (n >= 1; 1 turns retries off).
func WithMaxAttempts(n int) Option { return func(s *settings) { s.retry.attempts = n } }

// WithRetryBudget bounds the retries of each call to d from its start (d >= 0; 0: the
// attempts and the context alone bound them): a wait that would end past the budget
// is not begun, and the call returns its last error. An attempt itself is bounded by
// the context (and the http.Client's Timeout), not by the budget: a route may wait
// in the scope's queue on the server for up to its wait_timeout_s.
func WithRetryBudget(d time.Duration) Option { return func(s *settings) { s.retry.budget = d } }

// WithBackoff sets the wait before the first retry (base) and the cap of its doubling
// (maximum); 0 < base <= maximum.
func WithBackoff(base, maximum time.Duration) Option {
	return func(s *settings) { s.retry.base, s.retry.max = base, maximum }
}

// WithLogger logs each retry (at Info, with the call, the attempt, the wait and the
// error) to log. Default: no logs.
func WithLogger(log *slog.Logger) Option { return func(s *settings) { s.log = log } }

// WithUserAgent sets the User-Agent header (default DefaultUserAgent).
func WithUserAgent(ua string) Option { return func(s *settings) { s.userAgent = ua } }

// New returns a client of the service at baseURL (http or https, with a path prefix
// when a proxy serves warmpool under one), or an error naming a bad URL or option.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("warmpool client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("warmpool client: base URL %q: want http(s)://host[:port][/path], no query", baseURL)
	}
	s := settings{userAgent: DefaultUserAgent, retry: retryPolicy{attempts: DefaultMaxAttempts, budget: DefaultRetryBudget,
		base: DefaultBackoffBase, max: DefaultBackoffMax}}
	for _, o := range opts {
		o(&s)
	}
	if err := s.retry.check(); err != nil {
		return nil, fmt.Errorf("warmpool client: %w", err)
	}
	hc := &http.Client{}
	if s.httpClient != nil {
		copied := *s.httpClient
		hc = &copied
	}
	if s.transport != nil {
		hc.Transport = s.transport
	}
	s.retry.jitter = rand.Int64N
	return &Client{base: strings.TrimSuffix(u.String(), "/"), http: hc, token: s.token, userAgent: s.userAgent,
		log: s.log, retry: s.retry}, nil
}

// CallOption configures one call.
type CallOption func(*callSettings)

type callSettings struct {
	idemKey       string
	sessionConfig *SessionConfig
}

// WithIdempotencyKey sends key as the call's Idempotency-Key instead of a new one: a
// gateway that retries a route of its own (after a crash, say) passes the key of the
// first try, and the server answers it the first try's pod. 1-128 characters of
// [A-Za-z0-9._:/+=-]; the server refuses another with VALIDATION.
func WithIdempotencyKey(key string) CallOption { return func(c *callSettings) { c.idemKey = key } }

// WithSessionConfig sends cfg as the route's or the acquire's session_config: the
// environment the pod's agent reads for this session. Only Route and Acquire take it;
// the field is sent only with this option, as a server that does not know it refuses
// it.
func WithSessionConfig(cfg SessionConfig) CallOption {
	return func(c *callSettings) { c.sessionConfig = &cfg }
}

// SessionConfig is a session's own configuration for its pod's agent.
type SessionConfig struct {
	// Env are variables by name (a C identifier).
	Env map[string]string `json:"env,omitempty"`
	// SecretRefs are variables whose value the server reads from a Secret.
	SecretRefs map[string]SecretRef `json:"secret_refs,omitempty"`
}

// SecretRef names one key of a Secret.
type SecretRef struct {
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

// errNoSessionConfig refuses WithSessionConfig on a call that does not take it.
var errNoSessionConfig = errors.New("warmpool client: only Route and Acquire take WithSessionConfig")

// callOptions applies opts; takesConfig says whether the call takes a session config.
func callOptions(opts []CallOption, takesConfig bool) (callSettings, error) {
	var cs callSettings
	for _, o := range opts {
		o(&cs)
	}
	if cs.sessionConfig != nil && !takesConfig {
		return cs, errNoSessionConfig
	}
	return cs, nil
}
