// Package metrics exposes warmpool's Prometheus metrics: counters and histograms fed by
// the managers' observe hooks, and pool gauges read from Redis at scrape time.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmpool/warmpool/lua"
)

// Metrics holds the collectors of one server.
type Metrics struct {
	reg     *prometheus.Registry
	route   *prometheus.HistogramVec
	events  *prometheus.CounterVec
	scrapes *prometheus.CounterVec
	phases  *prometheus.HistogramVec
}

// New registers warmpool's metrics; store feeds the pool gauges at scrape time.
func New(store *lua.Store, log *slog.Logger) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		route: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpool_route_duration_seconds",
			Help:    "Latency of session route calls by outcome (ok or the error code).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"outcome"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpool_events_total",
			Help: "Pool and queue events: acquire (warm, deployed, follower, max_reached, failed), deploy (ok, failed), queue (queued, queue_full, wait_timeout, woken), sweep results, config_publish (conflict: a version published with other content by a replica on another config store).",
		}, []string{"event", "outcome"}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpool_deploy_phase_seconds",
			Help:    "Time from the start of a Kubernetes deploy to each of its phases (created, scheduled, ready, failed).",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"phase"}),
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpool_pool_scrape_errors_total",
			Help: "Scrapes whose pool gauges could not be read from Redis.",
		}, []string{}),
	}
	m.reg.MustRegister(m.route, m.events, m.scrapes, m.phases,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&poolCollector{store: store, log: log, errors: m.scrapes.WithLabelValues()})
	return m
}

// Observe counts an event; it fits the managers' Observe hooks.
func (m *Metrics) Observe(event, outcome string) {
	m.events.WithLabelValues(event, outcome).Inc()
}

// ObserveRoute records one route call.
func (m *Metrics) ObserveRoute(outcome string, took time.Duration) {
	m.route.WithLabelValues(outcome).Observe(took.Seconds())
}

// ObservePhase records how long a deploy took to reach a phase.
func (m *Metrics) ObservePhase(phase string, elapsed time.Duration) {
	m.phases.WithLabelValues(phase).Observe(elapsed.Seconds())
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

var (
	podsDesc      = prometheus.NewDesc("warmpool_pods", "Registered pods by scope and state.", []string{"scope", "state"}, nil)
	sessionsDesc  = prometheus.NewDesc("warmpool_sessions", "Bound sessions by scope.", []string{"scope"}, nil)
	waitersDesc   = prometheus.NewDesc("warmpool_waiters", "Queued route calls by scope.", []string{"scope"}, nil)
	deployingDesc = prometheus.NewDesc("warmpool_deploying", "Deploys in flight by scope.", []string{"scope"}, nil)
)

// poolCollector reads the pool sizes of every scope from Redis when scraped, so the
// gauges are the same on every replica and never drift from the state.
type poolCollector struct {
	store  *lua.Store
	log    *slog.Logger
	errors prometheus.Counter
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- podsDesc
	ch <- sessionsDesc
	ch <- waitersDesc
	ch <- deployingDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.store.Counts(ctx)
	if err != nil {
		c.errors.Inc()
		c.log.Debug("pool gauges not read", "err", err)
		return
	}
	for _, s := range counts {
		ch <- prometheus.MustNewConstMetric(podsDesc, prometheus.GaugeValue, float64(s.Idle), s.ScopeID, "idle")
		ch <- prometheus.MustNewConstMetric(podsDesc, prometheus.GaugeValue, float64(s.Pods-s.Idle), s.ScopeID, "busy")
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(s.Sessions), s.ScopeID)
		ch <- prometheus.MustNewConstMetric(waitersDesc, prometheus.GaugeValue, float64(s.Waiters), s.ScopeID)
		ch <- prometheus.MustNewConstMetric(deployingDesc, prometheus.GaugeValue, float64(s.Deploying), s.ScopeID)
	}
}
