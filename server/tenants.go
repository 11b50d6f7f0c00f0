package server

import "github.com/warmpool/warmpool/tenants"

// buildTenants builds the tenant service (SPEC §12.1) over the config store and the
// Redis store, where quotas are published and use is read, and feeds the tenant
// gauges from it.
func (s *Server) buildTenants() {
	s.Tenants = tenants.New(s.configs, s.store, s.log)
	s.metrics.ReadTenants(s.Tenants.Usages)
}
