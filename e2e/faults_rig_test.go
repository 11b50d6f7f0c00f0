//go:build faults

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/redisstore"
)

// The rig of the fault matrix: real redis-server processes and three `warmpool serve`
// processes (the built binary, the fake driver over one shared state directory, one
// SQLite config store), all on loopback. The replicas connect to Redis as the ACL
// user the README documents, allowed only the commands warmpool needs; the rig's own
// connection (the default user) injects faults and reads the snapshots the SPEC §6
// invariants are checked on.

const (
	rigPrefix = "wp:"
	// Settings of every replica: short leases and graces, so that a case's leftovers
	// expire within seconds.
	rigLease       = 2 * time.Second
	rigClaimTTL    = 3 * time.Second
	rigJobLease    = 2 * time.Second
	rigOrphanGrace = 3 * time.Second
	rigSweep       = 250 * time.Millisecond
	// rigReconcile is the full pass, the one that records Redis's replication id (a
	// failover is found by it) and purges ghosts; a crashed replica's half-made pods
	// go on the driver's pod events (caseKillMidBurstNoPass runs with an hour).
	rigReconcile = time.Second
	// callTimeout bounds every HTTP call of the rig; no answer within it is a hang.
	callTimeout = 20 * time.Second
)

// faultReplica is one `warmpool serve` process.
type faultReplica struct {
	name, addr string
	proc       *proc
}

func (r *faultReplica) base() string { return "http://" + r.addr }

func (r *faultReplica) alive() bool {
	select {
	case <-r.proc.done:
		return false
	default:
		return true
	}
}

// rig is one case's world.
type rig struct {
	t        *testing.T
	bin, dir string
	podDir   string
	store    string
	redis    *redisServer
	replicas []*faultReplica
	lstore   *redisstore.Store
	pods     *fake.Driver
	extra    []string // serve flags of every replica besides the rig's

	mu     sync.Mutex
	scopes map[string]scopeState
	ledger map[string]held // scope/session -> what its client was told
	ops    atomic.Int64
}

// held is a binding as its client knows it: the pod, and when the session expires if
// the client does not touch it (session_ttl_s from when the route was sent, no later
// than Redis's own expiry of it).
type held struct {
	pod   string
	until time.Time
}

type scopeState struct {
	cfg      warmpool.ScopeConfig
	versions []string
}

// newRig starts a redis-server and three replicas; extra are serve flags for all.
func newRig(t *testing.T, extra ...string) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{t: t, bin: warmpoolBin(t), dir: dir, podDir: filepath.Join(dir, "pods"),
		store: filepath.Join(dir, "config.db"), extra: extra,
		scopes: map[string]scopeState{}, ledger: map[string]held{}}
	r.redis = startRedisServer(t, freePort(t))
	r.useRedis(r.redis)
	pods, err := fake.NewShared(r.podDir)
	if err != nil {
		t.Fatal(err)
	}
	r.pods = pods
	for i := range 3 {
		r.replicas = append(r.replicas, &faultReplica{name: fmt.Sprintf("r%d", i), addr: freeAddr(t)})
	}
	var wg sync.WaitGroup
	for _, rep := range r.replicas {
		rep.proc = r.startProc(rep)
		wg.Add(1)
		go func() { defer wg.Done(); r.waitUp(rep) }()
	}
	wg.Wait()
	for _, rep := range r.replicas {
		if !rep.alive() {
			t.Fatalf("%s exited at start:\n%s", rep.name, rep.proc.stderr.String())
		}
	}
	return r
}

// useRedis points the rig's snapshots at a Redis server.
func (r *rig) useRedis(s *redisServer) {
	r.lstore = redisstore.NewStore(s.admin, rigPrefix)
}

// promote makes replica the primary (REPLICAOF NO ONE), kills the old one and points
// the rig at the new one; it returns when the promotion was answered.
func (r *rig) promote(t *testing.T, replica *redisServer) time.Time {
	t.Helper()
	if err := replica.admin.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	r.redis.Kill()
	r.redis = replica
	r.useRedis(replica)
	return promoted
}

func (r *rig) startProc(rep *faultReplica) *proc {
	args := append([]string{"serve", "--listen", rep.addr, "--instance-id", rep.name}, r.serveArgs()...)
	return startProc(r.t, r.bin, cleanEnv(), args...)
}

// serveArgs are the serve flags of every replica but its address and name.
func (r *rig) serveArgs() []string {
	args := []string{"--redis", r.redis.URL(), "--store", r.store,
		"--driver", "fake", "--fake-state-dir", r.podDir, "--prefix", rigPrefix,
		"--sweep-interval", rigSweep.String(), "--reconcile-interval", rigReconcile.String(), "--reconcile-duty", "1", "--deploy-lease", rigLease.String(), "--claim-ttl", rigClaimTTL.String(),
		"--job-lease", rigJobLease.String(), "--orphan-grace", rigOrphanGrace.String(), "--ghost-grace", rigOrphanGrace.String(),
		"--drain-delay", "0s", "--log-format", "text"}
	return append(args, r.extra...)
}

// audit runs a full pass on one more replica of the rig (auditClean) and fails the
// test when it had anything to fix.
func (r *rig) audit() {
	r.t.Helper()
	auditClean(r.t, r.bin, r.serveArgs()...)
}

// waitUp waits until a replica answers /readyz; it does not fail the test, newRig
// checks that the process lives.
func (r *rig) waitUp(rep *faultReplica) {
	c := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && rep.alive() {
		if resp, err := c.Get(rep.base() + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restartReplicas kills every replica with SIGKILL and starts it again on the rig's
// Redis (after a promotion: the new primary), all at once; it returns when each
// answers /readyz or has exited.
func (r *rig) restartReplicas() {
	r.t.Helper()
	var wg sync.WaitGroup
	for _, rep := range r.replicas {
		r.kill9(rep)
		wg.Go(func() { rep.proc = r.startProc(rep); r.waitUp(rep) })
	}
	wg.Wait()
}

// kill9 kills a replica with SIGKILL and waits for it to be gone.
func (r *rig) kill9(rep *faultReplica) {
	r.t.Helper()
	if err := rep.proc.cmd.Process.Kill(); err != nil {
		r.t.Fatal(err)
	}
	<-rep.proc.done
}

// scope publishes a scope through replica 0; pool and deploy are JSON objects' fields.
func (r *rig) scope(id, pool string, readyTimeoutS int) {
	r.t.Helper()
	r.publish(id, fmt.Sprintf(`{"deploy":{"ready_timeout_s":%d},"pool":{%s}}`, readyTimeoutS, pool))
}

// publish puts a scope's config document through replica 0 and keeps the config as
// stored, which the invariants are checked against.
func (r *rig) publish(id, doc string) {
	r.t.Helper()
	if a := r.call(r.replicas[0], http.MethodPut, "/v1/scopes/"+id+"/config", doc); a.status != http.StatusOK {
		r.t.Fatalf("put %s: %s", id, a)
	}
	// The config as stored, defaults filled: what the invariants are checked against.
	var out warmpool.StoredConfig
	if a := r.call(r.replicas[0], http.MethodGet, "/v1/scopes/"+id+"/config", ""); a.status != http.StatusOK {
		r.t.Fatalf("get %s: %s", id, a)
	} else if err := json.Unmarshal(a.body, &out); err != nil {
		r.t.Fatal(err)
	}
	cfg := out.Config
	r.mu.Lock()
	st := r.scopes[id]
	st.cfg, st.versions = cfg, append(st.versions, out.DeployVer)
	r.scopes[id] = st
	r.mu.Unlock()
}

// answer is the outcome of one HTTP call.
type answer struct {
	status int
	body   []byte
	err    error
	took   time.Duration
}

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("transport error after %v: %v", a.took.Round(time.Millisecond), a.err)
	}
	return fmt.Sprintf("%d %s (%v)", a.status, strings.TrimSpace(string(a.body)), a.took.Round(time.Millisecond))
}

// code is the error code of an error answer.
func (a answer) code() string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Code
}

// call sends one request to a replica, counted as an operation.
func (r *rig) call(rep *faultReplica, method, path, body string) answer {
	r.ops.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, rep.base()+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: raw, err: err, took: time.Since(start)}
}

// binding is a route's answer.
type binding struct {
	PodID         string `json:"pod_id"`
	New           bool   `json:"new"`
	SessionTicket string `json:"session_ticket"`
}

// route routes a session through a replica; a 200 is written in the ledger.
func (r *rig) route(rep *faultReplica, scope, session, requestID string) (binding, answer) {
	body := `{"session_id":"` + session + `"}`
	if requestID != "" {
		body = `{"session_id":"` + session + `","request_id":"` + requestID + `"}`
	}
	sent := time.Now()
	a := r.call(rep, http.MethodPost, "/v1/scopes/"+scope+"/sessions", body)
	var b binding
	if a.err == nil && a.status == http.StatusOK {
		if err := json.Unmarshal(a.body, &b); err != nil || b.PodID == "" {
			r.t.Errorf("route %s: %s", session, a)
		}
		r.mu.Lock()
		ttl := time.Duration(r.scopes[scope].cfg.Pool.SessionTTLS) * time.Second
		r.ledger[scope+"/"+session] = held{pod: b.PodID, until: sent.Add(ttl)}
		r.mu.Unlock()
	}
	return b, a
}

// routeRetry is a gateway's route: retried on any live replica, from the one after
// first, while the answer is a transport error or a 5xx, until within. It fails the
// test when no try succeeded.
func (r *rig) routeRetry(first int, scope, session string, within time.Duration) binding {
	r.t.Helper()
	deadline := time.Now().Add(within)
	var last answer
	for i := first; time.Now().Before(deadline); i++ {
		rep := r.replicas[i%len(r.replicas)]
		if !rep.alive() {
			continue
		}
		b, a := r.route(rep, scope, session, "")
		if a.err == nil && a.status == http.StatusOK {
			return b
		}
		if a.err == nil && a.status < 500 {
			r.t.Fatalf("route %s/%s through %s: %s", scope, session, rep.name, a)
		}
		last = a
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatalf("route %s/%s not served within %v; last: %s", scope, session, within, last)
	return binding{}
}

// snap reads a consistent snapshot of a scope within a short bound.
func (r *rig) snap(scope string) (redisstore.Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return r.lstore.Snapshot(ctx, scope)
}

// violations lists what a snapshot breaks: the SPEC §6 invariants
// (internal/testing/invariant), plus the client-side view: no pod serves more sessions than
// pod_concurrency among those the rig's clients were told are bound to it and that
// have neither ended nor expired (a binding Redis lost still runs on its pod).
func (r *rig) violations(scope string, s redisstore.Snapshot, settled bool) []string {
	now := time.Now()
	r.mu.Lock()
	st := r.scopes[scope]
	perPod := map[string]int{}
	for k, h := range r.ledger {
		if strings.HasPrefix(k, scope+"/") && h.until.After(now) {
			perPod[h.pod]++
		}
	}
	r.mu.Unlock()
	out := invariant.Violations(s, st.cfg, slices.Clone(st.versions), settled)
	for pod, n := range perPod {
		if n > st.cfg.Pool.PodConcurrency {
			out = append(out, fmt.Sprintf("over-admission: clients hold %d sessions on pod %s > pod_concurrency %d", n, pod, st.cfg.Pool.PodConcurrency))
		}
	}
	return out
}

// watcher checks the invariants of scopes on snapshots over and over while a fault
// runs; snapshots that fail (Redis away) are counted, not judged.
type watcher struct {
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	found  map[string]bool
	checks int
	failed int
}

func (r *rig) watch(scopes ...string) *watcher {
	w := &watcher{stop: make(chan struct{}), done: make(chan struct{}), found: map[string]bool{}}
	go func() {
		defer close(w.done)
		for {
			for _, scope := range scopes {
				s, err := r.snap(scope)
				w.mu.Lock()
				if err != nil {
					w.failed++
				} else {
					w.checks++
					for _, v := range r.violations(scope, s, false) {
						w.found[v] = true
					}
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *watcher) end() (violations []string, checks int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for v := range w.found {
		violations = append(violations, v)
	}
	slices.Sort(violations)
	return violations, w.checks
}

// settle waits until a scope is settled: the SPEC §6 invariants hold with nothing in
// flight and no leftover, the driver's pods of the scope are exactly Redis's (ready,
// none half-made: invariant 9) and within max_pods. It returns how many snapshots it
// checked and the violations of the last one when the scope did not settle within.
func (r *rig) settle(scope string, within time.Duration) (checks int, violations []string) {
	deadline := time.Now().Add(within)
	for {
		s, err := r.snap(scope)
		if err == nil {
			checks++
			violations = r.violations(scope, s, true)
			violations = append(violations, r.driverViolations(scope, s)...)
			if len(violations) == 0 {
				return checks, nil
			}
		} else {
			violations = []string{"snapshot: " + err.Error()}
		}
		if time.Now().After(deadline) {
			return checks, violations
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// driverViolations compares the driver's pods of a scope with Redis's.
func (r *rig) driverViolations(scope string, s redisstore.Snapshot) []string {
	var out []string
	r.mu.Lock()
	maxPods := r.scopes[scope].cfg.Pool.MaxPods()
	r.mu.Unlock()
	inRedis := map[string]bool{}
	for _, p := range s.Pods {
		inRedis[p.Pod.ID] = true
	}
	n := 0
	for _, p := range r.pods.Pods() {
		if p.ScopeID != scope {
			continue
		}
		n++
		switch {
		case !p.Ready || p.Dead != "":
			out = append(out, fmt.Sprintf("inv9: driver pod %s left half-made (ready %v, dead %q)", p.ID, p.Ready, p.Dead))
		case !inRedis[p.ID]:
			out = append(out, fmt.Sprintf("inv9: driver pod %s unknown to Redis", p.ID))
		}
		delete(inRedis, p.ID)
	}
	for id := range inRedis {
		out = append(out, fmt.Sprintf("inv9: Redis pod %s missing from the driver", id))
	}
	if n > maxPods {
		out = append(out, fmt.Sprintf("inv2: the driver keeps %d pods > max_pods %d", n, maxPods))
	}
	return out
}

// waitSnap waits until a snapshot of scope satisfies cond.
func (r *rig) waitSnap(scope, what string, within time.Duration, cond func(redisstore.Snapshot) bool) {
	r.t.Helper()
	await.True(r.t, within, what, func() bool {
		s, err := r.snap(scope)
		return err == nil && cond(s)
	})
}

// logCount counts the lines of a replica's stderr that contain substr.
func logCount(rep *faultReplica, substr string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(rep.proc.stderr.String()))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			n++
		}
	}
	return n
}
