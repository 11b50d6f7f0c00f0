package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Defaults of SessionConfigBench (wpbench sessionconfig).
const (
	DefaultConfigDelay   = 2 * time.Second
	DefaultConfigRate    = 20.0
	DefaultConfigLife    = time.Second
	DefaultConfigMinIdle = 4
	DefaultConfigWarmup  = 5 * time.Second
	DefaultConfigWindow  = 10 * time.Second
	DefaultConfigRounds  = 3
)

// Issue 34's targets for routes that carry a session config: at least WarmTarget of
// them served warm, and their p99 (the agent's fetch included) within P99Slack of the
// plain routes' p99 on the same warm pool.
const (
	WarmTarget = 0.95
	P99Slack   = 25 * time.Millisecond
)

const (
	configScope  = "sessionconfig"
	configSecret = "wpbench-session"
	configKey    = "token"
)

// SessionConfigBench is one measurement of routes that carry a session_config (SPEC
// §12.2) against plain routes (wpbench sessionconfig): a fresh redis-server and one
// replica with the fake driver taking Delay per deploy, --report-secret set and its
// secrets in a file of Dir; a scope kept warm (MinIdle pods of 4 sessions); new
// sessions at Rate a second, each ended after Life, for Warmup, then Rounds pairs of
// Window-long windows, plain routes and config routes in turn (the first of a pair
// alternates). A config route carries two env vars and one secret ref; its time runs
// until the agent of the pod it names has fetched the session's config with the pod's
// report token. Then the secret's value is looked for in the replica's log (at debug
// level) and in its whole /metrics page.
type SessionConfigBench struct {
	Bin, RedisScript, Dir string
	Delay, Life           time.Duration
	Warmup, Window        time.Duration
	Rate                  float64
	MinIdle, Rounds       int
	Log                   io.Writer
}

func (c *SessionConfigBench) fill() {
	defaults.Positive(&c.Delay, DefaultConfigDelay)
	defaults.Positive(&c.Life, DefaultConfigLife)
	defaults.Positive(&c.Warmup, DefaultConfigWarmup)
	defaults.Positive(&c.Window, DefaultConfigWindow)
	defaults.Positive(&c.Rate, DefaultConfigRate)
	defaults.Positive(&c.MinIdle, DefaultConfigMinIdle)
	defaults.Positive(&c.Rounds, DefaultConfigRounds)
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// SessionConfigResults is what the measurement found.
type SessionConfigResults struct {
	Started time.Time   `json:"started"`
	Machine string      `json:"machine"`
	DelayMs float64     `json:"deploy_delay_ms"`
	Rate    float64     `json:"rate"`
	LifeMs  float64     `json:"session_life_ms"`
	MinIdle int         `json:"min_idle_pods"`
	Rounds  int         `json:"rounds"`
	WindowS float64     `json:"window_s"`
	Plain   *RouteClass `json:"plain"`
	Config  *RouteClass `json:"config"`
	// LoadAvg is the machine's load average at the end of each window, in turn.
	LoadAvg []string `json:"load_avg"`
	// Searched names what the secret's value was looked for in, Leaks those it was
	// found in.
	Searched []string `json:"searched"`
	Leaks    []string `json:"leaks"`
}

// RouteClass is the routes of one kind over all its windows. Routes counts those
// sent, Failed those not answered 200 (for a config route: its fetch too), Wrong the
// fetches that answered another env than the route gave; Sources counts them by how
// the replica served them (warmpool_routes_total between the windows' scrapes). The
// quantiles are of the time the client saw: the route, and for a config route the
// agent's fetch after it (RouteP99Ms and FetchP99Ms split it).
type RouteClass struct {
	Routes     int            `json:"routes"`
	Failed     int            `json:"failed"`
	Wrong      int            `json:"wrong_env"`
	FirstError string         `json:"first_error,omitempty"`
	Sources    map[string]int `json:"sources"`
	P50Ms      float64        `json:"p50_ms"`
	P99Ms      float64        `json:"p99_ms"`
	MaxMs      float64        `json:"max_ms"`
	RouteP99Ms float64        `json:"route_p99_ms"`
	FetchP50Ms float64        `json:"fetch_p50_ms,omitempty"`
	FetchP99Ms float64        `json:"fetch_p99_ms,omitempty"`

	total, route, fetch []time.Duration
}

// WarmShare is the share of the routes sent that the replica served from a running
// pod (source warm): a failed route is not warm.
func (r *RouteClass) WarmShare() float64 {
	if r.Routes == 0 {
		return 0
	}
	return min(1, float64(r.Sources[warmpool.SourceWarm])/float64(r.Routes))
}

// Verdict is each target met or not.
type Verdict struct {
	// Warm: at least WarmTarget of the config routes served warm.
	Warm bool
	// P99: the config routes' p99 within P99Slack of the plain ones'.
	P99 bool
	// Fetched: every config route's fetch answered 200 with the route's env.
	Fetched bool
	// NoLeak: the secret's value is in nothing searched.
	NoLeak bool
}

// Met is all of v.
func (v Verdict) Met() bool { return v.Warm && v.P99 && v.Fetched && v.NoLeak }

// Verdict judges r against issue 34's targets.
func (r *SessionConfigResults) Verdict() Verdict {
	return Verdict{
		Warm:    r.Config.WarmShare() >= WarmTarget,
		P99:     r.Config.Routes > 0 && r.Plain.Routes > 0 && r.Config.P99Ms <= r.Plain.P99Ms+ms(P99Slack),
		Fetched: r.Config.Routes > 0 && r.Config.Failed == 0 && r.Config.Wrong == 0,
		NoLeak:  len(r.Searched) > 0 && len(r.Leaks) == 0,
	}
}

// SessionConfigs runs the measurement. A secret found where it must not be is an
// error, returned with the results.
func SessionConfigs(ctx context.Context, cfg SessionConfigBench) (*SessionConfigResults, error) {
	cfg.fill()
	res := &SessionConfigResults{Started: time.Now().UTC(), Machine: machine(), DelayMs: ms(cfg.Delay), Rate: cfg.Rate, LifeMs: ms(cfg.Life),
		MinIdle: cfg.MinIdle, Rounds: cfg.Rounds, WindowS: cfg.Window.Seconds(),
		Plain: &RouteClass{Sources: map[string]int{}}, Config: &RouteClass{Sources: map[string]int{}}}
	secret, err := secretValue()
	if err != nil {
		return nil, err
	}
	secrets := filepath.Join(cfg.Dir, "secrets.json")
	file, err := json.Marshal(map[string]map[string]string{configSecret: {configKey: secret}})
	if err == nil {
		err = os.WriteFile(secrets, file, 0o600)
	}
	if err != nil {
		return nil, err
	}
	sc := ScaleConfig{Dir: cfg.Dir, RedisScript: cfg.RedisScript, Bin: cfg.Bin, Workers: 32}
	e, err := sc.start(ctx, "sessionconfig", "--fake-deploy-delay", cfg.Delay.String(), "--report-secret", reportSecret,
		"--fake-secrets-file", secrets, "--log-level", "debug")
	if err != nil {
		return nil, err
	}
	defer e.stop()
	_, _ = fmt.Fprintf(cfg.Log, "sessionconfig: replica %s, files in %s\n", e.replica.URL, cfg.Dir) // progress: nothing to do if it fails
	l := &configLoad{cfg: &cfg, e: e, key: httpx.NewReportKey(httpx.FixedToken(reportSecret)), secret: secret}
	if err := l.run(ctx, res); err != nil {
		return res, err
	}
	res.Plain.summarize()
	res.Config.summarize()
	if err := l.searchLeaks(ctx, res); err != nil {
		return res, err
	}
	if err := writeJSON(filepath.Join(cfg.Dir, "sessionconfig.json"), res); err != nil {
		return res, err
	}
	if len(res.Leaks) > 0 {
		return res, fmt.Errorf("the secret's value is in %v", res.Leaks)
	}
	return res, nil
}

// secretValue is a value found nowhere else: one a leak check cannot match by chance.
func secretValue() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "wpbench-secret-" + hex.EncodeToString(b), nil
}

// configLoad is the load of one measurement.
type configLoad struct {
	cfg    *SessionConfigBench
	e      *env
	key    *httpx.ReportKey
	secret string
	// ends are the sessions' ends still to come.
	ends sync.WaitGroup
}

func (l *configLoad) run(ctx context.Context, res *SessionConfigResults) error {
	defer l.ends.Wait()
	path := "/v1/scopes/" + configScope
	s := warmpool.DefaultScopeConfig()
	s.Deploy.Image, s.Deploy.ReadyTimeoutS = "agent:1", 30
	s.Pool.MaxConcurrency, s.Pool.PodConcurrency, s.Pool.MinIdlePods = 128, 4, l.cfg.MinIdle
	s.Pool.SessionTTLS, s.Pool.WaitTimeoutS = 60, 30
	if err := l.e.cl.do(ctx, http.MethodPut, path+"/config", s); err != nil {
		return err
	}
	if err := l.e.warm(ctx, path, l.cfg.MinIdle); err != nil {
		return err
	}
	n := 0
	if _, err := l.window(ctx, l.cfg.Warmup, false, &n); err != nil {
		return err
	}
	for round := range l.cfg.Rounds {
		for i := range 2 {
			config := (round+i)%2 == 1
			class := res.Plain
			if config {
				class = res.Config
			}
			sources, err := l.window(ctx, l.cfg.Window, config, &n)
			if err != nil {
				return err
			}
			class.add(sources)
			res.LoadAvg = append(res.LoadAvg, loadAvg())
			_, _ = fmt.Fprintf(l.cfg.Log, "sessionconfig: round %d %s: %d routes, sources %v, load %s\n", round+1, className(config), sources.routes, sources.sources, loadAvg()) // progress
		}
	}
	return nil
}

func className(config bool) string {
	if config {
		return "config"
	}
	return "plain"
}

// windowRoutes is one window's routes.
type windowRoutes struct {
	routes, failed, wrong int
	firstError            string
	sources               map[string]int
	total, route, fetch   []time.Duration
}

// window sends new sessions at the load's rate for d (with a session config when
// config is set), waits for their routes' answers and counts them by source between
// the scrapes around it; n numbers the sessions of the run.
func (l *configLoad) window(ctx context.Context, d time.Duration, config bool, n *int) (*windowRoutes, error) {
	metrics := l.e.replica.URL + "/metrics?name[]=warmpool_routes_total"
	before, err := scrape(ctx, l.e.hc, metrics)
	if err != nil {
		return nil, err
	}
	w := &windowRoutes{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / l.cfg.Rate))
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		*n++
		session := fmt.Sprintf("s%d", *n)
		wg.Go(func() {
			t := l.session(ctx, session, config)
			mu.Lock()
			defer mu.Unlock()
			w.routes++
			switch {
			case t.err != nil:
				w.failed++
				if w.firstError == "" {
					w.firstError = t.err.Error()
				}
			case t.wrong:
				w.wrong++
			default:
				w.total, w.route = append(w.total, t.route+t.fetch), append(w.route, t.route)
				if config {
					w.fetch = append(w.fetch, t.fetch)
				}
			}
		})
	}
	wg.Wait()
	after, err := scrape(ctx, l.e.hc, metrics)
	if err != nil {
		return nil, err
	}
	w.sources = map[string]int{}
	for src, v := range after.delta(before).byLabel("warmpool_routes_total", "source") {
		if v > 0 {
			w.sources[src] = int(v)
		}
	}
	return w, nil
}

// sessionTimes is one session's route and its agent's fetch.
type sessionTimes struct {
	route, fetch time.Duration
	wrong        bool
	err          error
}

// session routes a new session (with a config: two env vars and the secret ref),
// then, for a config, fetches it as the agent of the pod the answer names does, with
// that pod's report token; the session ends after the load's life.
func (l *configLoad) session(ctx context.Context, session string, config bool) sessionTimes {
	path := "/v1/scopes/" + configScope + "/sessions"
	body := map[string]any{"session_id": session}
	want := map[string]string{"WPBENCH_SESSION": session, "WPBENCH_MODE": "bench", "WPBENCH_TOKEN": l.secret}
	if config {
		body["session_config"] = warmpool.SessionConfig{
			Env:        map[string]string{"WPBENCH_SESSION": session, "WPBENCH_MODE": "bench"},
			SecretRefs: map[string]warmpool.SecretRef{"WPBENCH_TOKEN": {Secret: configSecret, Key: configKey}},
		}
	}
	var t sessionTimes
	var bound struct {
		PodID string `json:"pod_id"`
	}
	t0 := time.Now()
	t.err = l.e.cl.post(ctx, path, body, &bound)
	t.route = time.Since(t0)
	if t.err != nil {
		return t
	}
	l.ends.Go(func() {
		select {
		case <-ctx.Done():
		case <-time.After(l.cfg.Life):
			_ = l.e.cl.do(ctx, http.MethodDelete, path+"/"+session, nil) // it expires anyway
		}
	})
	if !config {
		return t
	}
	var got struct {
		Env map[string]string `json:"env"`
	}
	t1 := time.Now()
	t.err = l.e.cl.withToken(l.key.Token(configScope, bound.PodID)).get(ctx, "/v1/agents/sessions/"+session+"/config", &got)
	t.fetch = time.Since(t1)
	t.wrong = t.err == nil && !maps.Equal(got.Env, want)
	return t
}

// post sends a JSON POST and decodes its answer, which must be 200, into out.
func (c *client) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.answer(req, path, out)
}

func (r *RouteClass) add(w *windowRoutes) {
	r.Routes += w.routes
	r.Failed += w.failed
	r.Wrong += w.wrong
	if r.FirstError == "" {
		r.FirstError = w.firstError
	}
	for src, n := range w.sources {
		r.Sources[src] += n
	}
	r.total, r.route, r.fetch = append(r.total, w.total...), append(r.route, w.route...), append(r.fetch, w.fetch...)
}

// summarize fills the quantiles of r's times.
func (r *RouteClass) summarize() {
	r.P50Ms, r.P99Ms, r.MaxMs = quantileMs(r.total, 0.50), quantileMs(r.total, 0.99), quantileMs(r.total, 1)
	r.RouteP99Ms = quantileMs(r.route, 0.99)
	r.FetchP50Ms, r.FetchP99Ms = quantileMs(r.fetch, 0.50), quantileMs(r.fetch, 0.99)
}

// searchLeaks looks for the secret's value in the replica's log and its whole
// /metrics page, once every session has ended.
func (l *configLoad) searchLeaks(ctx context.Context, res *SessionConfigResults) error {
	page, err := get(ctx, l.e.hc, l.e.replica.URL+"/metrics")
	if err != nil {
		return err
	}
	metrics, err := io.ReadAll(page)
	page.Close()
	if err != nil {
		return err
	}
	logFile := filepath.Join(l.cfg.Dir, "sessionconfig", "replica.log")
	log, err := os.ReadFile(logFile)
	if err != nil {
		return err
	}
	if len(log) == 0 {
		return errors.New(logFile + ": empty: the replica logged nothing to search")
	}
	res.Searched, res.Leaks = leaks(map[string][]byte{"replica log (debug)": log, "/metrics": metrics}, l.secret)
	return nil
}

// leaks names the texts that hold secret, and those searched, both sorted.
func leaks(texts map[string][]byte, secret string) (searched, found []string) {
	found = []string{}
	for _, name := range slices.Sorted(maps.Keys(texts)) {
		searched = append(searched, name)
		if bytes.Contains(texts[name], []byte(secret)) {
			found = append(found, name)
		}
	}
	return searched, found
}

// WriteText writes the results as the table of docs/performance.md and the verdict.
func (r *SessionConfigResults) WriteText(out io.Writer) error {
	w := new(bytes.Buffer) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "%s; deploy delay %.0f ms, %.0f new sessions/s of %.0f ms, min_idle_pods %d, pods of 4; %d × 2 windows of %.0f s; load average at each window's end: %s\n\n",
		r.Machine, r.DelayMs, r.Rate, r.LifeMs, r.MinIdle, r.Rounds, r.WindowS, strings.Join(r.LoadAvg, " · "))
	fmt.Fprintln(w, "| routes | sent | failed | wrong env | sources | warm | p50 ms | p99 ms | max ms | route p99 ms | fetch p50 / p99 ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range []struct {
		name string
		c    *RouteClass
	}{{"plain", r.Plain}, {"session_config", r.Config}} {
		fetch := "—"
		if c.c == r.Config {
			fetch = fmt.Sprintf("%.2f / %.2f", c.c.FetchP50Ms, c.c.FetchP99Ms)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %v | %.1f %% | %.2f | %.2f | %.1f | %.2f | %s |\n", c.name, c.c.Routes, c.c.Failed, c.c.Wrong,
			c.c.Sources, 100*c.c.WarmShare(), c.c.P50Ms, c.c.P99Ms, c.c.MaxMs, c.c.RouteP99Ms, fetch)
	}
	v := r.Verdict()
	fmt.Fprintf(w, "\n- config routes served warm: %.1f %% (target ≥ %.0f %%): %s\n", 100*r.Config.WarmShare(), 100*WarmTarget, met(v.Warm))
	fmt.Fprintf(w, "- config p99 %.2f ms, fetch included (target ≤ plain p99 %.2f + %.0f = %.2f ms): %s\n",
		r.Config.P99Ms, r.Plain.P99Ms, ms(P99Slack), r.Plain.P99Ms+ms(P99Slack), met(v.P99))
	fmt.Fprintf(w, "- every fetch answered the route's env, its secret resolved: %s\n", met(v.Fetched))
	fmt.Fprintf(w, "- the secret's value in %v: found in %v: %s\n", r.Searched, r.Leaks, met(v.NoLeak))
	if r.Config.FirstError != "" || r.Plain.FirstError != "" {
		fmt.Fprintf(w, "- first errors: plain %q, config %q\n", r.Plain.FirstError, r.Config.FirstError)
	}
	_, err := out.Write(w.Bytes())
	return err
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
