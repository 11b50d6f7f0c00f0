package ui

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/warmpool/warmpool"
)

// Bounds of GET /v1/ui/state's parameters.
const (
	// DefaultLimit is the summary rows of a page when limit is not given.
	DefaultLimit = 20
	// MaxLimit bounds limit.
	MaxLimit = 500
	// MaxDetail bounds the scopes detail names: each costs three reads.
	MaxDetail = 20
	// maxFilter is the longest filter: a scope id's length.
	maxFilter = 63
)

// Query is what one GET /v1/ui/state asks for: a page of the summary rows, those
// whose scope id contains Filter, sorted by Sort (descending with Desc, ties by
// scope id), Limit of them from Offset; and the pods and deploy logs of the scopes
// Detail names.
type Query struct {
	Filter        string
	Sort          string
	Desc          bool
	Offset, Limit int
	Detail        []string
}

// sortKeys are the columns a page sorts by, each a number of the row but scope_id.
var sortKeys = map[string]func(*warmpool.ScopeSummary) int64{
	"scope_id":     nil,
	"version":      func(c *warmpool.ScopeSummary) int64 { return c.Version },
	"max_pods":     func(c *warmpool.ScopeSummary) int64 { return c.MaxPods },
	"pods":         func(c *warmpool.ScopeSummary) int64 { return c.Pods },
	"idle":         func(c *warmpool.ScopeSummary) int64 { return c.Idle },
	"busy":         func(c *warmpool.ScopeSummary) int64 { return c.Pods - c.Idle },
	"old_pods":     func(c *warmpool.ScopeSummary) int64 { return c.OldPods },
	"sessions":     func(c *warmpool.ScopeSummary) int64 { return c.Sessions },
	"placeholders": func(c *warmpool.ScopeSummary) int64 { return c.Deploying },
	"followers":    func(c *warmpool.ScopeSummary) int64 { return c.Followers },
	"waiters":      func(c *warmpool.ScopeSummary) int64 { return c.Waiters },
}

// params are the query parameters GET /v1/ui/state knows.
var params = []string{"filter", "sort", "offset", "limit", "detail"}

// ParseQuery reads GET /v1/ui/state's query parameters. Errors: VALIDATION naming the
// parameter (an unknown one, one given twice, or a value out of its bounds).
func ParseQuery(v url.Values) (Query, error) {
	q := Query{Sort: "scope_id", Limit: DefaultLimit}
	for name, vals := range v {
		if !slices.Contains(params, name) {
			return q, warmpool.Errorf(warmpool.CodeValidation, "%s: unknown parameter (known: %s)", name, strings.Join(params, ", "))
		}
		if len(vals) > 1 {
			return q, warmpool.Errorf(warmpool.CodeValidation, "%s: given %d times, want it once", name, len(vals))
		}
	}
	bad := func(name, want string) error {
		return warmpool.Errorf(warmpool.CodeValidation, "%s: want %s, got %q", name, want, v.Get(name))
	}
	if f := v.Get("filter"); f != "" {
		q.Filter = strings.ToLower(f)
		if len(f) > maxFilter || strings.Trim(q.Filter, "abcdefghijklmnopqrstuvwxyz0123456789._-") != "" {
			return q, bad("filter", fmt.Sprintf("part of a scope id (up to %d of a-z, 0-9, '.', '_', '-')", maxFilter))
		}
	}
	if s, ok := v["sort"]; ok {
		key, desc := strings.CutPrefix(s[0], "-")
		if _, known := sortKeys[key]; !known {
			names := make([]string, 0, len(sortKeys))
			for k := range sortKeys {
				names = append(names, k)
			}
			sort.Strings(names)
			return q, bad("sort", "one of "+strings.Join(names, ", ")+", with a leading '-' for descending")
		}
		q.Sort, q.Desc = key, desc
	}
	if _, ok := v["offset"]; ok {
		n, err := strconv.Atoi(v.Get("offset"))
		if err != nil || n < 0 {
			return q, bad("offset", "an integer of 0 or more")
		}
		q.Offset = n
	}
	if _, ok := v["limit"]; ok {
		n, err := strconv.Atoi(v.Get("limit"))
		if err != nil || n < 1 || n > MaxLimit {
			return q, bad("limit", fmt.Sprintf("an integer from 1 to %d", MaxLimit))
		}
		q.Limit = n
	}
	if d := v.Get("detail"); d != "" {
		for id := range strings.SplitSeq(d, ",") {
			if !warmpool.ValidScopeID(id) {
				return q, bad("detail", "scope ids separated by commas")
			}
			if !slices.Contains(q.Detail, id) {
				q.Detail = append(q.Detail, id)
			}
		}
		if len(q.Detail) > MaxDetail {
			return q, bad("detail", fmt.Sprintf("at most %d scope ids", MaxDetail))
		}
	}
	return q, nil
}

// page is q's page of sum's rows, and how many rows match q's filter.
func (q Query) page(sum *summary) ([]Row, int) {
	idx := make([]int, 0, len(sum.rows))
	for i := range sum.rows {
		if q.Filter == "" || strings.Contains(sum.rows[i].ScopeID, q.Filter) {
			idx = append(idx, i)
		}
	}
	// The rows are sorted by scope id: a stable sort by another key keeps that order
	// among ties.
	if key := sortKeys[q.Sort]; key != nil {
		sort.SliceStable(idx, func(a, b int) bool {
			x, y := key(&sum.rows[idx[a]]), key(&sum.rows[idx[b]])
			if q.Desc {
				return x > y
			}
			return x < y
		})
	} else if q.Desc {
		slices.Reverse(idx)
	}
	matched := len(idx)
	idx = idx[min(q.Offset, matched):min(q.Offset+q.Limit, matched)]
	rows := make([]Row, 0, len(idx))
	for _, i := range idx {
		rows = append(rows, newRow(&sum.rows[i]))
	}
	return rows, matched
}

// Totals are the sums over every live scope of the summary.
type Totals struct {
	Scopes       int   `json:"scopes"`
	Pods         int64 `json:"pods"`
	Idle         int64 `json:"idle"`
	Busy         int64 `json:"busy"`
	OldPods      int64 `json:"old_pods"`
	MaxPods      int64 `json:"max_pods"`
	Sessions     int64 `json:"sessions"`
	Placeholders int64 `json:"placeholders"`
	Followers    int64 `json:"followers"`
	Waiters      int64 `json:"waiters"`
}

// Row is one scope's line of the summary table.
type Row struct {
	ScopeID        string `json:"scope_id"`
	Version        int64  `json:"version"`
	DeployVer      string `json:"deploy_ver"`
	MaxPods        int64  `json:"max_pods"`
	PodConcurrency int64  `json:"pod_concurrency"`
	Pods           int64  `json:"pods"`
	Idle           int64  `json:"idle"`
	Busy           int64  `json:"busy"`
	OldPods        int64  `json:"old_pods"`
	Sessions       int64  `json:"sessions"`
	Placeholders   int64  `json:"placeholders"`
	Followers      int64  `json:"followers"`
	Waiters        int64  `json:"waiters"`
}

func newRow(c *warmpool.ScopeSummary) Row {
	return Row{ScopeID: c.ScopeID, Version: c.Version, DeployVer: c.DeployVer, MaxPods: c.MaxPods, PodConcurrency: c.PodConcurrency,
		Pods: c.Pods, Idle: c.Idle, Busy: c.Pods - c.Idle, OldPods: c.OldPods, Sessions: c.Sessions, Placeholders: c.Deploying,
		Followers: c.Followers, Waiters: c.Waiters}
}
