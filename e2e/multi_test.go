//go:build e2e_multi

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/testpg"
	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// The multi-replica e2e: a real redis-server, three `warmpool serve` processes with the
// local driver (one state directory, one config store) and haproxy in front as the
// Service load balancer, all on loopback. The config store is a fresh schema on the
// PostgreSQL server of WARMPOOL_TEST_POSTGRES (make e2e starts one), else a SQLite file
// the replicas share. With REDIS_CLUSTER_ADDRS set, the replicas
// use that Redis Cluster instead, and the Redis restart scenario is skipped (a cluster
// loses its slot map with its data).

type cluster struct {
	t        *testing.T
	bin, dir string
	prefix   string // --prefix of every replica: the cluster's own keys
	redis    *redisServer
	redisURL string
	store    string // --store of every replica
	replicas []*replica
	lb       string
}

type replica struct {
	name, addr string
	proc       *proc
}

// clusters counts the clusters newCluster started (the tests that start them run one at
// a time).
var clusters int

func newCluster(t *testing.T) *cluster {
	t.Helper()
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Fatal("haproxy is missing (Debian: apt-get install haproxy)")
	}
	// Each cluster has keys of its own: a Redis Cluster is one for the whole test
	// binary, and the pods another run of the test left in it (-count) would be ghosts
	// here, for this cluster's state directory never had them.
	clusters++
	c := &cluster{t: t, bin: warmpoolBin(t), dir: t.TempDir(), prefix: fmt.Sprintf("wp:e2e:%d-%d:", os.Getpid(), clusters)}
	if os.Getenv(testpg.EnvDSN) != "" {
		c.store = testpg.DSN(t)
		t.Logf("config store: PostgreSQL (%s)", testpg.EnvDSN)
	} else {
		c.store = filepath.Join(c.dir, "config.db")
		t.Logf("config store: a shared SQLite file (%s is not set)", testpg.EnvDSN)
	}
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		testredis.EnsureACLUser(t)
		c.redisURL = testredis.ClusterUserURL()
	} else {
		c.redis = startRedisServer(t, freePort(t))
		c.redisURL = c.redis.URL()
	}
	for i := 1; i <= 3; i++ {
		r := &replica{name: fmt.Sprintf("r%d", i), addr: freeAddr(t)}
		c.replicas = append(c.replicas, r)
		c.start(t, r)
	}
	c.lb = c.startHAProxy()
	return c
}

// start starts (or restarts) a replica; its process lives as long as the whole test.
func (c *cluster) start(t *testing.T, r *replica) {
	t.Helper()
	r.proc = startServe(c.t, c.bin, append([]string{"serve", "--listen", r.addr, "--instance-id", r.name}, c.serveArgs()...)...)
	r.proc.waitReady(t, "http://"+r.addr, 30*time.Second)
}

// serveArgs are the serve flags of every replica but its address and name. The orphan
// grace is short, so that a killed replica's half-made pods are gone from the driver
// by the time the test audits (audit). So is the job lease: a replica killed while it
// runs a sweep job (its shard's due sweep, which drops the dead leader's lease) blocks
// that job for up to a job lease, and the kill test's 15 s is a deploy lease, a job
// lease and a few sweep ticks.
func (c *cluster) serveArgs() []string {
	return []string{"--redis", c.redisURL, "--store", c.store, "--driver", "local",
		"--local-state-dir", filepath.Join(c.dir, "pods"), "--prefix", c.prefix,
		"--sweep-interval", "500ms", "--deploy-lease", "3s", "--orphan-grace", "3s", "--job-lease", "5s"}
}

// audit runs a full pass on one more replica (auditClean) and fails the test when it
// had anything to fix.
func (c *cluster) audit(t *testing.T) {
	t.Helper()
	auditClean(t, c.bin, c.serveArgs()...)
}

// stop sends SIGTERM and waits for a clean exit.
func (c *cluster) stop(t *testing.T, r *replica) {
	t.Helper()
	if err := r.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.proc.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30s after SIGTERM", r.name)
	}
	if code := r.proc.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM; stderr:\n%s", r.name, code, r.proc.stderr.String())
	}
}

func (c *cluster) startHAProxy() string {
	c.t.Helper()
	lb := freeAddr(c.t)
	var servers strings.Builder
	for _, r := range c.replicas {
		fmt.Fprintf(&servers, "  server %s %s check\n", r.name, r.addr)
	}
	cfg := fmt.Sprintf(`global
  maxconn 2000
defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  retries 3
  option redispatch
frontend fe
  bind %s
  default_backend be
backend be
  balance roundrobin
  option httpchk GET /readyz
  default-server inter 300ms fall 1 rise 1
%s`, lb, servers.String())
	path := filepath.Join(c.dir, "haproxy.cfg")
	writeFile(c.t, path, cfg)
	cmd := exec.Command("haproxy", "-f", path, "-db")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	base := "http://" + lb
	await.True(c.t, 10*time.Second, "haproxy serves", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

type multiPool struct {
	Pods []struct {
		PodID    string `json:"pod_id"`
		State    string `json:"state"`
		Sessions int    `json:"sessions"`
	} `json:"pods"`
	Placeholders int `json:"placeholders"`
	Followers    int `json:"followers"`
	Waiters      int `json:"waiters"`
}

type routeAnswer struct {
	PodID  string `json:"pod_id"`
	SSEURL string `json:"pod_sse_url"`
	New    bool   `json:"new"`
}

// try sends one request and reports its status and body; err is a transport error.
func try(method, url, body string) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw, err
}

func putScope(t *testing.T, base, scope, doc string) {
	t.Helper()
	if st, _, body, err := try(http.MethodPut, base+"/v1/scopes/"+scope+"/config", doc); err != nil || st != http.StatusOK {
		t.Fatalf("put %s: %d %s %v", scope, st, body, err)
	}
}

func route(t *testing.T, base, scope, session string) routeAnswer {
	t.Helper()
	var a routeAnswer
	if st := call(t, http.MethodPost, base+"/v1/scopes/"+scope+"/sessions", `{"session_id":"`+session+`"}`, &a); st != http.StatusOK {
		t.Fatalf("route %s/%s: %d", scope, session, st)
	}
	return a
}

func pool(t *testing.T, base, scope string) (multiPool, int) {
	t.Helper()
	var p multiPool
	st, _, body, err := try(http.MethodGet, base+"/v1/scopes/"+scope+"/pool", "")
	if err != nil || st != http.StatusOK {
		return p, st
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	return p, st
}

func TestMultiReplica(t *testing.T) {
	c := newCluster(t)
	putScope(t, c.lb, "multi", `{"pool":{"max_concurrency":8,"pod_concurrency":2,"pod_ttl_s":600}}`)

	t.Run("affinity through the load balancer", func(t *testing.T) {
		first := route(t, c.lb, "multi", "s1")
		for i := 0; i < 6; i++ {
			if a := route(t, c.lb, "multi", "s1"); a.PodID != first.PodID || a.New {
				t.Fatalf("route %d of s1 went to %+v, first to %s", i, a, first.PodID)
			}
		}
		for _, r := range c.replicas {
			var b routeAnswer
			if st := call(t, http.MethodGet, "http://"+r.addr+"/v1/scopes/multi/sessions/s1", "", &b); st != http.StatusOK || b.PodID != first.PodID {
				t.Fatalf("%s sees s1 on %q (%d), want %s", r.name, b.PodID, st, first.PodID)
			}
			var touched struct{ Touched bool }
			if call(t, http.MethodPost, "http://"+r.addr+"/v1/scopes/multi/sessions/s1/touch", "", &touched); !touched.Touched {
				t.Fatalf("touch of s1 through %s: false", r.name)
			}
		}
	})

	t.Run("kill -9 of a replica mid-deploy leaves nothing behind", func(t *testing.T) {
		putScope(t, c.lb, "slow", `{"deploy":{"args":["--start-delay","2s"]},"pool":{"max_concurrency":4,"pod_concurrency":2}}`)
		victim := c.replicas[0]
		go func() {
			// The replica is killed under this route: it gets no answer to check.
			_, _, _, _ = try(http.MethodPost, "http://"+victim.addr+"/v1/scopes/slow/sessions", `{"session_id":"doomed"}`)
		}()
		other := "http://" + c.replicas[1].addr
		await.True(t, 10*time.Second, "the deploy is in flight", func() bool {
			p, _ := pool(t, other, "slow")
			return p.Placeholders == 1
		})
		if err := victim.proc.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-victim.proc.done
		await.True(t, 15*time.Second, "the dead replica's lease expired and its half-made pod is gone", func() bool {
			p, st := pool(t, other, "slow")
			return st == http.StatusOK && p.Placeholders == 0 && p.Followers == 0 && len(p.Pods) == 0
		})
		if a := route(t, c.lb, "slow", "after"); a.PodID == "" {
			t.Fatal("slow scope does not serve after the crash")
		}
		c.start(t, victim)
		// The dead replica's half-made pod (its process died with it, its state file
		// stays) is deleted by the others' watch past the orphan grace, not by a full
		// pass: the pass that runs then finds nothing to fix.
		await.True(t, 20*time.Second, "the dead replica's half-made pod deleted", func() bool {
			return c.podFiles(t, "slow") == 1 // the pod of "after"
		})
		c.audit(t)
	})

	t.Run("redis restart without persistence: the pool is rebuilt", func(t *testing.T) {
		if c.redis == nil {
			t.Skip("a Redis Cluster is not restarted here")
		}
		before, _ := pool(t, c.lb, "multi")
		if len(before.Pods) == 0 {
			t.Fatal("no pods before the restart")
		}
		c.redis.Kill()
		c.redis = startRedisServer(c.t, c.redis.port)
		await.True(t, 20*time.Second, "pods adopted back after the data loss", func() bool {
			p, st := pool(t, c.lb, "multi")
			return st == http.StatusOK && len(p.Pods) == len(before.Pods)
		})
		after, _ := pool(t, c.lb, "multi")
		ids := map[string]bool{}
		for _, p := range before.Pods {
			ids[p.PodID] = true
		}
		// The sessions they served were lost with the data and may still run: every
		// slot stays taken until session_ttl_s has passed, so a new session goes to a
		// new pod, not on top of them.
		for _, p := range after.Pods {
			if !ids[p.PodID] || p.State != "busy" || p.Sessions != 0 {
				t.Fatalf("after the rebuild: %+v, want the same pods, held with no session known (before %+v)", after.Pods, before.Pods)
			}
		}
		if a := route(t, c.lb, "multi", "s-after-loss"); ids[a.PodID] {
			t.Fatalf("route after the rebuild went to %s, a rebuilt pod whose old sessions may still run", a.PodID)
		}
	})

	t.Run("rolling restart under steady traffic", func(t *testing.T) {
		var ok, failed atomic.Int64
		var stats gatewayStats
		var failures sync.Map
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					sess := fmt.Sprintf("roll-%d-%d", w, i)
					for _, step := range []struct{ method, path, body string }{
						{http.MethodPost, "/v1/scopes/multi/sessions", `{"session_id":"` + sess + `"}`},
						{http.MethodPost, "/v1/scopes/multi/sessions/" + sess + "/touch", ""},
						{http.MethodDelete, "/v1/scopes/multi/sessions/" + sess, ""},
					} {
						if gatewayCall(step.method, c.lb+step.path, step.body, &stats) {
							ok.Add(1)
						} else {
							failed.Add(1)
							failures.Store(step.method+" "+step.path, true)
						}
					}
				}
			}()
		}
		for _, r := range c.replicas {
			c.stop(t, r)
			c.start(t, r)
			// Let traffic run on the restarted replica set before the next restart.
			target := ok.Load() + 100
			await.True(t, 30*time.Second, "traffic flows after the restart", func() bool { return ok.Load() >= target || failed.Load() > 0 })
		}
		close(stop)
		wg.Wait()
		t.Logf("rolling restart: %d calls ok, %d failed after retries; %d calls needed a retry (first attempt: %d transport errors, %d 503/504 with Retry-After), %d retries in all",
			ok.Load(), failed.Load(), stats.retriedCalls.Load(), stats.transport.Load(), stats.unavailable.Load(), stats.retries.Load())
		if failed.Load() != 0 {
			var which []string
			failures.Range(func(k, _ any) bool { which = append(which, k.(string)); return true })
			t.Fatalf("%d calls failed even after the gateway's retries: %v", failed.Load(), which)
		}
		if ok.Load() < 30 {
			t.Fatalf("only %d calls made it: the traffic did not run", ok.Load())
		}
		// The drain takes a replica out of the balancer before its listener closes:
		// no call even meets a closed connection.
		if n := stats.transport.Load(); n != 0 {
			t.Fatalf("%d calls met a transport error on their first attempt: the drain did not take the stopping replica out first", n)
		}
	})

	t.Run("a full pass after it all has nothing to fix", func(t *testing.T) { c.audit(t) })
}

// podFiles counts the local driver's pod state files of a scope.
func (c *cluster) podFiles(t *testing.T, scope string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(c.dir, "pods", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		var rec struct {
			Pod struct {
				ScopeID string `json:"scope_id"`
			} `json:"pod"`
		}
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &rec) == nil && rec.Pod.ScopeID == scope {
			n++
		}
	}
	return n
}

// gatewayStats counts what gatewayCall met.
type gatewayStats struct {
	retries      atomic.Int64 // attempts that failed and were made again
	retriedCalls atomic.Int64 // calls whose first attempt failed
	transport    atomic.Int64 // first attempts that met a transport error
	unavailable  atomic.Int64 // first attempts answered 503/504 with Retry-After
}

// gatewayCall is what a gateway does: a call that fails in a way the contract marks
// retryable (a transport error at the load balancer, or a 503/504 with Retry-After) is
// retried a few times. It reports whether the call finally succeeded; a 4xx or a 5xx
// without Retry-After is a failure at once.
func gatewayCall(method, url, body string, stats *gatewayStats) bool {
	for attempt := 0; attempt < 20; attempt++ {
		st, hdr, _, err := try(method, url, body)
		switch {
		case err == nil && st < 300:
			return true
		case err == nil && (st == http.StatusServiceUnavailable || st == http.StatusGatewayTimeout) && hdr.Get("Retry-After") != "":
			if attempt == 0 {
				stats.unavailable.Add(1)
			}
		case err != nil:
			if attempt == 0 {
				stats.transport.Add(1)
			}
		default:
			return false
		}
		if attempt == 0 {
			stats.retriedCalls.Add(1)
		}
		stats.retries.Add(1)
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
