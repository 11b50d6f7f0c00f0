package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpool/warmpool"
)

const labelTenant = "tenant"

// tenantMetrics are the tenant gauges of SPEC §12.1, read at each gathering, one
// series a tenant with quotas. Quotas refuse nothing yet, so the refusals counter of
// SPEC §12.1 is not registered.
type tenantMetrics struct {
	pods, sessions *prometheus.Desc
	// read gives the tenants' use; nil until ReadTenants sets it.
	read func(ctx context.Context) ([]warmpool.TenantUsage, error)
	m    *Metrics
}

func newTenantMetrics(m *Metrics) *tenantMetrics {
	return &tenantMetrics{
		m: m,
		pods: prometheus.NewDesc("warmpool_tenant_pods",
			"Pods of the tenant's scopes (deploys in flight included), by tenant with quotas.", []string{labelTenant}, nil),
		sessions: prometheus.NewDesc("warmpool_tenant_sessions",
			"Bound sessions of the tenant's scopes, by tenant with quotas.", []string{labelTenant}, nil),
	}
}

// Describe sends nothing: the gauges are unchecked, their tenants known only when
// they are read.
func (t *tenantMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect reads every tenant's use (tenants.Service.Usages) and sends its gauges. A
// failed read counts a scrape error and sends none.
func (t *tenantMetrics) Collect(ch chan<- prometheus.Metric) {
	t.m.mu.RLock()
	read := t.read
	t.m.mu.RUnlock()
	if read == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), PoolReadTimeout)
	defer cancel()
	use, err := read(ctx)
	if err != nil {
		t.m.scrapeErrors.Inc()
		t.m.log.Debug("tenant gauges not read", "err", err)
		return
	}
	for _, u := range use {
		ch <- prometheus.MustNewConstMetric(t.pods, prometheus.GaugeValue, float64(u.Use.Pods), u.TenantID)
		ch <- prometheus.MustNewConstMetric(t.sessions, prometheus.GaugeValue, float64(u.Use.Sessions), u.TenantID)
	}
}

// ReadTenants sets where the tenant gauges are read from (tenants.Service.Usages).
func (m *Metrics) ReadTenants(read func(ctx context.Context) ([]warmpool.TenantUsage, error)) {
	m.mu.Lock()
	m.tenants.read = read
	m.mu.Unlock()
}
