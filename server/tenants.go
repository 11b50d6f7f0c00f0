package server

import "github.com/warmpool/warmpool/tenants"

// buildTenants builds the tenant service (SPEC §12.1) over the config store and the
// Redis store, where quotas are published and enforced and use is read, and feeds the
// tenant metrics from both.
func (s *Server) buildTenants() {
	s.Tenants = tenants.New(s.configs, s.store, s.log)
	s.metrics.ReadTenants(s.Tenants.Usages)
	s.metrics.ReadQuotaRefusals(s.store.QuotaRefusals)
}
