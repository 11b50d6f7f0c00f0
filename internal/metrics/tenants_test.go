package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// The tenant gauges are one series a tenant the read gives, read at each gathering;
// a failed read is a scrape error and no gauge.
func TestTenantMetrics(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	m := newMetrics(t, redisstore.NewStore(r.Client, r.Prefix), metrics.Config{})
	var fail error
	m.ReadTenants(func(context.Context) ([]warmpool.TenantUsage, error) {
		return []warmpool.TenantUsage{
			{TenantID: "acme", Use: warmpool.TenantUse{Pods: 3, Sessions: 5}},
			{TenantID: "beta", Use: warmpool.TenantUse{Pods: 1}},
		}, fail
	})
	want := `
# HELP warmpool_tenant_pods Pods of the tenant's scopes (deploys in flight included), by tenant with quotas.
# TYPE warmpool_tenant_pods gauge
warmpool_tenant_pods{tenant="acme"} 3
warmpool_tenant_pods{tenant="beta"} 1
# HELP warmpool_tenant_sessions Bound sessions of the tenant's scopes, by tenant with quotas.
# TYPE warmpool_tenant_sessions gauge
warmpool_tenant_sessions{tenant="acme"} 5
warmpool_tenant_sessions{tenant="beta"} 0
`
	names := []string{"warmpool_tenant_pods", "warmpool_tenant_sessions"}
	if err := testutil.GatherAndCompare(m, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	before := scrapeErrors(t, m)
	fail = errors.New("redis down")
	if n, err := testutil.GatherAndCount(m, names...); err != nil || n != 0 {
		t.Fatalf("tenant gauges after a failed read: %d series, %v; want none", n, err)
	}
	fail = nil
	if after := scrapeErrors(t, m); after != before+1 {
		t.Fatalf("scrape errors %v after a failed read, want %v", after, before+1)
	}
}

// scrapeErrors gathers m and answers warmpool_pool_scrape_errors_total.
func scrapeErrors(t *testing.T, m *metrics.Metrics) float64 {
	t.Helper()
	fams, err := m.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "warmpool_pool_scrape_errors_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no warmpool_pool_scrape_errors_total")
	return 0
}
