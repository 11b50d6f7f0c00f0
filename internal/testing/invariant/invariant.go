// Package invariant checks the SPEC §6 invariants on a snapshot of a scope's pool, for
// the concurrency tests of every package.
package invariant

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// Violations returns every invariant the snapshot breaks, empty when it holds them all.
// versions lists the deploy_vers new sessions may have landed on (the scope's current
// one, plus older ones when the test changed the config; the version a rollout's
// prewarm serves, while the snapshot notes one, is allowed too). With settled set, the
// snapshot must also be free of work in flight: no deploy lease, room entry, claim
// (hold or grant included), waiter or queue entry is left (invariant 5).
//
// The fair queue: every queued waiter is a live waiter, and a waiter handed a slot (a
// grant: the claim named after it) has left the queue. A grant is a claim, so its slot
// counts on its pod like any other (invariants 1 and 3).
func Violations(s redisstore.Snapshot, cfg warmpool.ScopeConfig, versions []string, settled bool) []string {
	return append(limits(s, cfg.Pool), others(s, versions, settled)...)
}

// limits checks invariants 1 and 2 against one config's limits.
func limits(s redisstore.Snapshot, p warmpool.PoolConfig) []string {
	var out []string
	pc, maxPods := p.PodConcurrency, p.MaxPods()
	// 2. pods + placeholders <= max_pods
	if n := len(s.Pods) + len(s.Deploys); n > maxPods {
		out = append(out, fmt.Sprintf("inv2: %d pods + %d deploys > max_pods %d", len(s.Pods), len(s.Deploys), maxPods))
	}
	sessionsOn := sessionsOn(s)
	for _, p := range s.Pods {
		// 1. sessions (and all slots) <= pod_concurrency
		if sess := sessionsOn[p.Pod.ID]; sess > pc || p.Slots > pc {
			out = append(out, fmt.Sprintf("inv1: pod %s has %d sessions, %d slots > pod_concurrency %d", p.Pod.ID, sess, p.Slots, pc))
		}
	}
	return out
}

func sessionsOn(s redisstore.Snapshot) map[string]int {
	n := map[string]int{}
	for _, pod := range s.Sessions {
		n[pod]++
	}
	return n
}

// others checks every invariant but 1 and 2, which depend on the config's limits.
func others(s redisstore.Snapshot, versions []string, settled bool) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	sessionsOn := sessionsOn(s)
	for sess := range s.Sessions {
		if _, ok := s.SessExp[sess]; !ok {
			bad("inv3: session %s has no expiry", sess)
		}
	}
	claimsOn := map[string]int{}
	for c, pod := range s.ClaimPod {
		if pod != "" && !strings.HasPrefix(pod, "!") {
			claimsOn[pod]++
			if _, ok := s.Claims[c]; !ok {
				bad("inv5: claim %s on %s has no deadline", c, pod)
			}
		}
	}
	registered := map[string]redisstore.PodState{}
	for _, p := range s.Pods {
		registered[p.Pod.ID] = p
		sess := sessionsOn[p.Pod.ID]
		// 3. the slot count agrees with the sessions and claims that point at the pod
		if p.Slots != sess+claimsOn[p.Pod.ID] {
			bad("inv3: pod %s counts %d slots but has %d sessions + %d claims", p.Pod.ID, p.Slots, sess, claimsOn[p.Pod.ID])
		}
		// 4. an idle pod has no session and no claim
		if p.Idle && p.Slots != 0 {
			bad("inv4: idle pod %s has %d slots", p.Pod.ID, p.Slots)
		}
		if !p.Idle && p.Slots == 0 && settled {
			bad("inv4: pod %s has no session but is not idle", p.Pod.ID)
		}
	}
	for sess, pod := range s.Sessions {
		p, ok := registered[pod]
		if !ok {
			bad("inv3: session %s points at unknown pod %s", sess, pod)
			continue
		}
		// 6. sessions only on pods of an allowed (current) deploy_ver
		if !contains(versions, p.Pod.DeployVer) && (s.Prewarm.Ver == "" || p.Pod.DeployVer != s.Prewarm.Ver) {
			bad("inv6: session %s on pod %s of deploy_ver %s, allowed %v", sess, pod, p.Pod.DeployVer, versions)
		}
	}
	for c, pod := range s.ClaimPod {
		if !strings.HasPrefix(pod, "!") {
			if _, ok := registered[pod]; !ok {
				bad("inv3: claim %s points at unknown pod %s", c, pod)
			}
		}
	}
	for w := range s.Queue {
		if _, ok := s.Waiters[w]; !ok {
			bad("inv5: queue entry %s is no waiter", w)
		}
		if pod := s.ClaimPod[w]; pod != "" && !strings.HasPrefix(pod, "!") {
			bad("inv5: waiter %s was handed a slot on %s but is still queued", w, pod)
		}
	}
	if settled {
		if len(s.Deploys) > 0 {
			bad("inv5: deploy leases left: %v", keys(s.Deploys))
		}
		if len(s.Followers) > 0 {
			bad("inv5: room entries left: %v", keys(s.Followers))
		}
		if len(claimsOn) > 0 {
			bad("inv5: claims left: %v", claimsOn)
		}
		if len(s.Waiters) > 0 {
			bad("inv5: waiters left: %v", keys(s.Waiters))
		}
		if len(s.Queue) > 0 {
			bad("inv5: queue entries left: %v", keys(s.Queue))
		}
	}
	return out
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WarmBeforeBackoff checks an acquire at now that the refill backoff held back (SPEC
// §11.3): backoff never stops a route from using a warm pod, so the scope, as before
// had it, had no idle pod of its deploy_ver ver, nor of the version a rollout's
// prewarm still served at now, that it could hand out (not retired, and the scope
// within maxPods, so that no idle pod was surplus).
func WarmBeforeBackoff(before redisstore.Snapshot, ver string, maxPods int, now time.Time) []string {
	if len(before.Pods) > maxPods {
		return nil
	}
	var out []string
	for _, p := range before.Pods {
		serves := p.Pod.DeployVer == ver || before.Prewarm.Serves(p.Pod.DeployVer, now)
		if p.Idle && !p.Retired && !p.Draining && serves { // a draining pod takes no session either
			out = append(out, fmt.Sprintf("backoff: a deploy was held back while pod %s of deploy_ver %s was warm", p.Pod.ID, ver))
		}
	}
	return out
}
