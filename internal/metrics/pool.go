package metrics

import (
	"context"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/warmpool/warmpool/lua"
)

// poolGauge is one family of pool gauges: labelled by scope, and by label (one series
// a scope for each of values, in their order) when label is set.
type poolGauge struct {
	name, help, label string
	values            []string
	// read gives the scope's values, one per entry of values (one when label is
	// empty).
	read func(lua.ScopeCounts) []int64
}

// poolGauges are the pool gauges, by name: the order of a gathering.
var poolGauges = []poolGauge{
	{name: "warmpool_followers", help: "Requests waiting in the follower rooms of deploys in flight, by scope.",
		read: func(s lua.ScopeCounts) []int64 { return []int64{s.Followers} }},
	{name: "warmpool_max_pods", help: "The scope's max_pods: ceil(max_concurrency / pod_concurrency).",
		read: func(s lua.ScopeCounts) []int64 { return []int64{s.MaxPods} }},
	{name: "warmpool_placeholders", help: "Deploys in flight (placeholders, counted toward max_pods) by scope.",
		read: func(s lua.ScopeCounts) []int64 { return []int64{s.Deploying} }},
	{name: "warmpool_pods", help: "Registered pods by scope and state (idle, busy).", label: "state", values: []string{"busy", "idle"},
		read: func(s lua.ScopeCounts) []int64 { return []int64{s.Pods - s.Idle, s.Idle} }},
	{name: "warmpool_pods_by_version", help: "Registered pods by scope and deploy_ver: current, or old (left from an earlier deploy config).",
		label: "version", values: []string{"current", "old"},
		read: func(s lua.ScopeCounts) []int64 { return []int64{s.Pods - s.OldPods, s.OldPods} }},
	{name: "warmpool_sessions", help: "Bound sessions by scope.",
		read: func(s lua.ScopeCounts) []int64 { return []int64{s.Sessions} }},
	{name: "warmpool_waiters", help: "Route calls waiting in the queue, by scope.",
		read: func(s lua.ScopeCounts) []int64 { return []int64{s.Waiters} }},
}

// pool reads the pool sizes of every scope from Redis in one pipeline (lua.Counts:
// a few O(1) reads a scope, the pods' versions aside), so that the gauges are the same
// on every replica and never drift from the state, and drops the other metrics'
// series of the scopes gone from Redis. A failed read counts a scrape error and
// gives no gauges; the other metrics are still served.
func (m *Metrics) pool(ctx context.Context) []*dto.MetricFamily {
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
	fams := make([]*dto.MetricFamily, 0, len(poolGauges))
	for i := range poolGauges {
		fams = append(fams, poolGauges[i].family(counts))
	}
	return fams
}

var (
	gaugeType      = dto.MetricType_GAUGE
	scopeLabelName = labelScope
)

// family builds the gauge's family of counts (sorted by scope, as Counts gives them),
// its series sorted by labels as a registry sorts them. The messages are allocated
// in one block each: tens of thousands of series at thousands of scopes.
func (g *poolGauge) family(counts []lua.ScopeCounts) *dto.MetricFamily {
	per, labels := max(1, len(g.values)), 1
	if g.label != "" {
		labels = 2
	}
	n := len(counts) * per
	ms := make([]dto.Metric, n)
	gauges := make([]dto.Gauge, n)
	values := make([]float64, n)
	pairs := make([]dto.LabelPair, n*labels)
	refs := make([]*dto.LabelPair, n*labels)
	f := &dto.MetricFamily{Name: &g.name, Help: &g.help, Type: &gaugeType, Metric: make([]*dto.Metric, n)}
	i := 0
	for c := range counts {
		for j, v := range g.read(counts[c]) {
			p := pairs[i*labels : (i+1)*labels]
			p[0].Name, p[0].Value = &scopeLabelName, &counts[c].ScopeID
			if labels == 2 {
				p[1].Name, p[1].Value = &g.label, &g.values[j]
			}
			r := refs[i*labels : (i+1)*labels]
			for k := range r {
				r[k] = &p[k]
			}
			values[i] = float64(v)
			gauges[i].Value = &values[i]
			ms[i].Label, ms[i].Gauge = r, &gauges[i]
			f.Metric[i] = &ms[i]
			i++
		}
	}
	return f
}

// merge is the families of a and b in one list, sorted by name.
func merge(a, b []*dto.MetricFamily) []*dto.MetricFamily {
	out := slices.Concat(a, b)
	slices.SortStableFunc(out, func(x, y *dto.MetricFamily) int { return strings.Compare(x.GetName(), y.GetName()) })
	return out
}
