package invariant

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// Capacity checks invariants 1 and 2 over a sequence of snapshots of one scope, taken
// in order, through class B changes of its config. A change that lowers
// pod_concurrency or max_pods takes nothing away: a pod may keep more slots than the
// new pod_concurrency, a scope more pods (and deploys in flight) than the new max_pods,
// but only what was placed before the change, and it may only drain. So Capacity keeps,
// for every pod, the most slots it may hold (and for the scope the most pods +
// deploys), and:
//   - a pod first seen, or the scope, may hold what the configs in force since the last
//     snapshot allowed (the loosest of them: what was placed in between was placed
//     under one of them); a pod seen before, what it held then, or more under a config
//     published since that raised the limit;
//   - after each snapshot that bound comes down to what the snapshot shows, but never
//     below the config's limit: a pod over pod_concurrency may never gain a slot again
//     while it is over, nor the scope a pod or deploy while over max_pods;
//   - between two snapshots of one config, a pod still over pod_concurrency got no new
//     claim (hold, grant, follower) and no new session but those its claims of before
//     became; a scope still over max_pods started no deploy and registered no pod but
//     those of its deploys of before;
//   - a pod retired in both snapshots (of a deleted scope, or recycled under recycle
//     "delete") took no session either: the same rule, whatever the configs.
//
// A snapshot of a config version configs does not hold yet (published but not yet
// told) is not checked, and the sequence goes on from the snapshot before it. The
// zero value is ready; a Capacity is not safe for concurrent use.
type Capacity struct {
	seen    bool
	version int64
	prev    redisstore.Snapshot
	most    map[string]int
	total   int
}

// Violations returns every invariant s breaks, s being the next snapshot of the
// sequence: 1 and 2 as Capacity keeps them, the others as Violations checks them.
// configs holds the pool config of every version the scope was published with (a
// version at which it was deleted may name the config it had); versions and settled are
// Violations'.
func (c *Capacity) Violations(s redisstore.Snapshot, configs map[int64]warmpool.PoolConfig, versions []string, settled bool) []string {
	return append(c.Check(s, configs), others(s, versions, settled)...)
}

// Check returns the violations of invariants 1 and 2 in s, the next snapshot of the
// sequence, and takes s as the last one.
func (c *Capacity) Check(s redisstore.Snapshot, configs map[int64]warmpool.PoolConfig) []string {
	cur, ok := inForce(configs, s.Version)
	if !ok || s.Version > slices.Max(slices.Collect(maps.Keys(configs))) {
		return nil
	}
	pc, maxPods := cur.PodConcurrency, cur.MaxPods()
	// The loosest limits of the configs published since the last snapshot, and of the
	// one in force at it.
	newPC, newMax, prevPC := 0, 0, 0
	for v, p := range configs {
		if v <= s.Version && (!c.seen || v > c.version) {
			newPC, newMax = max(newPC, p.PodConcurrency), max(newMax, p.MaxPods())
		}
	}
	if c.seen {
		if p, ok := inForce(configs, c.version); ok {
			prevPC = p.PodConcurrency
		}
	}
	same := c.seen && s.Version == c.version

	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	sessions := sessionsOn(s)
	before, retired := map[string]bool{}, map[string]bool{}
	for _, p := range c.prev.Pods {
		before[p.Pod.ID], retired[p.Pod.ID] = true, p.Retired
	}
	most := make(map[string]int, len(s.Pods))
	for _, p := range s.Pods {
		id := p.Pod.ID
		allowed := max(prevPC, newPC)
		if m, ok := c.most[id]; ok {
			allowed = max(m, newPC)
		}
		held := max(p.Slots, sessions[id])
		if held > allowed {
			if allowed == pc {
				bad("inv1: pod %s has %d sessions, %d slots > pod_concurrency %d", id, sessions[id], p.Slots, pc)
			} else {
				bad("inv1: pod %s has %d sessions, %d slots > %d, the most it held since pod_concurrency became %d", id, sessions[id], p.Slots, allowed, pc)
			}
		}
		most[id] = max(pc, min(allowed, held))
		switch {
		case retired[id] && p.Retired:
			out = append(out, c.noNewSlot(s, id, "which is retiring")...)
		case same && before[id] && p.Slots > pc:
			out = append(out, c.noNewSlot(s, id, fmt.Sprintf("which is over pod_concurrency %d", pc))...)
		}
	}

	allowed := newMax
	if c.seen {
		allowed = max(c.total, newMax)
	}
	n := len(s.Pods) + len(s.Deploys)
	if n > allowed {
		if allowed == maxPods {
			bad("inv2: %d pods + %d deploys > max_pods %d", len(s.Pods), len(s.Deploys), maxPods)
		} else {
			bad("inv2: %d pods + %d deploys > %d, the most the scope had since max_pods became %d", len(s.Pods), len(s.Deploys), allowed, maxPods)
		}
	}
	if same && n > maxPods {
		out = append(out, c.overMax(s, maxPods)...)
	}
	c.seen, c.version, c.prev, c.most, c.total = true, s.Version, s, most, max(maxPods, min(allowed, n))
	return out
}

// noNewSlot checks a pod that may take no new slot, in s and in the snapshot before
// (over pod_concurrency under the same config, or retiring; why says which): its claims
// are all of before, and each session it has that it did not have before was one of
// those claims (bound since).
func (c *Capacity) noNewSlot(s redisstore.Snapshot, pod, why string) []string {
	var out []string
	gone := 0
	for claim, p := range c.prev.ClaimPod {
		if p == pod && s.ClaimPod[claim] != pod {
			gone++
		}
	}
	for claim, p := range s.ClaimPod {
		// An adopted claim holds a slot for a session the pod may already serve (an
		// adoption that does not know its sessions): not a new placement.
		if p == pod && c.prev.ClaimPod[claim] != pod && !strings.HasPrefix(claim, "adopted:") {
			out = append(out, fmt.Sprintf("inv1: claim %s placed on pod %s, %s", claim, pod, why))
		}
	}
	var placed []string
	for sess, p := range s.Sessions {
		if p == pod && c.prev.Sessions[sess] != pod {
			placed = append(placed, sess)
		}
	}
	if len(placed) > gone {
		slices.Sort(placed)
		out = append(out, fmt.Sprintf("inv1: sessions %v placed on pod %s, %s (only %d of its claims were bound)", placed, pod, why, gone))
	}
	return out
}

// overMax checks a scope over max_pods in s and in the snapshot before, of the same
// config: no deploy started, and every pod it did not have before is one of its
// deploys of before, registered.
func (c *Capacity) overMax(s redisstore.Snapshot, maxPods int) []string {
	var out []string
	gone := 0
	for d := range c.prev.Deploys {
		if _, ok := s.Deploys[d]; !ok {
			gone++
		}
	}
	for d := range s.Deploys {
		if _, ok := c.prev.Deploys[d]; !ok {
			out = append(out, fmt.Sprintf("inv2: deploy %s started with the scope over max_pods %d", d, maxPods))
		}
	}
	had := map[string]bool{}
	for _, p := range c.prev.Pods {
		had[p.Pod.ID] = true
	}
	var added []string
	for _, p := range s.Pods {
		if !had[p.Pod.ID] {
			added = append(added, p.Pod.ID)
		}
	}
	if len(added) > gone {
		out = append(out, fmt.Sprintf("inv2: pods %v added with the scope over max_pods %d (only %d deploys of before ended)", added, maxPods, gone))
	}
	return out
}

// inForce is the config in force at version: the newest at or before it.
func inForce(configs map[int64]warmpool.PoolConfig, version int64) (warmpool.PoolConfig, bool) {
	best, found := int64(0), false
	for v := range configs {
		if v <= version && (!found || v > best) {
			best, found = v, true
		}
	}
	return configs[best], found
}
