package ui

import (
	"context"
	"sort"

	"github.com/warmpool/warmpool/lua"
)

// ScopePage answers a page of GET /v1/scopes from the same pass over every scope that
// the pool page reads (summaries: made at most once a Refresh per replica and shared
// through Redis, so that however many callers page through the scopes, Redis reads
// every scope about once a second): at most limit scopes whose id sorts after after
// ("" for the first page), in the order of their ids, and next, the id of the page's
// last scope when more follow ("" on the last page). Errors: STORE_UNAVAILABLE.
func (u *UI) ScopePage(ctx context.Context, after string, limit int) (page []lua.ScopeSummary, next string, err error) {
	sum, err := u.sums.get(ctx)
	if err != nil {
		return nil, "", err
	}
	rows := sum.rows
	from := sort.Search(len(rows), func(i int) bool { return rows[i].ScopeID > after })
	to := min(from+max(limit, 1), len(rows))
	if to < len(rows) {
		next = rows[to-1].ScopeID
	}
	return rows[from:to], next, nil
}
