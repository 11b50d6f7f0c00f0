package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpool/warmpool"
)

const labelTenant = "tenant"

// tenantMetrics are the tenant metrics of SPEC §12.1, read at each gathering: the
// gauges one series a tenant with quotas, the refusals one a tenant this replica saw
// refused (only a tenant with quotas is).
type tenantMetrics struct {
	pods, sessions, refusals *prometheus.Desc
	// read gives the tenants' use; nil until ReadTenants sets it.
	read func(ctx context.Context) ([]warmpool.TenantUsage, error)
	// refused gives the calls refused by each tenant's quotas on this replica; nil
	// until ReadQuotaRefusals sets it.
	refused func() map[string]uint64
	m       *Metrics
}

func newTenantMetrics(m *Metrics) *tenantMetrics {
	return &tenantMetrics{
		m: m,
		pods: prometheus.NewDesc("warmpool_tenant_pods",
			"Pods of the tenant's scopes (deploys in flight included), by tenant with quotas.", []string{labelTenant}, nil),
		sessions: prometheus.NewDesc("warmpool_tenant_sessions",
			"Bound sessions of the tenant's scopes, by tenant with quotas.", []string{labelTenant}, nil),
		refusals: prometheus.NewDesc("warmpool_tenant_quota_refusals_total",
			"Routes, acquires and refills this replica saw refused by the tenant's quotas (429 QUOTA_EXCEEDED), by tenant.", []string{labelTenant}, nil),
	}
}

// Describe sends nothing: the gauges are unchecked, their tenants known only when
// they are read.
func (t *tenantMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect reads every tenant's use (tenants.Service.Usages) and sends its gauges. A
// failed read counts a scrape error and sends none.
func (t *tenantMetrics) Collect(ch chan<- prometheus.Metric) {
	t.m.mu.RLock()
	read, refused := t.read, t.refused
	t.m.mu.RUnlock()
	if refused != nil {
		for tenant, n := range refused() {
			ch <- prometheus.MustNewConstMetric(t.refusals, prometheus.CounterValue, float64(n), tenant)
		}
	}
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

// ReadQuotaRefusals sets where the refusals counter is read from
// (redisstore.Store.QuotaRefusals).
func (m *Metrics) ReadQuotaRefusals(refused func() map[string]uint64) {
	m.mu.Lock()
	m.tenants.refused = refused
	m.mu.Unlock()
}
