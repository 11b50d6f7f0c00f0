package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/warmpool/warmpool"
)

// Tenants models the tenants' escrows (tenant_grant.lua, tenant_credit.lua) and what
// redisstore.Store does between an escrow and its scopes' allowances (redisstore/
// quota.go, lib/quota.lua): the grant a scope's refusal asks for and the call run
// again, the trim and credits after a purge or an aborted deploy, the balance pass, a
// scope governed by its publish, an adopted pod taken from the escrow first. Not
// modelled: the total cap (--max-pods-total), whose fair share redisstore's
// TestTotalCapHoldsAtEveryStep checks on the scripts, max_idle_pods, and the release
// rate (rate|<dim>, rate_t|<dim>), which moves only a refusal's Retry-After.
type Tenants struct {
	limits map[string]warmpool.TenantLimits // tenant -> its published limits
	escrow map[string]map[string]int64      // tenant -> escrow field -> count
	index  map[string]map[string]bool       // tenant -> the scopes its index lists
	scopes map[string]*Scope
}

// ErrIdleNotModelled is Publish's error for limits with max_idle_pods.
var ErrIdleNotModelled = errors.New("model: max_idle_pods is not modelled")

// NewTenants returns the model of tenants without limits or escrows.
func NewTenants() *Tenants {
	return &Tenants{limits: map[string]warmpool.TenantLimits{}, escrow: map[string]map[string]int64{},
		index: map[string]map[string]bool{}, scopes: map[string]*Scope{}}
}

// Join has the scope's calls go through the tenants' escrows, as redisstore.Store's
// do: from then on its publish indexes it under its tenant and governs it.
func (ts *Tenants) Join(s *Scope) {
	s.tenants = ts
	ts.scopes[s.id] = s
}

// Publish models redisstore.Store.PublishTenant.
func (ts *Tenants) Publish(tenant string, l warmpool.TenantLimits) error {
	if l.IdlePods >= 0 {
		return ErrIdleNotModelled
	}
	ts.limits[tenant] = l
	return nil
}

// Escrow is the tenant's escrow HASH as HGETALL answers it, without the release rate.
func (ts *Tenants) Escrow(tenant string) map[string]string {
	out := map[string]string{}
	for f, n := range ts.escrow[tenant] {
		out[f] = strconv.FormatInt(n, 10)
	}
	return out
}

func (ts *Tenants) escrowOf(tenant string) map[string]int64 {
	e, ok := ts.escrow[tenant]
	if !ok {
		e = map[string]int64{}
		ts.escrow[tenant] = e
	}
	return e
}

// governs models Store.governs without a total cap.
func governs(l warmpool.TenantLimits) [2]bool {
	return [2]bool{l.Pods >= 0 || l.MilliCPU >= 0 || l.MemoryBytes >= 0, l.Sessions >= 0}
}

// dims are the dimensions of an allowance and the config fields that hold them.
var (
	dims      = [2]string{"pods", "sessions"}
	allowance = [2]string{"q_pods", "q_sess"}
)

// quotaAsk is a scope script's refusal for want of allowance (lib/quota.lua's
// quota_refusal).
type quotaAsk struct {
	dim             string
	held, allowance int64
	tenant          string
	cpu, mem        int64
}

// quotaRefusal models quota_refusal: the ask of a scope governed in dim (its config
// field) whose use held has reached its allowance, nil otherwise.
func (s *Scope) quotaRefusal(dim string, held int64) *quotaAsk {
	field := allowance[0]
	if dim == dims[1] {
		field = allowance[1]
	}
	v, ok := s.config[field]
	if !ok {
		return nil
	}
	q, _ := strconv.ParseInt(v, 10, 64)
	if held < q {
		return nil
	}
	return &quotaAsk{dim: dim, held: held, allowance: q, tenant: s.config["tenant"], cpu: s.cfgInt("cpu_m"), mem: s.cfgInt("memory_b")}
}

// quotaTries is redisstore's bound on how often a call asks its escrow and runs again.
const quotaTries = 4

// callQuota models Store.callQuota: run is one run of the script, which leaves its
// ask in s.ask when the scope's allowance refuses it; the escrow grants it and run
// runs again.
func callQuota[T any](s *Scope, run func() (T, error)) (T, error) {
	for try := 1; ; try++ {
		s.ask = nil
		r, err := run()
		ask := s.ask
		s.ask = nil
		if err != nil || ask == nil {
			return r, err
		}
		var zero T
		if try == quotaTries {
			return zero, warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: its tenant's allowance was taken by other calls %d times in a row; retry", s.id, quotaTries)
		}
		if s.tenants == nil {
			return zero, fmt.Errorf("model: scope %q is governed but joined no tenants", s.id)
		}
		if err := s.tenants.grant(s, *ask); err != nil {
			return zero, err
		}
	}
}

// grant models Store.grant: what the scope needs from its tenant's escrow, and its
// allowance raised by it (given back when the scope is not governed in it).
func (ts *Tenants) grant(s *Scope, q quotaAsk) error {
	n := q.held + 1 - q.allowance
	if err := ts.tenantGrant(q.tenant, s.id, q.dim, n, q.cpu, q.mem, false); err != nil {
		return err
	}
	if !s.quotaApply(q.dim, n) {
		ts.tenantCredit(q.tenant, s.id, q.dim, n)
	}
	return nil
}

// tenantGrant models tenant_grant.lua (adopt: whatever the quotas) and the error
// Store.tenantGrant makes of a refusal.
func (ts *Tenants) tenantGrant(tenant, scope, dim string, n, cpu, mem int64, adopt bool) error {
	l, ok := ts.limits[tenant]
	if !ok {
		l = warmpool.Unlimited()
	}
	type check struct {
		quota      string
		limit      int64
		field      string
		per        int64
		quantityOf func(int64) any
	}
	plain := func(n int64) any { return n }
	checks := []check{{"max_sessions", l.Sessions, "sessions", 1, plain}}
	if dim == dims[0] {
		checks = []check{{"max_pods", l.Pods, "pods", 1, plain},
			{"max_cpu", l.MilliCPU, "cpu_m", cpu, func(n int64) any { return warmpool.FormatMilli(n) }},
			{"max_memory", l.MemoryBytes, "memory_b", mem, func(n int64) any { return warmpool.FormatBytes(n) }}}
	}
	e := ts.escrowOf(tenant)
	for _, c := range checks {
		if use := e[c.field]; !adopt && c.limit >= 0 && use+n*c.per > c.limit {
			d := &warmpool.QuotaDetails{Tenant: tenant, Quota: c.quota, Limit: c.quantityOf(c.limit), Use: c.quantityOf(use)}
			err := warmpool.Errorf(warmpool.CodeQuotaExceeded, "tenant %q is at its %s (%v of %v)", tenant, d.Quota, d.Use, d.Limit)
			err.Details = d
			return err
		}
	}
	for _, c := range checks {
		if amount := n * c.per; amount > 0 {
			e[c.field] += amount
			e[c.field+"|"+scope] += amount
		}
	}
	return nil
}

// tenantCredit models tenant_credit.lua: n units of dim back from the scope (with the
// cpu and memory they were granted with, in proportion), at most what it was granted.
func (ts *Tenants) tenantCredit(tenant, scope, dim string, n int64) {
	fields := []string{"sessions"}
	if dim == dims[0] {
		fields = []string{"pods", "cpu_m", "memory_b"}
	}
	e := ts.escrowOf(tenant)
	granted := e[fields[0]+"|"+scope]
	n = min(n, granted)
	if n <= 0 {
		return
	}
	for _, f := range fields {
		mine := e[f+"|"+scope]
		back := mine * n / granted
		if back == mine {
			delete(e, f+"|"+scope)
		} else {
			e[f+"|"+scope] -= back
		}
		e[f] -= back
	}
}

// allGranted, as a credit's amount, is all the scope was granted.
const allGranted = 1 << 62

// Field is the config HASH's field as HMGET answers it: nil when absent.
func (s *Scope) Field(f string) any {
	if v, ok := s.config[f]; ok {
		return v
	}
	return nil
}

// quotaApply models quota_apply.lua.
func (s *Scope) quotaApply(dim string, n int64) bool {
	field := allowance[slices.Index(dims[:], dim)]
	if _, ok := s.config[field]; !ok {
		return false
	}
	s.config[field] = strconv.FormatInt(s.cfgInt(field)+n, 10)
	return true
}

// held is what the scope holds in each dimension: pods with deploys in flight, bound
// sessions.
func (s *Scope) held() [2]int64 {
	return [2]int64{int64(len(s.pods) + len(s.deploys)), int64(len(s.sess))}
}

// settle models Store.settle: quota_trim.lua (the sessions' allowance only when
// sessions), then the credits of what came off.
func (s *Scope) settle(sessions bool) {
	if s.tenants == nil {
		return
	}
	held, tenant := s.held(), s.config["tenant"]
	for i, f := range allowance {
		v, ok := s.config[f]
		a, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || a <= held[i] || (i == 1 && !sessions) {
			continue
		}
		s.config[f] = strconv.FormatInt(held[i], 10)
		s.tenants.tenantCredit(tenant, s.id, dims[i], a-held[i])
	}
}

// quotaGovern models quota_govern.lua: per dimension, an adopted allowance to set
// unless governed already, "-" to end, "" to leave alone; set says which it did.
func (s *Scope) quotaGovern(args [2]string) (set [2]bool, err error) {
	if !s.published() {
		return set, s.noScope()
	}
	for i, f := range allowance {
		_, has := s.config[f]
		switch a := args[i]; {
		case a == "-":
			set[i] = has
			delete(s.config, f)
		case a != "" && !has:
			s.config[f] = a
			set[i] = true
		}
	}
	return set, nil
}

// indexScope adds the scope to the tenant's index, as a publish does first.
func (ts *Tenants) indexScope(tenant string, s *Scope) {
	if ts.index[tenant] == nil {
		ts.index[tenant] = map[string]bool{}
	}
	ts.index[tenant][s.id] = true
}

// governPublished models Store.governPublished: a scope just published is governed
// by a balance pass of its own when its tenant has limits that govern.
func (ts *Tenants) governPublished(tenant string, s *Scope) error {
	l, ok := ts.limits[tenant]
	if !ok {
		return nil
	}
	if gov := governs(l); gov != [2]bool{} {
		if _, err := ts.balanceScope(tenant, s, gov, true); err != nil {
			return err
		}
	}
	return nil
}

// Balance models Store.BalanceTenant by the limits l (without max_idle_pods).
func (ts *Tenants) Balance(tenant string, l warmpool.TenantLimits) error {
	escrow := maps.Clone(ts.escrow[tenant])
	gov := governs(l)
	trim := l.Sessions >= 0 && 2*escrow["sessions"] > l.Sessions
	named := map[string]bool{}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(ts.index[tenant])) {
		ok, err := ts.balanceScope(tenant, ts.scopes[id], gov, trim)
		named[id] = ok
		errs = append(errs, err)
	}
	for _, f := range slices.Sorted(maps.Keys(escrow)) {
		dim, scope, ok := strings.Cut(f, "|")
		if !ok || (dim != dims[0] && dim != dims[1]) || named[scope] {
			continue
		}
		ts.tenantCredit(tenant, scope, dim, allGranted)
	}
	return errors.Join(errs...)
}

// balanceScope models Store.balanceScope: it reports whether the scope still names the
// tenant.
func (ts *Tenants) balanceScope(tenant string, s *Scope, gov [2]bool, trim bool) (bool, error) {
	if s.config["tenant"] != tenant {
		return false, nil
	}
	held := s.held()
	var has [2]bool
	for i, f := range allowance {
		_, has[i] = s.config[f]
	}
	var govern [2]string
	for i := range dims {
		switch {
		case gov[i] && !has[i]:
			if err := ts.tenantGrant(tenant, s.id, dims[i], held[i], s.cfgInt("cpu_m"), s.cfgInt("memory_b"), true); err != nil {
				return true, err
			}
			govern[i] = strconv.FormatInt(held[i], 10)
		case !gov[i] && has[i]:
			govern[i] = "-"
		}
	}
	if govern != [2]string{} {
		set, err := s.quotaGovern(govern)
		if err != nil {
			return true, err
		}
		for i := range dims {
			switch {
			case govern[i] == "-":
				ts.tenantCredit(tenant, s.id, dims[i], allGranted)
			case govern[i] != "" && !set[i]:
				ts.tenantCredit(tenant, s.id, dims[i], held[i])
			}
		}
	}
	if has != [2]bool{} {
		s.settle(trim)
	}
	return true, nil
}
