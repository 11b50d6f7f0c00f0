package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/warmpool/warmpool"
)

// ErrNoSession: warmpool answered that the session is not bound to this pod (404
// SESSION_NOT_FOUND): it ended, expired, is another pod's, or never was. Drop what
// the agent keeps of it.
var ErrNoSession = errors.New("agent: the session is not bound to this pod (SESSION_NOT_FOUND)")

const configPath = "/v1/agents/sessions/%s/config"

// SessionConfig fetches the env of session (SPEC §12.2: the session_config its route
// gave it, secret refs resolved to values by warmpool now) with the connection of the
// environment warmpool gave the pod (FromEnv), through a reporter of its own, so
// nothing is kept. An agent that runs a Reporter calls its SessionConfig instead,
// which keeps the env while the session is served. Errors: ErrNoSession, and any
// other for a call warmpool did not answer (retry it).
func SessionConfig(ctx context.Context, session string) (map[string]string, error) {
	cfg, ok := FromEnv(os.Getenv)
	if !ok {
		return nil, errors.New("agent: reports are off (no WARMPOOL_REPORT_URL or WARMPOOL_REPORT_TOKEN): no session config")
	}
	return New(cfg).fetch(ctx, session)
}

// SessionConfig is the env of session (see the package function), fetched once and
// kept while the session is served: a report that no longer lists the session, or
// whose answer names it unknown (ended, expired: on a pod that warmpool reuses, the
// next session must not see it), drops it, as does ErrNoSession. The map is the
// caller's to keep; it is a copy.
func (r *Reporter) SessionConfig(ctx context.Context, session string) (map[string]string, error) {
	r.mu.Lock()
	env, ok := r.configs[session]
	r.mu.Unlock()
	if ok {
		return maps.Clone(env), nil
	}
	env, err := r.fetch(ctx, session)
	r.mu.Lock()
	defer r.mu.Unlock()
	if errors.Is(err, ErrNoSession) {
		delete(r.configs, session)
	}
	if err != nil {
		return nil, err
	}
	if r.configs == nil {
		r.configs = map[string]map[string]string{}
	}
	r.configs[session] = env
	return maps.Clone(env), nil
}

// Forget drops what the reporter keeps of session's config: call it when the agent
// stops serving the session (the next report drops it anyway).
func (r *Reporter) Forget(session string) {
	r.mu.Lock()
	delete(r.configs, session)
	r.mu.Unlock()
}

// forgetLocked drops the configs of sessions a report did not list, and of those its
// answer named unknown; r.mu is held.
func (r *Reporter) forgetLocked(listed, unknown []string) {
	for s := range r.configs {
		if !slices.Contains(listed, s) || slices.Contains(unknown, s) {
			delete(r.configs, s)
		}
	}
}

// fetch asks warmpool for session's env.
func (r *Reporter) fetch(ctx context.Context, session string) (map[string]string, error) {
	base := strings.TrimSuffix(strings.TrimSuffix(r.cfg.URL, "/"), reportPath)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+fmt.Sprintf(configPath, url.PathEscape(session)), nil)
	if err != nil {
		return nil, err
	}
	var a struct {
		Env map[string]string `json:"env"`
	}
	if err := r.call(req, "session config", warmpool.CodeSessionNotFound, ErrNoSession, &a); err != nil {
		return nil, err
	}
	if a.Env == nil {
		a.Env = map[string]string{}
	}
	return a.Env, nil
}

// call sends req with the agent's token and decodes its answer, which must be 200,
// into out: a 404 of the code notFound is gone, another status an error naming what
// was asked.
func (r *Reporter) call(req *http.Request, what string, notFound warmpool.Code, gone error, out any) error {
	req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	res, err := r.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		if json.NewDecoder(res.Body).Decode(&e) == nil && e.Error.Code == string(notFound) {
			return gone
		}
		return fmt.Errorf("agent: %s answered %s: is %s warmpool's address?", what, res.Status, r.cfg.URL)
	default:
		return fmt.Errorf("agent: %s answered %s", what, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("agent: %s answer: %w", what, err)
	}
	return nil
}
