package ui

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/tenants"
)

// MaxTenants bounds the tenants panel: the first MaxTenants tenants with quotas, in
// the order of their ids. Each costs a replica two Redis round trips a Refresh while a
// page is open (the tenant's index of scopes, then one pipeline over them), however
// many scopes it has.
const MaxTenants = 100

// Tenants is what the pool page needs of the tenant service (tenants.Service): the
// tenants with quotas, with their use and share.
type Tenants interface {
	// List answers at most limit tenants with quotas after the id after, in the
	// order of their ids, and the cursor of the next page ("" on the last). Errors:
	// STORE_UNAVAILABLE.
	List(ctx context.Context, after string, limit int) ([]warmpool.TenantView, string, error)
}

var _ Tenants = (*tenants.Service)(nil)

// tenantPanel hands out the tenants panel, read at most once per ttl by this replica:
// requests that find it older take turns, and the first reads it for the others.
type tenantPanel struct {
	src   Tenants
	clock warmpool.Clock
	ttl   time.Duration

	// turn, a lock a request can stop waiting for, guards the fields below it.
	turn chan struct{}
	at   time.Time
	list []warmpool.TenantView
	more bool
}

func newTenantPanel(src Tenants, clock warmpool.Clock, ttl time.Duration) *tenantPanel {
	return &tenantPanel{src: src, clock: clock, ttl: ttl, turn: make(chan struct{}, 1)}
}

// get returns the tenants with quotas, the first MaxTenants of them, read less than
// ttl ago, and whether more have quotas. Errors: STORE_UNAVAILABLE, and ctx's own when
// it ends first.
func (p *tenantPanel) get(ctx context.Context) ([]warmpool.TenantView, bool, error) {
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	defer func() { <-p.turn }()
	if now := p.clock.Now(); p.list != nil && !now.Before(p.at) && now.Sub(p.at) < p.ttl {
		return p.list, p.more, nil
	}
	list, next, err := p.src.List(ctx, "", MaxTenants)
	if err != nil {
		return nil, false, err
	}
	if list == nil {
		list = []warmpool.TenantView{}
	}
	// Read when it ended, as the summary's pass is.
	p.at, p.list, p.more = p.clock.Now(), list, next != ""
	return list, p.more, nil
}
