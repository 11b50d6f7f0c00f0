//go:build faults

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/redisstore"
)

// The tenant of the quota case and its limits: max_pods binds before the scopes'
// own max_pods (4 each), max_sessions before the pods' slots (3 pods x 2).
const (
	quotaTenant      = "tq"
	quotaMaxPods     = 3
	quotaMaxSessions = 6
)

var quotaScopes = []string{"qa", "qb"}

// tenantSnap is what a tenant's scopes hold and what its escrow counts, read in one
// MULTI (one Redis, no Cluster: the scopes' and the tenant's keys on one server).
type tenantSnap struct {
	pods, sessions map[string]int64 // scope -> pods + deploys in flight, bound sessions
	escrow         map[string]string
}

func (r *rig) tenantSnap() (tenantSnap, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	k := redisstore.NewKeyspace(rigPrefix)
	type counts struct{ pods, deploys, sessions *redis.IntCmd }
	cmds := map[string]counts{}
	var escrow *redis.MapStringStringCmd
	_, err := r.redis.admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, scope := range quotaScopes {
			sk := k.Scope(scope)
			cmds[scope] = counts{p.ZCard(ctx, sk.Pods), p.ZCard(ctx, sk.Deploying), p.HLen(ctx, sk.Sessions)}
		}
		escrow = p.HGetAll(ctx, k.TenantEscrow(quotaTenant))
		return nil
	})
	if err != nil {
		return tenantSnap{}, err
	}
	s := tenantSnap{pods: map[string]int64{}, sessions: map[string]int64{}, escrow: escrow.Val()}
	for scope, c := range cmds {
		s.pods[scope] = c.pods.Val() + c.deploys.Val()
		s.sessions[scope] = c.sessions.Val()
	}
	return s, nil
}

// total sums a per-scope count.
func total(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// violations lists how the snapshot over-admits: the tenant over a quota, or its
// escrow counting less than its scopes hold (so that it would grant beyond the quota).
func (s tenantSnap) violations() []string {
	var out []string
	pods, sess := total(s.pods), total(s.sessions)
	if pods > quotaMaxPods {
		out = append(out, fmt.Sprintf("over-admission: the tenant's scopes hold %d pods + deploys %v > max_pods %d", pods, s.pods, quotaMaxPods))
	}
	if sess > quotaMaxSessions {
		out = append(out, fmt.Sprintf("over-admission: the tenant's scopes hold %d sessions %v > max_sessions %d", sess, s.sessions, quotaMaxSessions))
	}
	for _, d := range []struct {
		dim  string
		held map[string]int64
	}{{"pods", s.pods}, {"sessions", s.sessions}} {
		if n, _ := strconv.ParseInt(s.escrow[d.dim], 10, 64); n < total(d.held) {
			out = append(out, fmt.Sprintf("escrow short: it counts %s=%d, the scopes hold %d %v", d.dim, n, total(d.held), d.held))
		}
		for scope, h := range d.held {
			if n, _ := strconv.ParseInt(s.escrow[d.dim+"|"+scope], 10, 64); n < h {
				out = append(out, fmt.Sprintf("escrow short: it granted %s %s=%d, the scope holds %d", scope, d.dim, n, h))
			}
		}
	}
	return out
}

// driverPods counts the driver's live pods (created, not dead) of the tenant's scopes.
func (r *rig) driverPods() int {
	n := 0
	for _, p := range r.pods.Pods() {
		if slices.Contains(quotaScopes, p.ScopeID) && p.Dead == "" {
			n++
		}
	}
	return n
}

// clientSessions counts the sessions the rig's clients were told are bound in the
// tenant's scopes and that have neither ended nor expired.
func (r *rig) clientSessions() int {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for key, h := range r.ledger {
		scope, _, _ := strings.Cut(key, "/")
		if slices.Contains(quotaScopes, scope) && h.until.After(now) {
			n++
		}
	}
	return n
}

// tenantWatcher checks the tenant's snapshots over and over, and keeps the most the
// scopes (Redis), the driver and the clients were seen to hold.
type tenantWatcher struct {
	stop, done chan struct{}
	mu         sync.Mutex
	found      map[string]bool
	checks     int
	mostPods   int64
	mostSess   int64
	mostDriver int
	mostClient int
	// driverOver is how long the driver was seen with more live pods than max_pods.
	driverOver time.Duration
}

func (r *rig) watchTenant() *tenantWatcher {
	w := &tenantWatcher{stop: make(chan struct{}), done: make(chan struct{}), found: map[string]bool{}}
	go func() {
		defer close(w.done)
		last := time.Now()
		for {
			s, err := r.tenantSnap()
			driver, client := r.driverPods(), r.clientSessions()
			now := time.Now()
			w.mu.Lock()
			if driver > quotaMaxPods {
				w.driverOver += now.Sub(last)
			}
			last = now
			if err == nil {
				w.checks++
				w.mostPods, w.mostSess = max(w.mostPods, total(s.pods)), max(w.mostSess, total(s.sessions))
				for _, v := range s.violations() {
					w.found[v] = true
				}
			}
			w.mostDriver, w.mostClient = max(w.mostDriver, driver), max(w.mostClient, client)
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *tenantWatcher) end() []string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.found))
}

// routeQuota routes a session as a gateway does, through the replicas in turn from
// first: a transport error or a 5xx is tried again; it returns the first 200, or the
// 429 QUOTA_EXCEEDED (with the quota it names) unless untilServed, in which case a 429 is
// tried again too (a release the escrow gets back at the next balance pass).
func (r *rig) routeQuota(first int, scope, session string, untilServed bool, within time.Duration) (binding, string) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	var last answer
	for i := first; time.Now().Before(deadline); i++ {
		rep := r.replicas[i%len(r.replicas)]
		if !rep.alive() {
			continue
		}
		b, a := r.route(rep, scope, session, "")
		switch {
		case a.err == nil && a.status == http.StatusOK:
			return b, ""
		case a.err == nil && a.status == http.StatusTooManyRequests && a.code() == "QUOTA_EXCEEDED":
			var e struct {
				Error struct {
					Details struct {
						Quota string `json:"quota"`
					} `json:"details"`
				} `json:"error"`
			}
			if err := json.Unmarshal(a.body, &e); err != nil || e.Error.Details.Quota == "" {
				r.t.Errorf("route %s/%s: a refusal without details: %s", scope, session, a)
			}
			if !untilServed {
				return binding{}, e.Error.Details.Quota
			}
		case a.err == nil && a.status < 500:
			r.t.Fatalf("route %s/%s through %s: %s", scope, session, rep.name, a)
		}
		last = a
		time.Sleep(100 * time.Millisecond) // a gateway's pause between tries
	}
	r.t.Fatalf("route %s/%s not answered 200 or 429 within %v; last: %s", scope, session, within, last)
	return binding{}, ""
}

// end ends a session through a replica and takes it off the ledger.
func (r *rig) end(rep *faultReplica, scope, session string) {
	r.t.Helper()
	if a := r.call(rep, http.MethodDelete, "/v1/scopes/"+scope+"/sessions/"+session, ""); a.err != nil || a.status != http.StatusOK || !strings.Contains(string(a.body), `"released":true`) {
		r.t.Fatalf("end %s/%s: %s", scope, session, a)
	}
	r.mu.Lock()
	delete(r.ledger, scope+"/"+session)
	r.mu.Unlock()
}

// caseTenantFailover: a tenant's quotas (max_pods 3, max_sessions 6 over scopes qa and
// qb, pod_concurrency 2, pod_ttl_s 1) through a failover that lost writes. The
// tenant is filled to both quotas (refusals 429 QUOTA_EXCEEDED); with replication cut
// the primary alone sees qa's first pod's sessions end (the pod, idle past pod_ttl_s,
// purged and deleted) and qb granted a pod and two sessions in its place; then the
// replica is promoted, the primary killed, the replicas restarted on it, and a burst
// of routes beyond the quotas follows. At every snapshot and once settled, the tenant's scopes
// hold no more than its quotas and its escrow counts at least what they hold.
func caseTenantFailover(t *testing.T, res *caseResult) {
	const ttl = 15 * time.Second
	r := newRig(t, "--fake-deploy-delay", "300ms")
	replica := startRedisServer(t, freePort(t), "--replicaof", "127.0.0.1", strconv.Itoa(r.redis.port))
	if a := r.call(r.replicas[0], http.MethodPut, "/v1/tenants/"+quotaTenant, fmt.Sprintf(`{"max_pods":%d,"max_sessions":%d}`, quotaMaxPods, quotaMaxSessions)); a.status != http.StatusOK {
		t.Fatalf("put tenant: %s", a)
	}
	for _, scope := range quotaScopes {
		r.publish(scope, fmt.Sprintf(`{"tenant":%q,"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":8,"pod_concurrency":2,"session_ttl_s":%d,"pod_ttl_s":1}}`, quotaTenant, int(ttl.Seconds())))
	}
	k := redisstore.NewKeyspace(rigPrefix)
	await.True(t, 10*time.Second, "both scopes governed in pods and sessions", func() bool {
		for _, scope := range quotaScopes {
			q, err := r.redis.admin.HMGet(context.Background(), k.Scope(scope).Config, "q_pods", "q_sess").Result()
			if err != nil || q[0] == nil || q[1] == nil {
				return false
			}
		}
		return true
	})
	w, tw := r.watch(quotaScopes...), r.watchTenant()
	refused := map[string]int{}
	refuse := func(first int, scope, session string) {
		if b, quota := r.routeQuota(first, scope, session, false, 20*time.Second); quota == "" {
			t.Errorf("%s/%s served on %s beyond the tenant's quotas", scope, session, b.PodID)
		} else {
			refused[quota]++
		}
	}
	serve := func(first int, scope, session string) string {
		b, _ := r.routeQuota(first, scope, session, true, 20*time.Second)
		return b.PodID
	}
	// Up to the quotas: a1 a2 on A1, b1 b2 on B1, a3 a4 on A2; b3 wants a 4th pod, a5
	// a 7th session.
	a1 := serve(0, "qa", "a1")
	serve(1, "qa", "a2")
	serve(2, "qb", "b1")
	serve(0, "qb", "b2")
	serve(1, "qa", "a3")
	refuse(2, "qb", "b3")
	serve(0, "qa", "a4")
	refuse(1, "qa", "a5")
	refuse(2, "qb", "b5")

	// The primary alone: A1's sessions end (idle past pod_ttl_s, it is purged and
	// deleted), and qb is granted a pod and two sessions in its place.
	r.cutReplication(t, replica)
	r.end(r.replicas[0], "qa", "a1")
	r.end(r.replicas[1], "qa", "a2")
	await.True(t, 10*time.Second, "qa's first pod purged and deleted", func() bool {
		s, err := r.snap("qa")
		return err == nil && !slices.ContainsFunc(s.Pods, func(p redisstore.PodState) bool { return p.Pod.ID == a1 }) &&
			!slices.ContainsFunc(r.pods.Pods(), func(p warmpool.Pod) bool { return p.ID == a1 })
	})
	b2 := serve(2, "qb", "b3")
	if got := serve(0, "qb", "b4"); got != b2 {
		t.Fatalf("b4 on %s, want the free slot of %s", got, b2)
	}
	refuse(1, "qa", "a6")
	lostDriver := r.driverPods()

	promoted := r.promote(t, replica)
	r.restartReplicas()
	// The new primary still has A1 and its sessions; once the rebuild has purged it (the
	// driver deleted it) the pool is what the driver holds. Then beyond the quotas
	// again: 4 routes in each scope at once.
	r.waitSnap("qa", "the rebuild purged qa's pod that the primary alone deleted", 20*time.Second, func(s redisstore.Snapshot) bool {
		return !slices.ContainsFunc(s.Pods, func(p redisstore.PodState) bool { return p.Pod.ID == a1 })
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	served := map[string]string{}
	for i := range 8 {
		scope := quotaScopes[i%2]
		session := fmt.Sprintf("c%d", i)
		wg.Go(func() {
			b, quota := r.routeQuota(i, scope, session, false, 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if quota != "" {
				refused[quota]++
			} else {
				served[scope+"/"+session] = b.PodID
			}
		})
	}
	wg.Wait()
	recovered := time.Since(promoted)
	detected := 0
	for _, rep := range r.replicas {
		detected += logCount(rep, "another replication history")
	}
	if detected == 0 {
		t.Errorf("no replica reported the failover")
	}
	// The held slots of the rebuilt pods expire at session_ttl_s; the lost sessions with
	// them.
	for _, scope := range quotaScopes {
		r.waitSnap(scope, scope+"'s held slots expire", 3*ttl, noAdoptedHolds)
	}
	tenantSeen := tw.end()
	finish(r, res, w, promoted, 30*time.Second, quotaScopes...)
	res.Violations = append(res.Violations, tenantSeen...)
	res.Checks += tw.checks
	s, err := r.tenantSnap()
	if err != nil {
		t.Fatal(err)
	}
	res.Checks++
	res.Violations = append(res.Violations, s.violations()...)
	settledDriver := r.driverPods()
	if settledDriver > quotaMaxPods {
		res.Violations = append(res.Violations, fmt.Sprintf("over-admission: the driver keeps %d pods of the tenant's scopes once settled > max_pods %d", settledDriver, quotaMaxPods))
	}
	over := 0
	for _, v := range res.Violations {
		if strings.HasPrefix(v, "over-admission") {
			over++
		}
	}
	res.Notes = fmt.Sprintf("%d over-admissions; refusals %v; the burst after the failover served %d of 8; most held in Redis %d pods, %d sessions (max_pods %d, max_sessions %d); most live pods in the driver %d (%d at the promotion; over max_pods for %v), most sessions clients held %d; failover reported %d time(s), the burst answered %v after the promotion",
		over, refused, len(served), tw.mostPods, tw.mostSess, quotaMaxPods, quotaMaxSessions, tw.mostDriver, lostDriver, tw.driverOver.Round(100*time.Millisecond), tw.mostClient, detected, recovered.Round(time.Millisecond))
	t.Log(res.Notes)
}
