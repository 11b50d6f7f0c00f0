package ui

import (
	"context"
	"sort"

	"github.com/warmpool/warmpool"
)

// ScopePage answers a page of GET /v1/scopes from the same pass over every scope that
// the pool page reads (summaries, shared through Redis), one less than ListAge old, so
// that however many callers page through the scopes on however many replicas, Redis
// reads every scope once every ListAge (or every Refresh while a pool page is open,
// whose pass the pages take too): at most limit scopes whose id sorts after after
// ("" for the first page), in the order of their ids, and next, the id of the page's
// last scope when more follow ("" on the last page). Errors: STORE_UNAVAILABLE.
func (u *UI) ScopePage(ctx context.Context, after string, limit int) (page []warmpool.ScopeSummary, next string, err error) {
	sum, err := u.sums.get(ctx, ListAge)
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
