package metrics

import (
	"context"

	dto "github.com/prometheus/client_model/go"
	"github.com/warmpool/warmpool"
)

// poolGauge is one family of pool gauges: labelled by scope, and by label (one series
// a scope for each of values, in their order) when label is set.
type poolGauge struct {
	name, help, label string
	values            []string
	// read gives the scope's values, one per entry of values (one when label is
	// empty).
	read func(warmpool.ScopeCounts) [2]int64
}

// poolGauges are the pool gauges, by name: the order of a gathering.
var poolGauges = []poolGauge{
	{name: "warmpool_followers", help: "Requests waiting in the follower rooms of deploys in flight, by scope.",
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.Followers} }},
	{name: "warmpool_max_pods", help: "The scope's max_pods: ceil(max_concurrency / pod_concurrency).",
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.MaxPods} }},
	{name: "warmpool_placeholders", help: "Deploys in flight (placeholders, counted toward max_pods) by scope.",
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.Deploying} }},
	{name: "warmpool_pods", help: "Registered pods by scope and state (idle, busy).", label: "state", values: []string{"busy", "idle"},
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.Pods - s.Idle, s.Idle} }},
	{name: "warmpool_pods_by_version", help: "Registered pods by scope and deploy_ver: current, or old (left from an earlier deploy config).",
		label: "version", values: []string{"current", "old"},
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.Pods - s.OldPods, s.OldPods} }},
	{name: "warmpool_refill_backoff", help: "Failed deploys in a row of the scope's current deploy_ver: while above 0, the refill backs off (SPEC 11.3).",
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.Backoff} }},
	{name: "warmpool_sessions", help: "Bound sessions by scope.",
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.Sessions} }},
	{name: "warmpool_target_idle_pods", help: "Idle pods the scope's pool keeps now: min_idle_pods, or under warm_policy demand the demand estimate (SPEC 11.3).",
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.TargetIdle} }},
	{name: "warmpool_waiters", help: "Route calls waiting in the queue, by scope.",
		read: func(s warmpool.ScopeCounts) [2]int64 { return [2]int64{s.Waiters} }},
}

// pool reads the pool sizes of every scope from Redis in one pipeline (redisstore.Counts:
// a few O(1) reads a scope, the pods' versions aside), so that the gauges are the same
// on every replica and never drift from the state, and drops the other metrics'
// series of the scopes gone from Redis. A failed read counts a scrape error and
// gives no gauges; the other metrics are still served.
func (m *Metrics) pool(ctx context.Context) []*scopedFamily {
	counts, err := m.store.Counts(ctx)
	if err != nil {
		m.scrapeErrors.Inc()
		m.log.Debug("pool gauges not read", "err", err)
		return nil
	}
	live := make(map[string]bool, len(counts))
	for _, s := range counts {
		live[s.ScopeID] = true
	}
	m.dropDeleted(live)
	fams := make([]*scopedFamily, 0, len(poolGauges))
	for i := range poolGauges {
		fams = append(fams, poolGauges[i].family(counts))
	}
	return fams
}

// family is the gauge's family of counts (sorted by scope, as Counts gives them).
func (g *poolGauge) family(counts []warmpool.ScopeCounts) *scopedFamily {
	per := max(1, len(g.values))
	return &scopedFamily{name: g.name, help: g.help, typ: dto.MetricType_GAUGE, label: g.label, n: per * len(counts),
		series: func(yield func(scopedRow) bool) {
			for i := range counts {
				v := g.read(counts[i])
				for j := range per {
					r := scopedRow{scope: counts[i].ScopeID, n: v[j]}
					if g.label != "" {
						r.value = g.values[j]
					}
					if !yield(r) {
						return
					}
				}
			}
		}}
}
