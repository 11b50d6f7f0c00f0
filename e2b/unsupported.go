package e2b

import (
	"net/http"
	"regexp"
	"strconv"

	"github.com/go-chi/chi/v5"
)

// unsupported routes the parts of E2B's API warmpool does not serve to E2B's answer
// for a feature a deployment lacks, 501, naming what is not supported (docs/e2b.md
// lists them). Any other route is a 404.
func (s *Server) unsupported(r chi.Router) {
	sandbox := map[string][]string{
		"pause":     {http.MethodPost},
		"resume":    {http.MethodPost},
		"fork":      {http.MethodPost},
		"snapshots": {http.MethodPost},
		"refreshes": {http.MethodPost},
		"network":   {http.MethodPut},
		"metrics":   {http.MethodGet},
		"logs":      {http.MethodGet},
	}
	for what, methods := range sandbox {
		for _, m := range methods {
			r.Method(m, "/sandboxes/{sandboxID}/"+what, s.notSupported("sandbox "+what))
		}
	}
	r.Method(http.MethodGet, "/v2/sandboxes/{sandboxID}/logs", s.notSupported("sandbox logs"))
	r.Method(http.MethodGet, "/sandboxes/metrics", s.notSupported("sandbox metrics"))
	r.Method(http.MethodGet, "/snapshots", s.notSupported("snapshots"))
	// Whole APIs: a template is a scope, put through warmpool's /v1 API.
	for prefix, what := range map[string]string{
		"/templates":    "the templates API (a template is a warmpool scope: PUT /v1/scopes/{scope}/config)",
		"/v2/templates": "the templates API", "/v3/templates": "the templates API",
		"/teams": "teams", "/volumes": "volumes", "/secrets": "secrets", "/api-keys": "API keys",
		"/access-tokens": "access tokens", "/nodes": "nodes", "/admin": "the admin API",
	} {
		h := s.notSupported(what)
		r.Handle(prefix, h)
		r.Handle(prefix+"/*", h)
	}
}

// notSupported answers 501 for what.
func (s *Server) notSupported(what string) http.Handler {
	return s.adapt(func(http.ResponseWriter, *http.Request) error {
		return refuse(http.StatusNotImplemented, "%s: not supported by warmpool (docs/e2b.md)", what)
	})
}

// Sandbox traffic. Besides the API, the SDK talks to each sandbox itself: to its
// envd daemon on EnvdPort (isRunning asks GET /health; files, commands and pty go
// there too) and to the ports its code serves. It sends that traffic to E2B_SANDBOX_URL
// naming the sandbox and port in the E2b-Sandbox-Id and E2b-Sandbox-Port headers, or
// else to https://<port>-<sandboxID>.<domain>. Pointed at this listener (the URL, or
// a wildcard name through an ingress that keeps the host), such a request is answered
// here: envd's GET /health is 204 while the sandbox lives and 502 once it is gone (the
// SDK's "not running"); the rest of envd and other ports are 501, as warmpool runs no
// envd and proxies no port: the agent is reached at its pod, the session's.

// sandboxHost is a sandbox's host name, <port>-<sandboxID>.<domain>.
var sandboxHost = regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9]{1,63})\.`)

// sandboxTraffic serves the requests that name a sandbox (see above) and passes the
// others on to the API. Sandbox traffic carries no API key (the SDK sends none there);
// the answer tells only whether a sandbox of an unguessable id lives.
func (s *Server) sandboxTraffic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, port := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port")
		if m := sandboxHost.FindStringSubmatch(r.Host); id == "" && m != nil {
			port, id = m[1], m[2]
		}
		if id == "" {
			next.ServeHTTP(w, r)
			return
		}
		s.adapt(func(w http.ResponseWriter, r *http.Request) error {
			return s.envd(w, r, id, port)
		}).ServeHTTP(w, r)
	})
}

// envd answers a request to sandbox id's port.
func (s *Server) envd(w http.ResponseWriter, r *http.Request, id, port string) error {
	if p, err := strconv.Atoi(port); err != nil || p != EnvdPort {
		return refuse(http.StatusNotImplemented, "port %s of sandbox %q: warmpool proxies no sandbox port; reach the agent at its pod (GET /v1/scopes/{templateID}/sessions/%s)", port, id, id)
	}
	if r.Method != http.MethodGet || r.URL.Path != "/health" {
		return refuse(http.StatusNotImplemented, "envd %s %s: not supported by warmpool, which runs no envd (docs/e2b.md)", r.Method, r.URL.Path)
	}
	if !validSandboxID(id) {
		return refuse(http.StatusBadGateway, "sandbox %q not found", id)
	}
	if _, _, err := s.live(r.Context(), id); err != nil {
		if isGone(err) {
			return refuse(http.StatusBadGateway, "sandbox %q not found", id)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
