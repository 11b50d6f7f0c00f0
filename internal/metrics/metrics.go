// Package metrics exposes warmpool's Prometheus metrics (SPEC §10 and §11.4 fix their
// names and labels): counters and histograms fed by the managers', the drivers', the
// script runner's and the sweeper's hooks, and per-scope pool gauges read from Redis
// when the metrics are gathered. The histograms carry no scope label unless
// Config.ScopeDetail matches the scope, so a replica's series grow with its scopes by
// a handful of counters and gauges each. docs/metrics.md lists every metric with its
// labels and their cardinality; serve.go serves them.
package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
)

// Label names.
const (
	labelScope  = "scope"
	labelSource = "source"
	labelCode   = "code"
	labelDriver = "driver"
	labelResult = "result"
	labelPhase  = "phase"
	labelScript = "script"
	// labelSweep names a sweeper job: "job" is the label Prometheus gives each
	// scrape target, which a metric's own "job" label would collide with.
	labelSweep   = "sweep"
	labelOutcome = "outcome"
	labelFix     = "fix"
)

// Defaults of Config.
const (
	// DefaultScrapes bounds the scrapes served at once; a scrape is written from a
	// shared rendering in milliseconds, so only slow or stuck readers fill the slots.
	DefaultScrapes = 4
	// DefaultScrapeTimeout bounds a scrape from its arrival to its last byte
	// (Prometheus's default scrape_timeout): a reader slower than that is cut off.
	DefaultScrapeTimeout = 10 * time.Second
	// DefaultShare is how long one rendering is served to the scrapes that come:
	// concurrent scrapers, and scrape loops, cost one rendering a second at most.
	DefaultShare = time.Second
)

// PoolReadTimeout bounds the Redis read of the pool gauges of one gathering.
const PoolReadTimeout = 2 * time.Second

var (
	// latencyBuckets fit calls from a warm hit (under a millisecond) to a cold
	// start or a wait in the queue (tens of seconds).
	latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// deployBuckets fit deploys from a fake driver's instant one to a slow image pull.
	deployBuckets = []float64{.05, .1, .25, .5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300}
	// scriptBuckets fit one Redis round trip, from a local server to a remote one
	// under load.
	scriptBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
)

// Config tunes a replica's metrics; zero fields take the defaults above.
type Config struct {
	// ScopeDetail is a path.Match glob (`serve --metrics-scope-detail`): when set,
	// the histograms carry a scope label, with the scope's name for the scopes it
	// matches and "" for every other (see docs/metrics.md). Empty: no scope label.
	ScopeDetail string
	// Scrapes bounds the scrapes served at once; one more is answered 503 at once.
	Scrapes int
	// ScrapeTimeout bounds each scrape, from its arrival to the last byte written.
	ScrapeTimeout time.Duration
	// Share is how long one rendering of the metrics is served to the scrapes that
	// ask for it.
	Share  time.Duration
	Logger *slog.Logger
}

func (c *Config) fill() {
	defaults.Positive(&c.Scrapes, DefaultScrapes)
	defaults.Positive(&c.ScrapeTimeout, DefaultScrapeTimeout)
	defaults.Positive(&c.Share, DefaultShare)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Metrics holds the collectors of one replica.
type Metrics struct {
	cfg   Config
	store Counts
	log   *slog.Logger

	reg          *prometheus.Registry
	routes       *scopeCounter
	routeTime    *prometheus.HistogramVec
	routeErrors  *scopeCounter
	deploys      *prometheus.HistogramVec
	phases       *prometheus.HistogramVec
	scripts      *prometheus.HistogramVec
	events       *prometheus.CounterVec
	jobRuns      *prometheus.CounterVec
	jobHeld      *prometheus.HistogramVec
	jobFixes     *prometheus.CounterVec
	scrapeErrors prometheus.Counter
	dueFailures  prometheus.Counter
	reports      *prometheus.CounterVec
	clockSkew    prometheus.Gauge
	tenants      *tenantMetrics

	// scoped are the histograms when they carry scope; seen are the scopes of
	// ScopeDetail those have series of, so the series of a deleted scope can be
	// dropped (the route counters drop their own).
	scoped []*prometheus.MetricVec
	mu     sync.RWMutex
	seen   map[string]bool
	// scriptSeries keeps the series each script call updates, so that a call costs
	// a map read instead of a label lookup (hashing and checking the label value);
	// the route counters keep the latency series of their routes likewise.
	scriptSeries map[string]prometheus.Observer

	// serving is the state of the scrapes (serve.go).
	serving serving
}

// Counts is what the pool gauges read of the Redis state store (redisstore.Store):
// every scope's pool sizes, in one pipeline.
type Counts interface {
	Counts(ctx context.Context) ([]warmpool.ScopeCounts, error)
}

var _ Counts = (*redisstore.Store)(nil)

// New registers warmpool's metrics; store feeds the pool gauges. A ScopeDetail that
// is not a glob is an error.
func New(store Counts, cfg Config) (*Metrics, error) {
	cfg.fill()
	if _, err := path.Match(cfg.ScopeDetail, ""); err != nil {
		return nil, fmt.Errorf("%q: %w", cfg.ScopeDetail, err)
	}
	// hist are the labels of a histogram: the SPEC's, and scope first when the
	// scopes of ScopeDetail have series of their own.
	hist := func(labels ...string) []string {
		if cfg.ScopeDetail == "" {
			return labels
		}
		return append([]string{labelScope}, labels...)
	}
	m := &Metrics{
		cfg:   cfg,
		store: store,
		log:   cfg.Logger,
		reg:   prometheus.NewRegistry(),
		routes: newScopeCounter("warmpool_routes_total",
			"Session routes served, by scope and how the pod was found (affinity, warm, follower, deployed, queued).", labelSource),
		routeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpool_route_duration_seconds",
			Help:    "Latency of the session routes served, by source (and by scope for the scopes of --metrics-scope-detail, \"\" for the others).",
			Buckets: latencyBuckets,
		}, hist(labelSource)),
		routeErrors: newScopeCounter("warmpool_route_errors_total",
			"Session routes that failed, by scope and error code (scope empty for VALIDATION and SCOPE_NOT_FOUND).", labelCode),
		deploys: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpool_deploy_duration_seconds",
			Help:    "Duration of deploys from the start of the driver's work to the pod's registration or the failure, by driver and result (ok, failed), and by scope for the scopes of --metrics-scope-detail.",
			Buckets: deployBuckets,
		}, hist(labelDriver, labelResult)),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpool_deploy_phase_seconds",
			Help:    "Deploy phases: lease_wait is the time taken to get the deploy lease; create, scheduled, started and ready the time from the start of the driver's work until the phase was reached. By driver and phase, and by scope for the scopes of --metrics-scope-detail.",
			Buckets: deployBuckets,
		}, hist(labelDriver, labelPhase)),
		scripts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpool_redis_script_duration_seconds",
			Help:    "Round trip of each Lua script call to Redis, failed calls included, by script.",
			Buckets: scriptBuckets,
		}, []string{labelScript}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpool_events_total",
			Help: "Pool and queue events: acquire (warm, deployed, follower, max_reached, failed), deploy (ok, failed), queue (queued, queue_full, wait_timeout, woken), sweep results, config_publish (conflict: a version published with other content by a replica on another config store).",
		}, []string{"event", labelOutcome}),
		jobRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpool_sweeper_runs_total",
			Help: "Sweeper job runs on this replica, by sweep (the job's name) and outcome (ok, idle: it had nothing to do and took no lock, error, lost_lock, skipped: another replica held the job's lock).",
		}, []string{labelSweep, labelOutcome}),
		jobHeld: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpool_sweeper_lock_held_seconds",
			Help:    "How long a sweeper job held its lock per run on this replica, by sweep (the job's name).",
			Buckets: latencyBuckets,
		}, []string{labelSweep}),
		jobFixes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpool_sweeper_fixes_total",
			Help: "Repairs the sweeper jobs made, by sweep (the job's name) and fix (reclaimed, dead, unhealthy, adopted, deleted_orphan, reindexed, ...). Under sweep=\"reconcile\", the hourly full pass, an audit: what the pod events and the due notes missed, which should stay 0.",
		}, []string{labelSweep, labelFix}),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmpool_pool_scrape_errors_total",
			Help: "Gatherings of the metrics whose pool gauges, or tenant gauges, could not be read from Redis.",
		}),
		dueFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmpool_due_index_write_failures_total",
			Help: "Writes of the due index after a script's due note that failed on this replica, retries included; each is retried every sweep interval until it is written.",
		}),
		reports: newAgentReports(),
		clockSkew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warmpool_clock_skew_seconds",
			Help: "The replica's wall clock minus Redis's TIME (on a Cluster the largest over its masters), measured at start and every minute; the deadline guard takes it into account, the rules that compare times written by different replicas do not (docs/operations.md).",
		}),
		seen:         map[string]bool{},
		scriptSeries: map[string]prometheus.Observer{},
	}
	m.tenants = newTenantMetrics(m)
	if cfg.ScopeDetail != "" {
		m.scoped = []*prometheus.MetricVec{m.routeTime.MetricVec, m.deploys.MetricVec, m.phases.MetricVec}
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "warmpool_build_info",
		Help:        "Always 1; the labels name the build of the replica.",
		ConstLabels: prometheus.Labels{"version": Version(), "goversion": runtime.Version()},
	})
	build.Set(1)
	m.reg.MustRegister(m.routeTime, m.deploys, m.phases, m.scripts, m.events,
		m.jobRuns, m.jobHeld, m.jobFixes, build, m.scrapeErrors, m.dueFailures, m.reports, m.clockSkew,
		m.tenants, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.serving.init(cfg.Scrapes)
	return m, nil
}

// Version is the replica's version: the main module's version, else its VCS revision,
// else "devel".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	return "devel"
}

// Gather reads the pool gauges from Redis, drops the series of the scopes gone from
// it, and gathers every metric, sorted by name: what /metrics serves. Metrics is
// so a prometheus.Gatherer.
func (m *Metrics) Gather() ([]*dto.MetricFamily, error) {
	scoped, fams, err := m.gather()
	for _, f := range scoped {
		fams = append(fams, f.family())
	}
	slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return fams, err
}

// gather reads the families labelled by scope, sorted by name, first (the pool read
// drops the series of deleted scopes), then the registry's.
func (m *Metrics) gather() ([]*scopedFamily, []*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), PoolReadTimeout)
	defer cancel()
	// A family without series is left out, as the registry leaves out a vector
	// without children.
	scoped := slices.DeleteFunc(append(m.pool(ctx), m.routes.family(), m.routeErrors.family()),
		func(f *scopedFamily) bool { return f.n == 0 })
	slices.SortFunc(scoped, func(a, b *scopedFamily) int { return strings.Compare(a.name, b.name) })
	fams, err := m.reg.Gather()
	return scoped, fams, err
}

// scopeLabel is the scope label value of a histogram series of scope: its name when
// ScopeDetail matches it, else "" (the series of every scope not matched).
func (m *Metrics) scopeLabel(scope string) string {
	if ok, _ := path.Match(m.cfg.ScopeDetail, scope); ok {
		return scope
	}
	return ""
}

// hist are the label values of a histogram series of scope: rest, after the
// scope's label value when the histograms carry scope.
func (m *Metrics) hist(scope string, rest ...string) []string {
	if m.cfg.ScopeDetail == "" {
		return rest
	}
	return append([]string{m.scopeLabel(scope)}, rest...)
}

// saw notes that the histograms have series of scope, if they carry its name.
func (m *Metrics) saw(scope string) {
	if m.cfg.ScopeDetail == "" || m.scopeLabel(scope) == "" {
		return
	}
	m.mu.Lock()
	m.seen[scope] = true
	m.mu.Unlock()
}

// dropDeleted drops the series of the scopes not in live (deleted ones): their
// counters would otherwise be exported for the life of the process. The counters are
// swept whole, so one made for a scope just as it was dropped goes at the next call.
func (m *Metrics) dropDeleted(live map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.routes.keep(live)
	m.routeErrors.keep(live)
	for scope := range m.seen {
		if scope == "" || live[scope] {
			continue
		}
		for _, v := range m.scoped {
			v.DeletePartialMatch(prometheus.Labels{labelScope: scope})
		}
		delete(m.seen, scope)
	}
}

// Observe counts an event; it fits the managers' Observe hooks.
func (m *Metrics) Observe(event, outcome string) {
	m.events.WithLabelValues(event, outcome).Inc()
}

// ObserveRoute records one route call: its source when it was served, else its error
// code. It fits sm.Config.ObserveRoute.
func (m *Metrics) ObserveRoute(scope, source string, code warmpool.Code, took time.Duration) {
	if code != "" {
		if code == warmpool.CodeValidation || code == warmpool.CodeScopeNotFound {
			scope = "" // a name nobody configured: no series of its own
		}
		n, _ := m.routeErrors.counter(scope, string(code), nil)
		n.n.Add(1)
		return
	}
	rs := m.route(scope, source)
	rs.n.Add(1)
	rs.took.Observe(took.Seconds())
}

// route returns the counter of the routes of scope served with source, with their
// latency series, made (and the scope noted, as saw does) on its first route. A
// route that reads them just before dropDeleted drops them updates series no longer
// exported, as if it had come before.
func (m *Metrics) route(scope, source string) *scopeCount {
	n, made := m.routes.counter(scope, source, func(n *scopeCount) {
		n.took = m.routeTime.WithLabelValues(m.hist(scope, source)...)
	})
	if made {
		m.saw(scope)
	}
	return n
}

// ObserveDeploy records one finished deploy of a driver.
func (m *Metrics) ObserveDeploy(scope, driver, result string, took time.Duration) {
	m.saw(scope)
	m.deploys.WithLabelValues(m.hist(scope, driver, result)...).Observe(took.Seconds())
}

// ObservePhase records one phase of a deploy (see warmpool_deploy_phase_seconds).
func (m *Metrics) ObservePhase(scope, driver, phase string, elapsed time.Duration) {
	m.saw(scope)
	m.phases.WithLabelValues(m.hist(scope, driver, phase)...).Observe(elapsed.Seconds())
}

// ObserveScript records one script call; it fits redisstore.Store.ObserveScripts.
func (m *Metrics) ObserveScript(script string, took time.Duration) {
	m.mu.RLock()
	o, ok := m.scriptSeries[script]
	m.mu.RUnlock()
	if !ok {
		o = m.scripts.WithLabelValues(script)
		m.mu.Lock()
		m.scriptSeries[script] = o
		m.mu.Unlock()
	}
	o.Observe(took.Seconds())
}

// ObserveDueIndexFailure counts one failed write of the due index; it fits
// redisstore.Store.ObserveDueIndexFailures.
func (m *Metrics) ObserveDueIndexFailure() {
	m.dueFailures.Inc()
}

// ObserveJob records one run of a sweeper job; it fits sweeper.Runner.OnRun.
func (m *Metrics) ObserveJob(job, outcome string, held time.Duration) {
	m.jobRuns.WithLabelValues(job, outcome).Inc()
	if outcome != "skipped" && outcome != "idle" {
		m.jobHeld.WithLabelValues(job).Observe(held.Seconds())
	}
}

// ObserveFix counts one repair of a sweeper job; it fits sweeper.Config.OnFix.
func (m *Metrics) ObserveFix(job, fix string) {
	m.jobFixes.WithLabelValues(job, fix).Inc()
}

// ObserveClockSkew records the last measured skew of the replica's clock against
// Redis's (replica minus Redis).
func (m *Metrics) ObserveClockSkew(skew time.Duration) {
	m.clockSkew.Set(skew.Seconds())
}
