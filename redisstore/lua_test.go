package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/lua"
	"github.com/warmpool/warmpool/redisstore"
)

func TestEveryFileHasAScript(t *testing.T) {
	files, err := fs.Glob(lua.Files, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if redisstore.Scripts[f] == nil {
			t.Errorf("%s has no script variable in lua.go (the includes are in lib/)", f)
		}
	}
	if len(files) != len(redisstore.Scripts) {
		t.Errorf("%d .lua files but %d scripts", len(files), len(redisstore.Scripts))
	}
}

func TestEveryFileHasAHeader(t *testing.T) {
	for name := range redisstore.Scripts {
		b, err := lua.Files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if !strings.HasPrefix(src, "-- "+name+": ") {
			t.Errorf("%s does not open with '-- %s: <what it does>'", name, name)
		}
		for _, want := range []string{"-- KEYS:", "-- ARGV[1]", "-- Returns"} {
			if want == "-- ARGV[1]" && strings.Contains(src, "\n-- ARGV none\n") {
				continue // a script without arguments says so
			}
			if !strings.Contains(src, want) {
				t.Errorf("%s header lacks %q", name, want)
			}
		}
		if strings.Contains(src, "'TIME'") {
			t.Errorf("%s reads the server clock; time comes from ARGV", name)
		}
	}
}

func TestScriptsLoadOnRealRedis(t *testing.T) {
	testredis.NeedReal(t)
	r := testredis.New(t)
	for name, sc := range redisstore.Scripts {
		if err := sc.Load(context.Background(), r.Client).Err(); err != nil {
			t.Errorf("%s does not load on redis-server: %v", name, err)
		}
	}
}

// env is a store with one published, bootstrapped scope.
type env struct {
	t       *testing.T
	r       *testredis.Redis
	store   *redisstore.Store
	scope   string
	now     time.Time
	version int64 // of the last config published
	// sessions counts the sessions env.drive started, for their ids.
	sessions int
}

func newEnv(t *testing.T, mutate func(*warmpool.ScopeConfig)) *env {
	t.Helper()
	r := testredis.New(t)
	e := &env{t: t, r: r, store: redisstore.NewStore(r.Client, r.Prefix), scope: "s1", now: time.UnixMilli(1_700_000_000_000)}
	e.publish(mutate)
	if _, err := e.store.Bootstrap(context.Background(), "epoch-1"); err != nil {
		t.Fatal(err)
	}
	return e
}

// awaitExpiry waits until key, set with a TTL of ttl, has expired: a real server's
// time moves by itself, miniredis's only when told.
func (e *env) awaitExpiry(tb testing.TB, key string, ttl time.Duration) {
	tb.Helper()
	if e.r.Mini != nil {
		e.r.Mini.FastForward(ttl)
	}
	await.True(tb, 5*time.Second, key+" expires", func() bool {
		n, err := e.r.Client.Exists(context.Background(), key).Result()
		return err == nil && n == 0
	})
}

// publish publishes the scope's next version: the test config, changed by mutate.
func (e *env) publish(mutate func(*warmpool.ScopeConfig)) {
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = 4, 2
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Normalize(); err != nil {
		e.t.Fatal(err)
	}
	e.version++
	if err := e.store.ScopePublish(context.Background(), redisstore.ScopeRecord{ScopeID: e.scope, Config: cfg, Version: e.version, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) acquire(claim string) redisstore.AcquireResult {
	e.t.Helper()
	res, err := e.store.PodAcquire(context.Background(), e.scope, redisstore.AcquireArgs{
		Now: e.now, Claim: claim, ClaimDeadline: e.now.Add(30 * time.Second),
		LeaseDeadline: e.now.Add(30 * time.Second), RoomMargin: 10 * time.Second,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func (e *env) register(res redisstore.AcquireResult, leaderClaim string) (warmpool.Pod, int, error) {
	pod := warmpool.Pod{ID: warmpool.PodName(e.scope, res.Fence), ScopeID: e.scope, DeployVer: res.Spec.DeployVer(), Fence: res.Fence, SSEURL: "http://x/sse"}
	n, err := e.store.PodRegister(context.Background(), e.scope, res.Deploy, pod, leaderClaim, e.now, e.now.Add(30*time.Second))
	return pod, n, err
}

func (e *env) snap() redisstore.Snapshot {
	e.t.Helper()
	return e.read(e.store.Snapshot)
}

func (e *env) poolSnap() redisstore.Snapshot {
	e.t.Helper()
	return e.read(e.store.PoolSnapshot)
}

// read takes a snapshot of the scope with one of the store's readers.
func (e *env) read(reader func(context.Context, string) (redisstore.Snapshot, error)) redisstore.Snapshot {
	e.t.Helper()
	s, err := reader(context.Background(), e.scope)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func TestAcquireLeadsThenFollowsThenLeadsAgain(t *testing.T) {
	e := newEnv(t, nil) // max_pods 2, pc 2
	if r := e.acquire("c1"); r.Kind != redisstore.AcquireDeploy || r.Fence != 1 {
		t.Fatalf("first acquire = %+v, want deploy fence 1", r)
	}
	r2 := e.acquire("c2")
	if r2.Kind != redisstore.AcquireFollower || r2.Deploy != "1" || r2.Room != "1|c2" {
		t.Fatalf("second acquire = %+v, want follower of deploy 1", r2)
	}
	if got := r2.RoomDeadline.Sub(e.now); got != 310*time.Second {
		t.Fatalf("room deadline = now+%s, want ready timeout 300s + margin 10s", got)
	}
	if r := e.acquire("c3"); r.Kind != redisstore.AcquireDeploy || r.Fence != 2 {
		t.Fatalf("third acquire = %+v, want a second deploy (room of the first is full)", r)
	}
	e.acquire("c4")
	if r := e.acquire("c5"); r.Kind != redisstore.AcquireMaxReached || r.Pods != 0 || r.Deploys != 2 {
		t.Fatalf("fifth acquire = %+v, want max_reached with 2 deploys", r)
	}
}

func TestRegisterHandsSlotsToFollowersAndLeader(t *testing.T) {
	e := newEnv(t, nil)
	lead := e.acquire("leader")
	e.acquire("follower")
	pod, n, err := e.register(lead, "leader")
	if err != nil || n != 2 {
		t.Fatalf("register = %d, %v; want 2 slots", n, err)
	}
	s := e.snap()
	if len(s.Pods) != 1 || s.Pods[0].Slots != 2 || s.Pods[0].Idle {
		t.Fatalf("pods = %+v, want one busy pod with 2 slots", s.Pods)
	}
	if s.ClaimPod["follower"] != pod.ID || s.ClaimPod["leader"] != pod.ID {
		t.Fatalf("claims = %v, want both on %s", s.ClaimPod, pod.ID)
	}
	if len(s.Deploys) != 0 || len(s.Followers) != 0 {
		t.Fatalf("deploys %v followers %v left behind", s.Deploys, s.Followers)
	}
	st, err := e.store.FollowerWait(context.Background(), e.scope, lead.Deploy, lead.Deploy+"|follower", "follower", e.now)
	if err != nil || st.State != redisstore.FollowerReady || st.Pod.ID != pod.ID || st.Pod.SSEURL != "http://x/sse" {
		t.Fatalf("follower state = %+v, %v", st, err)
	}
}

func TestRegisterIsFencedAfterTheLeaseExpired(t *testing.T) {
	e := newEnv(t, nil)
	lead := e.acquire("leader")
	e.now = e.now.Add(31 * time.Second)
	if _, _, err := e.register(lead, "leader"); !errors.Is(err, redisstore.ErrFenced) {
		t.Fatalf("register after lease expiry: err = %v, want ErrFenced", err)
	}
	if s := e.snap(); len(s.Pods) != 0 {
		t.Fatalf("a fenced register committed pods: %+v", s.Pods)
	}
	ok, err := e.store.DeployExtend(context.Background(), e.scope, lead.Deploy, e.now, e.now.Add(time.Minute))
	if err != nil || ok {
		t.Fatalf("extend of an expired lease = %v, %v; want false", ok, err)
	}
}

// A register tried again after a try whose answer never came (Redis ran it, the
// reply was lost) answers ok with the pod's slots and changes nothing, so its leader
// keeps the pod instead of deleting it (issue 20.7). Before, the second try was
// FENCED (the first had taken the lease out) and the committed pod was deleted.
func TestRegisterTriedAgainChangesNothing(t *testing.T) {
	e := newEnv(t, nil)
	lead := e.acquire("leader")
	if f := e.acquire("f1"); f.Kind != redisstore.AcquireFollower {
		t.Fatalf("second acquire = %+v, want a follower", f)
	}
	_, n, err := e.register(lead, "leader")
	if err != nil || n != 2 {
		t.Fatalf("register = %d, %v; want 2 slots", n, err)
	}
	before := e.snap()
	e.now = e.now.Add(time.Second)
	if _, again, err := e.register(lead, "leader"); err != nil || again != n {
		t.Fatalf("register tried again = %d, %v; want %d, nil", again, err, n)
	}
	if after := e.snap(); !reflect.DeepEqual(after, before) {
		t.Fatalf("register tried again changed the pool:\n%+v\nwas\n%+v", after, before)
	}
}

// A deploy aborted as lost sends its followers to try again; one aborted as failed
// fails them; each with the reason.
func TestAbortTellsFollowersLostFromFailed(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("lost=%v", lost), func(t *testing.T) {
			e := newEnv(t, nil)
			lead, f := e.acquire("leader"), e.acquire("f1")
			ctx := context.Background()
			if n, err := e.store.DeployAbort(ctx, e.scope, lead.Deploy, lead.Spec.DeployVer(), "why", lost, e.now, e.now.Add(time.Minute)); err != nil || n != 1 {
				t.Fatalf("abort = %d, %v; want 1 follower told", n, err)
			}
			want := redisstore.FollowerFailed
			if lost {
				want = redisstore.FollowerLost
			}
			st, err := e.store.FollowerWait(ctx, e.scope, lead.Deploy, f.Room, "f1", e.now)
			if err != nil || st.State != want || st.Reason != "why" {
				t.Fatalf("follower after the abort = %+v, %v; want %s, why", st, err, want)
			}
		})
	}
}

// A follower of a leader that died is told its deploy was lost, not failed: it may
// deploy in its place (issue 20.7).
func TestExpiredLeaseSendsItsFollowersBackAndFreesTheScope(t *testing.T) {
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.MaxConcurrency = 2 }) // max_pods 1
	lead := e.acquire("leader")
	f := e.acquire("f1")
	if r := e.acquire("c3"); r.Kind != redisstore.AcquireMaxReached {
		t.Fatalf("acquire with the only deploy's room full = %+v, want max_reached", r)
	}
	e.now = e.now.Add(31 * time.Second) // the leader crashed and stopped extending
	if r := e.acquire("c4"); r.Kind != redisstore.AcquireDeploy || r.Fence != 2 {
		t.Fatalf("acquire after the lease expired = %+v, want a new deploy", r)
	}
	st, err := e.store.FollowerWait(context.Background(), e.scope, lead.Deploy, f.Room, "f1", e.now)
	if err != nil || st.State != redisstore.FollowerLost || !strings.Contains(st.Reason, "leader is gone") {
		t.Fatalf("follower of the dead leader = %+v, %v; want lost, naming the leader", st, err)
	}
}

func TestWarmAcquireSkipsOtherVersions(t *testing.T) {
	e := newEnv(t, nil)
	lead := e.acquire("c1")
	pod, _, err := e.register(lead, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := e.snap(); !s.Pods[0].Idle {
		t.Fatal("a pod registered with no claim should be idle")
	}
	e.publish(func(c *warmpool.ScopeConfig) { c.Deploy.Image = "agent:2" })
	if r := e.acquire("c2"); r.Kind != redisstore.AcquireDeploy {
		t.Fatalf("acquire after a deploy change = %+v, want a deploy (the idle pod is an old version)", r)
	}
	e.publish(nil)
	r := e.acquire("c3")
	if r.Kind != redisstore.AcquireWarm || r.Pod.ID != pod.ID {
		t.Fatalf("acquire with the version back = %+v, want warm %s", r, pod.ID)
	}
}

// A slot that a route hands to a waiter on an idle pod (one adopted, or of a version
// rolled back to, while waiters queued) takes the pod out of the idle set, so that an
// acquire does not take it warm as well: one pod of one session, both handed out.
// Seen red without the ZREM of the idle set in session_route.lua's waiter loop.
func TestRouteGrantOnAnIdlePodTakesItOutOfIdle(t *testing.T) {
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.MaxConcurrency, c.Pool.PodConcurrency = 1, 1 })
	ctx := context.Background()
	route := func(session, waiter string) redisstore.RouteResult {
		t.Helper()
		r, err := e.store.SessionRoute(ctx, e.scope, redisstore.RouteArgs{Now: e.now, Session: session, Waiter: waiter, Join: waiter != ""})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := route("s0", "w0"); r.Kind != redisstore.RouteQueued {
		t.Fatalf("route with no pod = %+v, want queued", r)
	}
	cfg, err := e.store.Scope(ctx, e.scope)
	if err != nil {
		t.Fatal(err)
	}
	pod := warmpool.Pod{ID: "adopted-1", ScopeID: e.scope, DeployVer: cfg.DeployVer, SSEURL: "http://x/sse"}
	if st, err := e.store.PodAdopt(ctx, pod, e.now, false); err != nil || st != redisstore.AdoptAdopted {
		t.Fatalf("adopt = %q, %v", st, err)
	}
	if r := route("s1", ""); r.Kind != redisstore.RouteNone {
		t.Fatalf("route behind a waiter = %+v, want none (the slot is the waiter's)", r)
	}
	s := e.snap()
	if s.ClaimPod["w0"] != pod.ID || s.Pods[0].Slots != 1 || s.Pods[0].Idle {
		t.Fatalf("after the grant: claims %v, pod %+v; want w0's grant on a busy pod", s.ClaimPod, s.Pods[0])
	}
	if r := e.acquire("c1"); r.Kind == redisstore.AcquireWarm {
		t.Fatalf("acquire took the granted pod warm: %+v", r)
	}
}

func TestClaimExpiryFreesTheSlotAndIdlesThePod(t *testing.T) {
	e := newEnv(t, nil)
	lead := e.acquire("c1")
	if _, _, err := e.register(lead, "c1"); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(31 * time.Second)
	r := e.acquire("c2") // expires c1's claim first: the pod is idle again and taken warm
	if r.Kind != redisstore.AcquireWarm {
		t.Fatalf("acquire after the claim expired = %+v, want warm", r)
	}
	s := e.snap()
	if s.Pods[0].Slots != 1 || s.ClaimPod["c1"] != "" {
		t.Fatalf("pod slots = %d, claims %v; want only c2's", s.Pods[0].Slots, s.ClaimPod)
	}
}

// The pool view counts a pod's sessions from RM's keys alone (slots less claims) and
// agrees with the sessions themselves.
func TestPoolSnapshotCountsSessionsWithoutReadingThem(t *testing.T) {
	e := newEnv(t, nil) // max_pods 2, pc 2
	ctx := context.Background()
	lead := e.acquire("leader")
	e.acquire("follower")
	pod, _, err := e.register(lead, "leader")
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.store.SessionRoute(ctx, e.scope, redisstore.RouteArgs{Now: e.now, Session: "s1", Claim: "leader"})
	if err != nil || res.Kind != redisstore.RouteNew || res.Pod.ID != pod.ID {
		t.Fatalf("route with the leader's claim = %+v, %v", res, err)
	}
	// The pod is full (a session and the follower's claim): a route queues.
	if res, err := e.store.SessionRoute(ctx, e.scope, redisstore.RouteArgs{Now: e.now, Session: "s2", Waiter: "w1", Join: true}); err != nil || res.Kind != redisstore.RouteQueued {
		t.Fatalf("route of a waiter = %+v, %v", res, err)
	}
	full, view := e.snap(), e.poolSnap()
	if view.Sessions != nil || len(view.Pods) != 1 {
		t.Fatalf("pool view = %+v, want one pod and no session read", view)
	}
	p := view.Pods[0]
	if p.Slots != 2 || p.Claims != 1 || p.Sessions() != 1 {
		t.Fatalf("pod %+v: want 2 slots, 1 claim, 1 session", p)
	}
	on := 0
	for _, id := range full.Sessions {
		if id == pod.ID {
			on++
		}
	}
	if p.Sessions() != on || view.Queued != 1 || len(view.Followers) != len(full.Followers) {
		t.Fatalf("pool view says %d sessions, %d queued, %d followers; the keys hold %d, %d, %d",
			p.Sessions(), view.Queued, len(view.Followers), on, len(full.Waiters), len(full.Followers))
	}
}

func TestPurgeOnlyIfStillIdleSince(t *testing.T) {
	e := newEnv(t, nil)
	lead := e.acquire("c1")
	pod, _, _ := e.register(lead, "")
	since := e.snap().Pods[0].IdleSince
	later := since.Add(time.Millisecond)
	if _, err := e.store.PodPurge(context.Background(), e.scope, pod.ID, "reclaim", &later); !errors.Is(err, redisstore.ErrPodBusy) {
		t.Fatalf("purge with a stale idle time: err = %v, want ErrPodBusy", err)
	}
	if _, err := e.store.PodPurge(context.Background(), e.scope, pod.ID, "reclaim", &since); err != nil {
		t.Fatal(err)
	}
	s := e.snap()
	if len(s.Pods) != 0 {
		t.Fatalf("pods after purge = %+v", s.Pods)
	}
	if _, err := e.store.PodPurge(context.Background(), e.scope, pod.ID, "again", nil); err != nil {
		t.Fatalf("purge is not idempotent: %v", err)
	}
}

func TestEpochLostFailsClosed(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if err := e.r.Client.Del(ctx, e.store.Keys().Scope(e.scope).Epoch).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := e.store.PodAcquire(ctx, e.scope, redisstore.AcquireArgs{Now: e.now, Claim: "c"})
	if warmpool.ErrorCode(err) != warmpool.CodeStoreUnavailable {
		t.Fatalf("acquire without the epoch: err = %v, want STORE_UNAVAILABLE", err)
	}
	// Everything gone (no config, no global epoch): still STORE_UNAVAILABLE, not 404.
	for _, k := range []string{e.store.Keys().Scope(e.scope).Config, e.store.Keys().Epoch()} {
		e.r.Client.Del(ctx, k)
	}
	if _, err := e.store.PodAcquire(ctx, e.scope, redisstore.AcquireArgs{Now: e.now, Claim: "c"}); warmpool.ErrorCode(err) != warmpool.CodeStoreUnavailable {
		t.Fatalf("acquire after data loss: err = %v, want STORE_UNAVAILABLE", err)
	}
	// An unknown scope on a live keyspace is a 404.
	if _, err := e.store.Bootstrap(ctx, "epoch-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.PodAcquire(ctx, "nope", redisstore.AcquireArgs{Now: e.now, Claim: "c"}); warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Fatalf("acquire of an unknown scope: err = %v, want SCOPE_NOT_FOUND", err)
	}
}

func TestIdempotentRunsOnce(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	calls := 0
	fn := func() ([]byte, error) { calls++; return []byte(`{"n":1}`), nil }
	req := redisstore.IdemRequest{Scope: e.scope, ID: "r1", Fingerprint: redisstore.AcquireFingerprint}
	a, err := e.store.Idempotent(ctx, req, time.Minute, time.Second, time.Millisecond, fn)
	if err != nil || a.Replayed || string(a.Answer) != `{"n":1}` || a.Unkept != nil {
		t.Fatalf("first = %+v %v", a, err)
	}
	b, err := e.store.Idempotent(ctx, req, time.Minute, time.Second, time.Millisecond, fn)
	if err != nil || !b.Replayed || string(b.Answer) != string(a.Answer) || calls != 1 {
		t.Fatalf("replay = %+v %v, calls %d", b, err, calls)
	}
	fail := redisstore.IdemRequest{Scope: e.scope, ID: "r2", Fingerprint: redisstore.AcquireFingerprint}
	boom := errors.New("boom")
	if f, err := e.store.Idempotent(ctx, fail, time.Minute, time.Second, time.Millisecond, func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) || f.Unkept != nil {
		t.Fatalf("err = %v, %+v", err, f)
	}
	if c, err := e.store.Idempotent(ctx, fail, time.Minute, time.Second, time.Millisecond, fn); err != nil || c.Replayed {
		t.Fatalf("a failed first run must not be cached: %+v %v", c, err)
	}
}

// SPEC §11.5: a request id names one request of its scope, its fingerprint (the
// operation and its parameters). Whichever of the id's keys a request of another
// fingerprint finds, the running or answered mark or a route's answer, it is
// IDEMPOTENCY_MISMATCH and changes nothing (a claim it brought is given back); a
// request of the same fingerprint replays, and the same id in another scope is
// another request. Guards the fingerprint compares of idem_claim.lua and
// session_route.lua.
func TestRequestIDNamesOneRequest(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	pod, _, err := e.register(e.acquire("c1"), "c1")
	if err != nil {
		t.Fatal(err)
	}
	route := func(session, requestID, claim string) (redisstore.RouteResult, error) {
		return e.store.SessionRoute(ctx, e.scope, redisstore.RouteArgs{Now: e.now, Session: session, RequestID: requestID, Claim: claim, IdemTTL: time.Minute})
	}
	refused := func(what string, err error) {
		t.Helper()
		if warmpool.ErrorCode(err) != warmpool.CodeIdempotencyMismatch {
			t.Fatalf("%s: %v, want IDEMPOTENCY_MISMATCH", what, err)
		}
	}
	acquire := redisstore.IdemRequest{Scope: e.scope, ID: "r1", Fingerprint: redisstore.AcquireFingerprint}
	if m, err := e.store.IdemClaim(ctx, acquire, "t1", time.Minute); err != nil || m.State != redisstore.IdemWon {
		t.Fatalf("acquire's claim = %+v %v", m, err)
	}
	// The acquire runs: a route with its id is refused, the claim it brought given back.
	if before := e.snap(); before.Pods[0].Slots != 1 || before.ClaimPod["c1"] != pod.ID {
		t.Fatalf("before: pods %+v claims %v, want c1 on %s", before.Pods, before.ClaimPod, pod.ID)
	}
	_, err = route("alice", "r1", "c1")
	refused("a route with a running acquire's id", err)
	_, err = e.store.IdemClaim(ctx, redisstore.IdemRequest{Scope: e.scope, ID: "r1", Fingerprint: redisstore.RouteFingerprint("alice")}, "t2", time.Minute)
	refused("a route's claim of a running acquire's id", err)
	after := e.snap()
	if len(after.Sessions) != 0 || len(after.Claims) != 0 || after.Pods[0].Slots != 0 {
		t.Fatalf("after the refused route: sessions %v claims %v pods %+v; want nothing bound and c1 given back", after.Sessions, after.Claims, after.Pods)
	}
	if ok, err := e.store.IdemAnswer(ctx, e.scope, "r1", "t1", []byte(`{"hold":1}`), time.Minute); err != nil || !ok {
		t.Fatalf("acquire's answer: %v %v", ok, err)
	}
	_, err = route("alice", "r1", "")
	refused("a route with an answered acquire's id", err)
	if m, err := e.store.IdemClaim(ctx, acquire, "t3", time.Minute); err != nil || m.State != redisstore.IdemDone || string(m.Answer) != `{"hold":1}` {
		t.Fatalf("the acquire's retry = %+v %v, want its answer", m, err)
	}

	// alice's route binds and keeps its answer under r2: mallory's route and an
	// acquire with r2 are refused, alice's retry replays.
	first, err := route("alice", "r2", "")
	if err != nil || first.Kind != redisstore.RouteNew || first.Pod.ID != pod.ID {
		t.Fatalf("alice's route = %+v %v", first, err)
	}
	_, err = route("mallory", "r2", "")
	refused("mallory's route with alice's id", err)
	for _, r := range []redisstore.IdemRequest{{Scope: e.scope, ID: "r2", Fingerprint: redisstore.AcquireFingerprint}, {Scope: e.scope, ID: "r2", Fingerprint: redisstore.RouteFingerprint("mallory")}} {
		_, err = e.store.IdemClaim(ctx, r, "t4", time.Minute)
		refused(r.Fingerprint+"'s claim of alice's id", err)
	}
	if sessions := e.snap().Sessions; len(sessions) != 1 || sessions["alice"] != pod.ID {
		t.Fatalf("sessions %v, want alice's alone", sessions)
	}
	if again, err := route("alice", "r2", ""); err != nil || again.Kind != redisstore.RouteReplay || again.Session != "alice" || again.Pod.ID != pod.ID || !again.New {
		t.Fatalf("alice's retry = %+v %v, want a replay of her answer", again, err)
	}
	// A route's claim under its own id, while the route's slow path runs: another
	// session's route is refused, the same session's goes on.
	if m, err := e.store.IdemClaim(ctx, redisstore.IdemRequest{Scope: e.scope, ID: "r3", Fingerprint: redisstore.RouteFingerprint("bob")}, "t5", time.Minute); err != nil || m.State != redisstore.IdemWon {
		t.Fatalf("bob's claim = %+v %v", m, err)
	}
	_, err = route("mallory", "r3", "")
	refused("mallory's route with bob's running id", err)
	if b, err := route("bob", "r3", ""); err != nil || b.Kind != redisstore.RouteNew {
		t.Fatalf("bob's route under his running id = %+v %v, want it bound", b, err)
	}
	// The same id in another scope is another request.
	other := redisstore.IdemRequest{Scope: "s2", ID: "r2", Fingerprint: redisstore.AcquireFingerprint}
	if m, err := e.store.IdemClaim(ctx, other, "t6", time.Minute); err != nil || m.State != redisstore.IdemWon {
		t.Fatalf("r2 in another scope = %+v %v, want a first request", m, err)
	}
}

// A first request that outlives its mark (its ttl passes while fn runs, and a retry
// takes the id) leaves the retry's mark as it is, whether it ends with an answer or an
// error, and says that its mark was not completed: a third call replays the retry's
// answer. Guards the token checks of idem_answer.lua and idem_release.lua.
func TestLateOwnerLeavesTheRetrysMark(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, late := range []struct {
		name string
		err  error
	}{{"answers", nil}, {"fails", errors.New("boom")}} {
		t.Run(late.name, func(t *testing.T) {
			req := redisstore.IdemRequest{Scope: e.scope, ID: "late-" + late.name, Fingerprint: redisstore.AcquireFingerprint}
			first, err := e.store.Idempotent(ctx, req, 100*time.Millisecond, time.Second, time.Millisecond, func() ([]byte, error) {
				e.awaitExpiry(t, e.store.Keys().Scope(e.scope).IdemMark(req.ID), 100*time.Millisecond)
				retry, err := e.store.Idempotent(ctx, req, time.Minute, time.Second, time.Millisecond, func() ([]byte, error) {
					return []byte(`{"by":"retry"}`), nil
				})
				if err != nil || retry.Replayed || string(retry.Answer) != `{"by":"retry"}` {
					t.Fatalf("the retry after the mark expired = %+v %v, want its own run", retry, err)
				}
				return []byte(`{"by":"late"}`), late.err
			})
			if !errors.Is(err, late.err) || first.Unkept == nil {
				t.Fatalf("the late first request: %+v %v, want %v and its mark not completed", first, err, late.err)
			}
			third, err := e.store.Idempotent(ctx, req, time.Minute, time.Second, time.Millisecond, func() ([]byte, error) {
				return []byte(`{"by":"third"}`), nil
			})
			if err != nil || !third.Replayed || string(third.Answer) != `{"by":"retry"}` {
				t.Fatalf("a third call = %+v %v, want the retry's answer replayed", third, err)
			}
		})
	}
}

// The mark scripts in a controlled sequence: the owner of an expired mark can neither
// free nor answer the mark a retry took since; the retry's owner answers it, once;
// nobody frees an answered mark.
func TestMarkScriptsCheckTheOwnersToken(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	req := redisstore.IdemRequest{Scope: e.scope, ID: "r1", Fingerprint: redisstore.AcquireFingerprint}
	claim := func(token string, ttl time.Duration, want redisstore.IdemClaimResult) {
		t.Helper()
		if got, err := e.store.IdemClaim(ctx, req, token, ttl); err != nil || got.State != want.State || string(got.Answer) != string(want.Answer) {
			t.Fatalf("claim by %s = %+v %v, want %+v", token, got, err, want)
		}
	}
	check := func(what string, got bool, err error, want bool) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s = %v %v, want %v", what, got, err, want)
		}
	}
	claim("t1", 50*time.Millisecond, redisstore.IdemClaimResult{State: redisstore.IdemWon})
	e.awaitExpiry(t, e.store.Keys().Scope(e.scope).IdemMark(req.ID), 50*time.Millisecond)
	claim("t2", time.Minute, redisstore.IdemClaimResult{State: redisstore.IdemWon})
	got, err := e.store.IdemRelease(ctx, e.scope, req.ID, "t1")
	check("t1's late release", got, err, false)
	got, err = e.store.IdemAnswer(ctx, e.scope, req.ID, "t1", []byte("late"), time.Minute)
	check("t1's late answer", got, err, false)
	claim("t3", time.Minute, redisstore.IdemClaimResult{State: redisstore.IdemRunning})
	got, err = e.store.IdemAnswer(ctx, e.scope, req.ID, "t2", []byte("retry"), time.Minute)
	check("t2's answer", got, err, true)
	got, err = e.store.IdemAnswer(ctx, e.scope, req.ID, "t2", []byte("again"), time.Minute)
	check("t2's second answer", got, err, false)
	for _, token := range []string{"t1", "t2"} {
		got, err = e.store.IdemRelease(ctx, e.scope, req.ID, token)
		check(token+"'s release of the answered mark", got, err, false)
	}
	claim("t3", time.Minute, redisstore.IdemClaimResult{State: redisstore.IdemDone, Answer: []byte("retry")})
}
