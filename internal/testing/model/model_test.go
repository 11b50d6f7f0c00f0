package model_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/internal/testing/model"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// steps is the length of each run.
var steps = flag.Int("model.steps", 60, "steps of each run of TestScriptsFollowTheModel")

// TestScriptsFollowTheModel runs random sequences of every pool, session and scope
// script (publish, delete, forget) and of idem_claim on two scopes through redisstore.Store and through the
// model side by side, and compares their answers and the whole state of both scopes
// after every step, then the due time scope_due.lua gives the scope just changed; the
// SPEC §6 invariants are checked on Redis's state too. make test runs 100 sequences (rapid's default) of
// 60 steps; make soak runs more and longer ones (-rapid.checks, -model.steps).
//
// Each run draws an order of the steps (each as often as its weight) and then each
// step from it: rapid favours the first entries of a list, so every run leans on a few
// steps of its own, and over many runs every step gets its turn.
func TestScriptsFollowTheModel(t *testing.T) { runModel(t, weights, smallScopes, *steps) }

// TestLoweredCapacityFollowsTheModel is TestScriptsFollowTheModel on the steps that
// fill pods, free their slots, queue and change the scopes' capacity back and forth:
// pods and rooms filled under one limit meet a lower one, with waiters queued, within
// a few steps of every run, where the whole mix meets it in few runs.
func TestLoweredCapacityFollowsTheModel(t *testing.T) {
	runModel(t, capacityWeights, smallScopes, *steps)
}

// scopes are the scopes of a run: their two pool configs (scopeConfigs) and how many
// session and waiter ids the run hands out.
type scopes struct {
	configs           map[string][2]warmpool.PoolConfig
	sessions, waiters int
	// fill is how many pods each scope deploys before the steps (fill).
	fill int
	// tenants, when set, are the scopes' tenants and their limits (tenants_test.go).
	tenants *tenantSet
}

// smallScopes are the scopes of TestScriptsFollowTheModel.
var smallScopes = scopes{configs: scopeConfigs, sessions: 5, waiters: 4}

// runModel runs rapid's checks of n steps each on the scopes, and returns the most
// pods a scope held after any step.
func runModel(t *testing.T, weights map[string]int, sc scopes, n int) int {
	if !testredis.Real() && os.Getenv("CI") != "" {
		t.Fatal("REDIS_ADDR is not set: in CI the model runs against a real redis-server (scripts/with-redis.sh)")
	}
	r := testredis.New(t)
	var runs atomic.Int64
	seen := map[string]int{}
	most := 0
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt, r, fmt.Sprintf("%sm%d:", r.Prefix, runs.Add(1)), seen, sc)
		actions := w.actions()
		var names []string
		for _, name := range slices.Sorted(maps.Keys(actions)) {
			for range weights[name] {
				names = append(names, name)
			}
		}
		order := rapid.Permutation(names).Draw(rt, "order")
		for range n {
			name := rapid.SampledFrom(order).Draw(rt, "step")
			actions[name](rt)
		}
		most = max(most, w.most)
	})
	var lines []string
	for k, n := range seen {
		lines = append(lines, fmt.Sprintf("%6d %s", n, k))
	}
	slices.Sort(lines)
	t.Logf("answers seen, by step:\n%s", strings.Join(lines, "\n"))
	return most
}

// weights say how often each step comes, roughly as callers make them: routes,
// acquires and registers often, the steps that take a scope apart (a new config, a
// lost epoch, a purge, an aborted deploy, a stray or lost write for reconcile to
// repair) now and then; a change of capacity a little more often, so that pods and
// rooms filled under one limit meet the other.
var weights = map[string]int{
	"session_route": 6, "pod_acquire": 4, "pod_register": 4,
	"session_touch": 2, "session_end": 2, "session_evict": 2, "claim_release": 2, "hold_touch": 2, "hold_release": 2,
	"follower_wait": 4, "pod_placeholder": 2, "deploy_extend": 2, "scope_repair": 2,
	"session_get": 1, "follower_leave": 1, "waiter_leave": 1, "deploy_abort": 2, "pod_purge": 1, "pod_adopt": 1,
	"pod_health": 1, "fence_raise": 1, "scope_publish": 1, "scope_capacity": 3, "epoch_lost": 1, "drift": 1,
	"scope_delete": 1, "scope_forget": 1, "idem_claim": 1, "idem_answer": 1, "idem_release": 1, "idem_expire": 1,
	"agent_report": 5, "scope_rollout": 2, "session_deadline": 2,
}

// capacityWeights are the steps of TestLoweredCapacityFollowsTheModel.
var capacityWeights = map[string]int{
	"session_route": 6, "session_end": 4, "claim_release": 2, "waiter_leave": 1,
	"pod_acquire": 2, "pod_register": 2, "follower_wait": 2, "pod_placeholder": 1, "scope_capacity": 3,
	"scope_rollout": 1,
}

// The scopes of every run: a has room for three pods of two sessions, deployed two at
// a time, a short queue and a warm pool of one; b has one pod of one session, so that
// its queue fills within a few steps. A step lets about a second pass on average, so
// sessions, holds, waits and grants live for a few steps to a few dozen. Each scope
// also has a class B change of its capacity: a lowered to two pods of one session, b
// raised to two pods of two whose pods are deleted when their last session or hold
// ends (recycle "delete"; published back, a lowering and reuse again). The changed
// capacity also limits the sessions a pod serves (max_sessions_per_pod: a's to two,
// b's to three).
var scopeConfigs = map[string][2]warmpool.PoolConfig{
	"a": {
		{MaxConcurrency: 6, PodConcurrency: 2, MinIdlePods: 1, PodTTLS: 60, SessionTTLS: 30, QueueSize: 2, WaitTimeoutS: 10, HoldTTLS: 15, MaxParallelDeploys: 2},
		{MaxConcurrency: 2, PodConcurrency: 1, MinIdlePods: 1, PodTTLS: 60, SessionTTLS: 30, QueueSize: 2, WaitTimeoutS: 10, HoldTTLS: 15, MaxParallelDeploys: 2, MaxSessionsPerPod: 2},
	},
	"b": {
		{MaxConcurrency: 1, PodConcurrency: 1, PodTTLS: 60, SessionTTLS: 20, QueueSize: 2, WaitTimeoutS: 12, HoldTTLS: 10},
		{MaxConcurrency: 4, PodConcurrency: 2, PodTTLS: 60, SessionTTLS: 20, QueueSize: 2, WaitTimeoutS: 12, HoldTTLS: 10, Recycle: warmpool.RecycleDelete, MaxSessionsPerPod: 3},
	},
}

// variants are the configs a scope is published with in turn: the first, a new image
// (class A: a new deploy_ver), no queue and recycle "delete" (class B) and other
// capacity (class B: lowered or raised); a class A change to any but the first is
// rolled out with a prewarm, to the first it drains.
func variants(pools [2]warmpool.PoolConfig) []warmpool.ScopeConfig {
	var out []warmpool.ScopeConfig
	for i, image := range []string{"agent:1", "agent:2", "agent:1", "agent:1"} {
		c := warmpool.DefaultScopeConfig()
		c.Deploy.Image, c.Deploy.ReadyTimeoutS = image, 10
		c.Pool = pools[0]
		switch i {
		case 2:
			c.Pool.QueueSize, c.Pool.Recycle = 0, warmpool.RecycleDelete
		case 3:
			c.Pool = pools[1]
		}
		if i > 0 {
			c.Pool.Rollout = warmpool.RolloutPrewarm
		}
		c.Pool.ProbePeriodS = warmpool.DefaultProbePeriodS // no script reads it
		c.Agent.SessionsFromReports = i%2 == 1
		if err := c.Normalize(); err != nil {
			panic(err)
		}
		out = append(out, c)
	}
	return out
}

// side is one scope seen from both sides, with what the run has been handed so far:
// the ids a later step may use, rightly or not.
type side struct {
	id       string
	model    *model.Scope
	configs  []warmpool.ScopeConfig
	current  int
	version  int64 // the latest version published or deleted
	deploys  []deployRef
	rooms    []roomRef
	claims   []string
	pods     []string
	sessions []string
	waiters  []string
	owners   []markRef // the idempotency marks taken by bare claims, with their owner tokens
	// drifted is set once a write outside the scripts changed the scope: from then on
	// its state is compared with the model's, but the invariants may rightly break.
	drifted bool
	// pools is the pool config in force at every version published or deleted, and
	// capacity follows the scope's snapshots through its changes (invariants 1 and 2).
	pools    map[int64]warmpool.PoolConfig
	capacity invariant.Capacity
}

type deployRef struct {
	member string
	fence  int64
	ver    string
	leader string // the claim of the acquire that leads it; "" for a warm-pool deploy
}

type roomRef struct{ deploy, room, claim string }

type markRef struct{ request, token string }

type world struct {
	t     *rapid.T
	r     *testredis.Redis
	store *redisstore.Store
	now   time.Time
	sides []*side
	seq   int
	// seen counts the answers of each kind of step, for the log of the run.
	seen map[string]int
	// most is the most pods a scope held after a step.
	most int
	// tenants follow the escrows of the scopes' tenants; nil when sc has none.
	tenants *tenantWorld
}

func newWorld(t *rapid.T, r *testredis.Redis, prefix string, seen map[string]int, sc scopes) *world {
	w := &world{t: t, r: r, store: redisstore.NewStore(r.Client, prefix), now: time.UnixMilli(1_700_000_000_000), seen: seen}
	for _, id := range slices.Sorted(maps.Keys(sc.configs)) {
		s := &side{id: id, model: model.NewScope(id), configs: variants(sc.configs[id]), pools: map[int64]warmpool.PoolConfig{}}
		for i := range sc.sessions {
			s.sessions = append(s.sessions, fmt.Sprintf("s%d", i))
		}
		for i := range sc.waiters {
			s.waiters = append(s.waiters, fmt.Sprintf("w%d", i))
		}
		w.sides = append(w.sides, s)
		w.joinTenants(s, sc.tenants)
		w.publish(s, 0, 1)
	}
	if _, err := w.store.Bootstrap(context.Background(), "epoch-1"); err != nil {
		t.Fatal(err)
	}
	for _, s := range w.sides {
		s.model.Bootstrap()
		w.fill(s, sc.fill)
	}
	w.putLimits(sc.tenants)
	return w
}

// fill deploys n pods into the scope, through both sides, one at a time: an acquire
// that leads the deploy, and its register with the leader's claim, which holds a slot
// for one to sixty minutes.
func (w *world) fill(s *side, n int) {
	ctx := context.Background()
	for i := range n {
		a := redisstore.AcquireArgs{Now: w.now, Claim: w.fresh("c"), ClaimDeadline: w.now.Add(time.Hour),
			LeaseDeadline: w.now.Add(time.Hour), RoomMargin: time.Second}
		got, gotErr := w.store.PodAcquire(ctx, s.id, a)
		want, wantErr := s.model.PodAcquire(a)
		w.same("pod_acquire", got, want, gotErr, wantErr)
		if got.Kind != redisstore.AcquireDeploy {
			w.t.Fatalf("fill: acquire %d of scope %s answered %s, want a deploy", i, s.id, got.Kind)
		}
		pod := warmpool.Pod{ID: warmpool.PodName(s.id, got.Fence), ScopeID: s.id, DeployVer: got.Spec.DeployVer(), Fence: got.Fence}
		held := w.now.Add(time.Duration(1+i%60) * time.Minute)
		gotN, gotErr := w.store.PodRegister(ctx, s.id, got.Deploy, pod, a.Claim, w.now, held)
		wantN, wantErr := s.model.PodRegister(got.Deploy, pod, a.Claim, w.now, held)
		w.same("pod_register", gotN, wantN, gotErr, wantErr)
		s.pods = append(s.pods, pod.ID)
		s.claims = append(s.claims, a.Claim)
	}
	if n > 0 {
		w.compare("fill", s)
	}
}

func (w *world) publish(s *side, variant int, version int64) {
	cfg := s.configs[variant]
	rec := redisstore.ScopeRecord{ScopeID: s.id, Config: cfg, Version: version, DeployVer: cfg.Deploy.DeployVer(), ChangedAt: w.now}
	got := w.store.ScopePublish(context.Background(), rec)
	want := s.model.Publish(rec)
	w.same("scope_publish", nil, nil, got, want)
	if got == nil && version > s.version {
		s.current, s.version = variant, version
		s.pools[version] = cfg.Pool
	}
}

// pick draws one of the ids handed out so far, or one never handed out.
func pick(t *rapid.T, label string, ids []string) string {
	return rapid.SampledFrom(append([]string{"unknown-" + label}, ids...)).Draw(t, label)
}

// after draws a deadline some seconds after now: a lease or a claim of a caller that
// takes its time, or a note that may soon expire.
func (w *world) after(label string) time.Time {
	return w.now.Add(time.Duration(rapid.IntRange(1, 40).Draw(w.t, label)) * time.Second)
}

func (w *world) fresh(kind string) string {
	w.seq++
	return fmt.Sprintf("%s%d", kind, w.seq)
}

// actions are the steps of a run, each one script run on both sides. Every step first
// lets some time pass: none, a little, a step back (replicas' clocks differ) or, now and
// then, a jump of seconds, so that deadlines fall between steps.
func (w *world) actions() map[string]func(*rapid.T) {
	ctx := context.Background()
	step := func(name string, f func(s *side)) func(*rapid.T) {
		return func(t *rapid.T) {
			w.t = t
			dt := time.Duration(rapid.IntRange(-2, 10).Draw(t, "dt")) * 100 * time.Millisecond
			if rapid.IntRange(0, 29).Draw(t, "jump") == 29 {
				dt = time.Duration(rapid.IntRange(5, 60).Draw(t, "jump s")) * time.Second
			}
			w.now = w.now.Add(dt)
			s := w.sides[rapid.IntRange(0, len(w.sides)-1).Draw(t, "scope")]
			f(s)
			w.compare(name, s)

		}
	}
	actions := w.tenantSteps(step)
	maps.Copy(actions, map[string]func(*rapid.T){
		"pod_acquire": step("pod_acquire", func(s *side) {
			a := redisstore.AcquireArgs{Now: w.now, Claim: w.fresh("c"), ClaimDeadline: w.after("claim deadline"),
				LeaseDeadline: w.after("lease deadline"), RoomMargin: time.Second}
			before := s.model.Snapshot()
			got, gotErr := w.store.PodAcquire(ctx, s.id, a)
			want, wantErr := s.model.PodAcquire(a)
			w.same("pod_acquire", got, want, gotErr, wantErr)
			if cfg := s.configs[s.current]; got.Kind == redisstore.AcquireBackoff && !s.drifted {
				if v := invariant.WarmBeforeBackoff(before, cfg.Deploy.DeployVer(), s.pools[s.version].MaxPods(), w.now); len(v) > 0 {
					w.t.Fatalf("pod_acquire on scope %s: %s", s.id, strings.Join(v, "; "))
				}
			}
			s.claims = append(s.claims, a.Claim)
			switch got.Kind {
			case redisstore.AcquireFollower:
				s.rooms = append(s.rooms, roomRef{deploy: got.Deploy, room: got.Room, claim: a.Claim})
			case redisstore.AcquireDeploy:
				s.deploys = append(s.deploys, deployRef{member: got.Deploy, fence: got.Fence, ver: got.Spec.DeployVer(), leader: a.Claim})
			}
		}),
		"pod_placeholder": step("pod_placeholder", func(s *side) {
			lease, note := w.after("lease deadline"), w.after("note deadline")
			got, gotErr := w.store.PodPlaceholder(ctx, s.id, w.now, lease, note)
			want, wantErr := s.model.PodPlaceholder(w.now, lease, note)
			w.same("pod_placeholder", got, want, gotErr, wantErr)
			if got.Kind == redisstore.PlaceholderDeploy {
				s.deploys = append(s.deploys, deployRef{member: got.Deploy, fence: got.Fence, ver: got.Spec.DeployVer()})
			}
		}),
		"pod_register": step("pod_register", func(s *side) {
			if len(s.deploys) == 0 {
				return
			}
			d := rapid.SampledFrom(s.deploys).Draw(w.t, "deploy")
			if live := s.liveDeploys(); len(live) > 0 && rapid.IntRange(0, 3).Draw(w.t, "live deploy") > 0 {
				d = rapid.SampledFrom(live).Draw(w.t, "deploy")
			}
			leader := ""
			if d.leader != "" && rapid.IntRange(0, 3).Draw(w.t, "leader") > 0 {
				leader = d.leader
			}
			pod := warmpool.Pod{ID: warmpool.PodName(s.id, d.fence), ScopeID: s.id, DeployVer: d.ver, Fence: d.fence,
				SSEURL: "http://127.0.0.1:1/" + d.member}
			claimDeadline := w.after("claim deadline")
			got, gotErr := w.store.PodRegister(ctx, s.id, d.member, pod, leader, w.now, claimDeadline)
			want, wantErr := s.model.PodRegister(d.member, pod, leader, w.now, claimDeadline)
			w.same("pod_register", got, want, gotErr, wantErr)
			if gotErr == nil && !slices.Contains(s.pods, pod.ID) {
				s.pods = append(s.pods, pod.ID)
			}
		}),
		"deploy_extend": step("deploy_extend", func(s *side) {
			d, _ := s.deploy(w.t)
			deadline := w.after("lease deadline")
			got, gotErr := w.store.DeployExtend(ctx, s.id, d, w.now, deadline)
			w.same("deploy_extend", got, s.model.DeployExtend(d, w.now, deadline), gotErr, nil)
		}),
		"deploy_abort": step("deploy_abort", func(s *side) {
			d, ver := s.deploy(w.t)
			note := w.after("note deadline")
			// a deploy that failed, or one that was lost (its lease, its register)
			reason, lost := "image pull failed", rapid.Bool().Draw(w.t, "lost")
			if lost {
				reason = "register missed Redis"
			}
			got, gotErr := w.store.DeployAbort(ctx, s.id, d, ver, reason, lost, w.now, note)
			w.same("deploy_abort", got, s.model.DeployAbort(d, ver, reason, lost, w.now, note), gotErr, nil)
		}),
		"follower_wait": step("follower_wait", func(s *side) {
			if len(s.rooms) == 0 {
				return
			}
			f := s.room(w.t)
			got, gotErr := w.store.FollowerWait(ctx, s.id, f.deploy, f.room, f.claim, w.now)
			want, wantErr := s.model.FollowerWait(f.deploy, f.room, f.claim, w.now)
			w.same("follower_wait", got, want, gotErr, wantErr)
		}),
		"follower_leave": step("follower_leave", func(s *side) {
			if len(s.rooms) == 0 {
				return
			}
			f := s.room(w.t)
			gotErr := w.store.FollowerLeave(ctx, s.id, f.room, f.claim, w.now)
			s.model.FollowerLeave(f.room, f.claim, w.now)
			w.same("follower_leave", nil, nil, gotErr, nil)
		}),
		"claim_release": step("claim_release", func(s *side) {
			c := s.claim(w.t)
			pod, n, gotErr := w.store.ClaimRelease(ctx, s.id, c, w.now)
			wantPod, wantN := s.model.ClaimRelease(c, w.now)
			w.same("claim_release", []any{pod, n}, []any{wantPod, wantN}, gotErr, nil)
		}),
		"hold_touch": step("hold_touch", onHold(w, "hold_touch", func(ctx context.Context, scope, hold, pod string, now time.Time) (time.Time, error) {
			var conf []byte
			if rapid.Bool().Draw(w.t, "hold config") {
				conf = []byte("sealed:" + hold)
			}
			return w.store.HoldTouch(ctx, scope, hold, pod, now, conf)
		}, (*model.Scope).HoldTouch)),
		"hold_release": step("hold_release", onHold(w, "hold_release", w.store.HoldRelease, (*model.Scope).HoldRelease)),
		"session_route": step("session_route", func(s *side) {
			a := redisstore.RouteArgs{Now: w.now, Session: rapid.SampledFrom(s.sessions).Draw(w.t, "session"), IdemTTL: time.Hour}
			if rapid.Bool().Draw(w.t, "with claim") {
				a.Claim = s.claim(w.t)
			}
			if rapid.Bool().Draw(w.t, "as waiter") {
				a.Waiter = rapid.SampledFrom(s.waiters).Draw(w.t, "waiter")
				a.Join = rapid.Bool().Draw(w.t, "join")
			}
			if rapid.IntRange(0, 3).Draw(w.t, "idempotent") == 0 {
				a.RequestID = rapid.SampledFrom(idemRequests).Draw(w.t, "request")
			}
			if rapid.IntRange(0, 3).Draw(w.t, "fixed") == 0 {
				a.FixedTTL = time.Duration(rapid.IntRange(1, 40).Draw(w.t, "fixed ttl s")) * time.Second
			}
			if rapid.Bool().Draw(w.t, "session config") {
				a.Config = []byte("sealed:" + a.Session)
			}
			got, gotErr := w.store.SessionRoute(ctx, s.id, a)
			want, wantErr := s.model.SessionRoute(a)
			w.same("session_route", got, want, gotErr, wantErr)
		}),
		"session_touch": step("session_touch", onSession(w, "session_touch", w.store.SessionTouch, (*model.Scope).SessionTouch)),
		"session_deadline": step("session_deadline", func(s *side) {
			sid := s.session(w.t)
			ttl := time.Duration(rapid.IntRange(0, 40).Draw(w.t, "ttl s")) * time.Second
			later := rapid.Bool().Draw(w.t, "later")
			got, gotErr := w.store.SessionDeadline(ctx, s.id, sid, w.now, ttl, later)
			want, wantErr := s.model.SessionDeadline(sid, w.now, ttl, later)
			w.same("session_deadline", got, want, gotErr, wantErr)
		}),
		"session_end": step("session_end", onSession(w, "session_end", w.store.SessionEnd, (*model.Scope).SessionEnd)),
		"session_get": step("session_get", onSession(w, "session_get", w.store.SessionGet, (*model.Scope).SessionGet)),
		"session_evict": step("session_evict", func(s *side) {
			limit := rapid.IntRange(1, 4).Draw(w.t, "limit")
			gotN, gotC, gotErr := w.store.SessionEvict(ctx, s.id, w.now, limit)
			wantN, wantC, wantErr := s.model.SessionEvict(w.now, limit)
			w.same("session_evict", []int{gotN, gotC}, []int{wantN, wantC}, gotErr, wantErr)
		}),
		"waiter_leave": step("waiter_leave", func(s *side) {
			wid := rapid.SampledFrom(s.waiters).Draw(w.t, "waiter")
			gotErr := w.store.WaiterLeave(ctx, s.id, wid, w.now)
			s.model.WaiterLeave(wid, w.now)
			w.same("waiter_leave", nil, nil, gotErr, nil)
		}),
		"pod_purge": step("pod_purge", func(s *side) {
			pod := pick(w.t, "pod", s.pods)
			var cond *time.Time
			switch rapid.IntRange(0, 2).Draw(w.t, "condition") {
			case 1:
				if since, ok := s.model.IdleSince(pod); ok {
					cond = &since
				}
			case 2:
				c := w.now
				cond = &c
			}
			got, gotErr := w.store.PodPurge(ctx, s.id, pod, "dead", cond)
			want, wantErr := s.model.PodPurge(pod, "dead", cond)
			slices.Sort(got)
			slices.Sort(want)
			w.same("pod_purge", got, want, gotErr, wantErr)
		}),
		"scope_repair": step("scope_repair", func(s *side) {
			note := w.after("note deadline")
			recount := rapid.Bool().Draw(w.t, "recount")
			got, gotErr := w.store.ScopeRepair(ctx, s.id, w.now, note, recount)
			want, wantErr := s.model.ScopeRepair(w.now, note, recount)
			w.same("scope_repair", got, want, gotErr, wantErr)
		}),
		"pod_adopt": step("pod_adopt", func(s *side) {
			id := w.fresh("adopted-")
			if rapid.Bool().Draw(w.t, "known pod") {
				id = pick(w.t, "pod", s.pods)
			}
			cfg := s.configs[rapid.IntRange(0, len(s.configs)-1).Draw(w.t, "of version")]
			pod := warmpool.Pod{ID: id, ScopeID: s.id, DeployVer: cfg.Deploy.DeployVer(), SSEURL: "http://127.0.0.1:1/" + id}
			unknown := rapid.Bool().Draw(w.t, "sessions unknown")
			got, gotErr := w.store.PodAdopt(ctx, pod, w.now, unknown)
			want, wantErr := s.model.PodAdopt(pod, w.now, unknown)
			w.same("pod_adopt", got, want, gotErr, wantErr)
			if got == redisstore.AdoptAdopted {
				w.adopted(s)
			}
			if got == redisstore.AdoptAdopted && !slices.Contains(s.pods, id) {
				s.pods = append(s.pods, id)
			}
		}),
		"agent_report": step("agent_report", func(s *side) {
			// mostly a live pod listing mostly its own sessions, so that reports meet
			// sessions to touch, leave out, end and bind back
			snap := s.model.Snapshot()
			pod := pick(w.t, "pod", s.pods)
			if len(snap.Pods) > 0 && rapid.IntRange(0, 3).Draw(w.t, "live pod") < 3 {
				pod = rapid.SampledFrom(snap.Pods).Draw(w.t, "live").Pod.ID
			}
			var candidates []string
			for _, sid := range slices.Sorted(maps.Keys(snap.Sessions)) {
				if snap.Sessions[sid] == pod {
					candidates = append(candidates, sid)
				}
			}
			candidates = append(candidates, s.sessions...)
			// mostly no more than a pod holds, now and then more (refused)
			most := 2
			if rapid.IntRange(0, 4).Draw(w.t, "long list") == 4 {
				most = 4
			}
			rep := redisstore.AgentReport{Scope: s.id, Pod: pod, Now: w.now,
				Draining: rapid.IntRange(0, 7).Draw(w.t, "draining") == 7,
				Sessions: rapid.SliceOfN(rapid.SampledFrom(candidates), 0, most).Draw(w.t, "listed"),
				// with a valid ticket: mostly all or none of the sessions, now and then a few
				Proven: rapid.SliceOfN(rapid.SampledFrom(candidates), 0, most).Draw(w.t, "proven")}
			got, gotErr := w.store.AgentReport(ctx, rep)
			want, wantErr := s.model.AgentReport(rep)
			w.same("agent_report", got, want, gotErr, wantErr)
		}),
		"pod_health": step("pod_health", func(s *side) {
			pod, ok := pick(w.t, "pod", s.pods), rapid.Bool().Draw(w.t, "healthy")
			got, gotErr := w.store.PodHealth(ctx, s.id, pod, ok)
			w.same("pod_health", got, s.model.PodHealth(pod, ok), gotErr, nil)
		}),
		"fence_raise": step("fence_raise", func(s *side) {
			n := int64(rapid.IntRange(0, 12).Draw(w.t, "at least"))
			gotErr := w.store.FenceRaise(ctx, s.id, n)
			s.model.FenceRaise(n)
			w.same("fence_raise", nil, nil, gotErr, nil)
		}),
		"scope_publish": step("scope_publish", func(s *side) {
			variant := rapid.IntRange(0, len(s.configs)-1).Draw(w.t, "variant")
			// an older version is ignored; the same one with other content is refused
			version := s.version + int64(rapid.IntRange(-1, 1).Draw(w.t, "version step"))
			w.publish(s, variant, version)
		}),
		"scope_capacity": step("scope_capacity", func(s *side) {
			// the next version with the other capacity: a lowering or a raise (class B)
			variant := 3
			if s.current == 3 {
				variant = 0
			}
			w.publish(s, variant, s.version+1)
		}),
		"scope_rollout": step("scope_rollout", func(s *side) {
			// the next version with the other image (class A): to the second variant
			// with a prewarm, back to the first with a drain
			variant := 1
			if s.current == 1 {
				variant = 0
			}
			w.publish(s, variant, s.version+1)
		}),
		"scope_delete": step("scope_delete", func(s *side) {
			// the latest stored version, mostly; an older one is refused
			version := s.version + int64(rapid.IntRange(-1, 1).Draw(w.t, "version step"))
			note := w.after("note deadline")
			got, gotErr := w.store.ScopeDelete(ctx, s.id, version, note)
			want, wantErr := s.model.ScopeDelete(version, note)
			w.same("scope_delete", got, want, gotErr, wantErr)
			if gotErr == nil {
				s.version = max(s.version, version)
				s.pools[version] = s.configs[s.current].Pool
			}
		}),
		"scope_forget": step("scope_forget", func(s *side) {
			// the sweeper deletes a deleted scope's pods as they go idle, then forgets it
			if rapid.Bool().Draw(w.t, "drain") {
				for _, p := range s.model.Snapshot().Pods {
					got, gotErr := w.store.PodPurge(ctx, s.id, p.Pod.ID, "deleted", nil)
					want, wantErr := s.model.PodPurge(p.Pod.ID, "deleted", nil)
					slices.Sort(got)
					slices.Sort(want)
					w.same("pod_purge to forget", got, want, gotErr, wantErr)
				}
			}
			got, gotErr := w.store.ScopeForget(ctx, s.id)
			w.same("scope_forget", got, s.model.ScopeForget(), gotErr, nil)
		}),
		"idem_claim": step("idem_claim", func(s *side) {
			// an acquire, or the slow path of a route, with one of the request ids
			// the routes use too
			r := s.idemRequest(w)
			if rapid.IntRange(0, 2).Draw(w.t, "bare") == 0 {
				// a first request that takes the mark and runs on (or died): when it
				// wins, its token is one a later step may answer or release with
				token := w.fresh("t")
				got, gotErr := w.store.IdemClaim(ctx, r, token, time.Hour)
				want, wantErr := s.model.IdemClaim(r.ID, r.Fingerprint, token)
				w.same("idem_claim bare", got, want, gotErr, wantErr)
				if got.State == redisstore.IdemWon {
					s.owners = append(s.owners, markRef{request: r.ID, token: token})
				}
				return
			}
			answer := []byte(w.fresh("answer"))
			var fail error
			if rapid.IntRange(0, 3).Draw(w.t, "fails") == 0 {
				fail = warmpool.Errorf(warmpool.CodeInternal, "the first request failed")
			}
			// a retry of the id while the first request runs waits for its answer
			// (here not at all) and is told to retry; a request of another
			// fingerprint with the id is refused
			var retry *redisstore.IdemRequest
			if rapid.Bool().Draw(w.t, "retry while running") {
				retry = &r
				if rapid.Bool().Draw(w.t, "another request") {
					other := s.idemRequest(w)
					other.ID = r.ID
					retry = &other
				}
			}
			won := func() ([]byte, error) {
				w.t.Fatalf("idem_claim: a retry took the mark of a first request still running")
				return nil, nil
			}
			// the owner token the store's first request took the mark under, read
			// from the mark while it runs
			var token string
			var retryErr error
			got, gotErr := w.store.Idempotent(ctx, r, time.Hour, time.Millisecond, time.Millisecond, func() ([]byte, error) {
				mark, err := w.r.Client.Get(ctx, w.store.Keys().Scope(s.id).IdemMark(r.ID)).Result()
				if err != nil {
					w.t.Fatalf("idem_claim: the mark of the running first request: %v", err)
				}
				token = strings.SplitN(mark, "\n", 3)[1]
				if retry != nil {
					_, retryErr = w.store.Idempotent(ctx, *retry, time.Hour, 0, time.Millisecond, won)
				}
				return answer, fail
			})
			if got.Unkept != nil {
				w.t.Fatalf("idem_claim: %v", got.Unkept)
			}
			want, wantReplay, wantErr := s.model.Idempotent(r.ID, r.Fingerprint, token, func() ([]byte, error) {
				if retry != nil {
					_, _, err := s.model.Idempotent(retry.ID, retry.Fingerprint, "", won)
					w.same("idem_claim while running", nil, nil, retryErr, err)
				}
				return answer, fail
			})
			w.same("idem_claim", []any{string(got.Answer), got.Replayed}, []any{string(want), wantReplay}, gotErr, wantErr)
		}),
		"idem_answer": step("idem_answer", func(s *side) {
			m, answer := s.owner(w), []byte(w.fresh("answer"))
			got, gotErr := w.store.IdemAnswer(ctx, s.id, m.request, m.token, answer, time.Hour)
			w.same("idem_answer", got, s.model.IdemAnswer(m.request, m.token, answer), gotErr, nil)
		}),
		"idem_release": step("idem_release", func(s *side) {
			m := s.owner(w)
			got, gotErr := w.store.IdemRelease(ctx, s.id, m.request, m.token)
			w.same("idem_release", got, s.model.IdemRelease(m.request, m.token), gotErr, nil)
		}),
		"idem_expire": step("idem_expire", func(s *side) {
			// a mark's or a route answer's ttl runs out: a late owner's token no
			// longer holds the mark, and the id is free for another request
			id, k := rapid.SampledFrom(idemRequests).Draw(w.t, "request"), w.store.Keys().Scope(s.id)
			key := k.IdemMark(id)
			if rapid.Bool().Draw(w.t, "route answer") {
				key = k.RouteAnswer(id)
				s.model.ExpireRouteAnswer(id)
			} else {
				s.model.ExpireMark(id)
			}
			w.same("idem_expire", nil, nil, w.r.Client.Del(ctx, key).Err(), nil)
		}),
		"drift": step("drift", func(s *side) {
			k := w.store.Keys().Scope(s.id)
			var err error
			switch rapid.IntRange(0, 2).Draw(w.t, "drift") {
			case 0:
				pod, n := pick(w.t, "pod", s.pods), int64(rapid.IntRange(0, 3).Draw(w.t, "slots"))
				err = w.r.Client.HSet(ctx, k.Slots, pod, n).Err()
				s.model.DriftSlots(pod, n)
			case 1:
				sid := s.session(w.t)
				err = w.r.Client.HDel(ctx, k.Sessions, sid).Err()
				s.model.DriftUnbind(sid)
			case 2:
				pod := pick(w.t, "pod", s.pods)
				err = w.r.Client.ZAdd(ctx, k.Idle, redis.Z{Score: float64(w.now.UnixMilli()), Member: pod}).Err()
				s.model.DriftIdle(pod, w.now)
			}
			if err != nil {
				w.t.Fatal(err)
			}
			// the stray write reaches the indexes, as every write of a script does: what
			// drifts is the state, against the model's, not the indexes against the state
			if err := invariant.WriteIndexes(ctx, w.r.Client, k); err != nil {
				w.t.Fatal(err)
			}
			s.drifted = true
		}),
		"epoch_lost": step("epoch_lost", func(s *side) {
			if err := w.r.Client.Del(ctx, w.store.Keys().Scope(s.id).Epoch).Err(); err != nil {
				w.t.Fatal(err)
			}
			s.model.LoseEpoch()
			w.epochLost(s)
			if _, err := w.store.Bootstrap(ctx, "epoch-1"); err != nil {
				w.t.Fatal(err)
			}
			s.model.Bootstrap()
		}),
	})
	return actions
}

// epochLost runs every script that checks the scope's epoch while it is missing.
func (w *world) epochLost(s *side) {
	ctx := context.Background()
	a := redisstore.AcquireArgs{Now: w.now, Claim: w.fresh("c"), ClaimDeadline: w.now.Add(time.Second), LeaseDeadline: w.now.Add(time.Second)}
	_, gotErr := w.store.PodAcquire(ctx, s.id, a)
	_, wantErr := s.model.PodAcquire(a)
	w.same("pod_acquire without epoch", nil, nil, gotErr, wantErr)
	ra := redisstore.RouteArgs{Now: w.now, Session: s.sessions[0], Waiter: s.waiters[0], Join: true}
	_, gotErr = w.store.SessionRoute(ctx, s.id, ra)
	_, wantErr = s.model.SessionRoute(ra)
	w.same("session_route without epoch", nil, nil, gotErr, wantErr)
	_, gotErr = w.store.PodPlaceholder(ctx, s.id, w.now, w.now, w.now)
	_, wantErr = s.model.PodPlaceholder(w.now, w.now, w.now)
	w.same("pod_placeholder without epoch", nil, nil, gotErr, wantErr)
	_, gotErr = w.store.ScopeDelete(ctx, s.id, s.version, w.now)
	_, wantErr = s.model.ScopeDelete(s.version, w.now)
	w.same("scope_delete without epoch", nil, nil, gotErr, wantErr)
	_, _, gotErr = w.store.SessionEvict(ctx, s.id, w.now, 10)
	_, _, wantErr = s.model.SessionEvict(w.now, 10)
	w.same("session_evict without epoch", nil, nil, gotErr, wantErr)
	_, gotErr = w.store.ScopeRepair(ctx, s.id, w.now, w.now, true)
	_, wantErr = s.model.ScopeRepair(w.now, w.now, true)
	w.same("scope_repair without epoch", nil, nil, gotErr, wantErr)
	_, gotErr = w.store.SessionEnd(ctx, s.id, s.sessions[0], w.now)
	_, wantErr = s.model.SessionEnd(s.sessions[0], w.now)
	w.same("session_end without epoch", nil, nil, gotErr, wantErr)
	_, gotErr = w.store.SessionTouch(ctx, s.id, s.sessions[0], w.now)
	_, wantErr = s.model.SessionTouch(s.sessions[0], w.now)
	w.same("session_touch without epoch", nil, nil, gotErr, wantErr)
	pod := pick(w.t, "pod", s.pods)
	_, gotErr = w.store.PodPurge(ctx, s.id, pod, "dead", nil)
	_, wantErr = s.model.PodPurge(pod, "dead", nil)
	w.same("pod_purge without epoch", nil, nil, gotErr, wantErr)
	hold, holdPod := s.hold(w.t)
	_, gotErr = w.store.HoldTouch(ctx, s.id, hold, holdPod, w.now, nil)
	_, wantErr = s.model.HoldTouch(hold, holdPod, w.now)
	w.same("hold_touch without epoch", nil, nil, gotErr, wantErr)
	_, gotErr = w.store.HoldRelease(ctx, s.id, hold, holdPod, w.now)
	_, wantErr = s.model.HoldRelease(hold, holdPod, w.now)
	w.same("hold_release without epoch", nil, nil, gotErr, wantErr)
	if len(s.deploys) > 0 {
		d := s.deploys[len(s.deploys)-1]
		p := warmpool.Pod{ID: warmpool.PodName(s.id, d.fence), ScopeID: s.id, DeployVer: d.ver, Fence: d.fence}
		_, gotErr = w.store.PodRegister(ctx, s.id, d.member, p, "", w.now, w.now.Add(time.Second))
		_, wantErr = s.model.PodRegister(d.member, p, "", w.now, w.now.Add(time.Second))
		w.same("pod_register without epoch", nil, nil, gotErr, wantErr)
	}
}

// The ids a step uses are drawn mostly from what is live in the model's state, so
// that runs go on from an acquire to its register, route and release as callers do,
// and otherwise from everything handed out so far, stale ids included.

// liveDeploys are the handed out deploys whose lease the model still holds.
func (s *side) liveDeploys() []deployRef {
	live := s.model.Snapshot().Deploys
	var out []deployRef
	for _, d := range s.deploys {
		if _, ok := live[d.member]; ok {
			out = append(out, d)
		}
	}
	return out
}

// deploy draws a deploy member and the deploy_ver of its pod ("" for one never handed
// out).
func (s *side) deploy(t *rapid.T) (string, string) {
	if live := s.liveDeploys(); len(live) > 0 && rapid.IntRange(0, 3).Draw(t, "live deploy") > 0 {
		d := rapid.SampledFrom(live).Draw(t, "deploy")
		return d.member, d.ver
	}
	var all []string
	ver := map[string]string{}
	for _, d := range s.deploys {
		all = append(all, d.member)
		ver[d.member] = d.ver
	}
	m := pick(t, "deploy", all)
	return m, ver[m]
}

// room draws a follower, mostly one still waiting or with an answer to learn (its
// claim holds a pod or a note).
func (s *side) room(t *rapid.T) roomRef {
	snap := s.model.Snapshot()
	var waiting []roomRef
	for _, f := range s.rooms {
		_, live := snap.Followers[f.room]
		if _, told := snap.ClaimPod[f.claim]; live || told {
			waiting = append(waiting, f)
		}
	}
	if len(waiting) > 0 && rapid.IntRange(0, 3).Draw(t, "waiting follower") > 0 {
		return rapid.SampledFrom(waiting).Draw(t, "room")
	}
	return rapid.SampledFrom(s.rooms).Draw(t, "room")
}

// liveClaims are the claims the model holds, with their pods (or failure notes).
func (s *side) liveClaims() (ids []string, pods map[string]string) {
	pods = s.model.Snapshot().ClaimPod
	for c := range pods {
		ids = append(ids, c)
	}
	slices.Sort(ids)
	return ids, pods
}

// session draws a session id, mostly of a bound session.
func (s *side) session(t *rapid.T) string {
	live := slices.Sorted(maps.Keys(s.model.Snapshot().Sessions))
	if len(live) > 0 && rapid.IntRange(0, 3).Draw(t, "bound session") > 0 {
		return rapid.SampledFrom(live).Draw(t, "session")
	}
	return rapid.SampledFrom(s.sessions).Draw(t, "session")
}

// idemRequests are the request ids of the routes and the idempotency steps.
var idemRequests = []string{"r0", "r1", "r2"}

// idemRequest draws a request with one of idemRequests: an acquire or a route of one
// of the scope's sessions.
func (s *side) idemRequest(w *world) redisstore.IdemRequest {
	r := redisstore.IdemRequest{Scope: s.id, ID: rapid.SampledFrom(idemRequests).Draw(w.t, "request"), Fingerprint: redisstore.AcquireFingerprint}
	if rapid.Bool().Draw(w.t, "route") {
		r.Fingerprint = redisstore.RouteFingerprint(rapid.SampledFrom(s.sessions).Draw(w.t, "session"))
	}
	return r
}

// owner draws a mark a bare claim took, with its owner token (which may have lost the
// mark since), or now and then a request id with a token that never held it.
func (s *side) owner(w *world) markRef {
	if len(s.owners) == 0 || rapid.IntRange(0, 3).Draw(w.t, "stranger") == 0 {
		return markRef{request: rapid.SampledFrom(idemRequests).Draw(w.t, "request"), token: "unknown-token"}
	}
	return rapid.SampledFrom(s.owners).Draw(w.t, "owner")
}

// claim draws a claim id.
func (s *side) claim(t *rapid.T) string {
	if live, _ := s.liveClaims(); len(live) > 0 && rapid.IntRange(0, 3).Draw(t, "live claim") > 0 {
		return rapid.SampledFrom(live).Draw(t, "claim")
	}
	return pick(t, "claim", s.claims)
}

// hold draws a claim and, mostly, the pod it holds.
func (s *side) hold(t *rapid.T) (claim, pod string) {
	claim = s.claim(t)
	if _, pods := s.liveClaims(); pods[claim] != "" && rapid.IntRange(0, 3).Draw(t, "its pod") > 0 {
		return claim, pods[claim]
	}
	return claim, pick(t, "pod", s.pods)
}

// onSession is the step of a script on one session of the scope: the store and the
// model must answer it alike.
func onSession[T any](w *world, name string, store func(ctx context.Context, scope, session string, now time.Time) (T, error),
	ref func(m *model.Scope, session string, now time.Time) (T, error)) func(*side) {
	return func(s *side) {
		sid := s.session(w.t)
		got, gotErr := store(context.Background(), s.id, sid, w.now)
		want, wantErr := ref(s.model, sid, w.now)
		w.same(name, got, want, gotErr, wantErr)
	}
}

// onHold is the step of a script on one hold of a pod: the store and the model must
// answer it alike.
func onHold[T any](w *world, name string, store func(ctx context.Context, scope, hold, pod string, now time.Time) (T, error),
	ref func(m *model.Scope, hold, pod string, now time.Time) (T, error)) func(*side) {
	return func(s *side) {
		hold, pod := s.hold(w.t)
		got, gotErr := store(context.Background(), s.id, hold, pod, w.now)
		want, wantErr := ref(s.model, hold, pod, w.now)
		w.same(name, got, want, gotErr, wantErr)
	}
}

// same fails the run when Redis's answer differs from the model's.
func (w *world) same(what string, got, want any, gotErr, wantErr error) {
	w.t.Helper()
	w.seen[what+": "+outcome(got, gotErr)]++
	if g, m := errKey(gotErr), errKey(wantErr); g != m {
		w.t.Fatalf("%s: redis answered error %q (%v), the model %q (%v)", what, g, gotErr, m, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		w.t.Fatalf("%s: redis answered\n  %+v\nthe model\n  %+v", what, got, want)
	}
	w.sameQuota(what, gotErr, wantErr)
}

// outcome names the kind of an answer.
func outcome(v any, err error) string {
	if err != nil {
		return errKey(err)
	}
	switch r := v.(type) {
	case redisstore.AcquireResult:
		return r.Kind
	case redisstore.PlaceholderResult:
		return r.Kind
	case redisstore.RouteResult:
		return r.Kind
	case redisstore.FollowerState:
		return r.State
	case redisstore.DeadlineResult:
		return r.State
	case redisstore.IdemClaimResult:
		return r.State
	case redisstore.RepairReport:
		return fmt.Sprintf("fixed anything %v", r.Any())
	case string, bool:
		return fmt.Sprint(r)
	case int:
		return fmt.Sprintf("%d", min(r, 1))
	}
	return "ok"
}

// errKey names an error by the sentinel it is, else by its code.
func errKey(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range []error{redisstore.ErrFenced, redisstore.ErrPodBusy, redisstore.ErrNoHold, redisstore.ErrNoSession, redisstore.ErrPublishConflict, warmpool.ErrEpochLost} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return string(warmpool.ErrorCode(err))
}

// compare fails the run when the state of any scope in Redis differs from the model's,
// or when the state of the scope just changed breaks an invariant.
func (w *world) compare(after string, changed *side) {
	w.t.Helper()
	for _, s := range w.sides {
		snap, err := w.store.Snapshot(context.Background(), s.id)
		if err != nil {
			w.t.Fatal(err)
		}
		w.most = max(w.most, len(snap.Pods))
		got, want := model.Lines(snap), model.Lines(s.model.Snapshot())
		if s == changed {
			got, want = append(got, w.record(s)), append(want, s.model.Record())
			got, want = append(got, w.marks(s)...), append(want, modelMarks(s)...)
		}
		if !slices.Equal(got, want) {
			w.t.Fatalf("after %s on scope %s, scope %s differs (- redis, + model):\n%s", after, changed.id, s.id, lineDiff(got, want))
		}
		if v, err := invariant.Indexes(context.Background(), w.r.Client, w.store.Keys().Scope(s.id)); err != nil || len(v) > 0 {
			w.t.Fatalf("after %s on scope %s, the indexes of scope %s differ from what they index (%v):\n%s", after, changed.id, s.id, err, strings.Join(v, "\n"))
		}
		// a drift drops a binding behind the scripts' back, its config with it or not
		if v, err := invariant.SessionConfigs(context.Background(), w.r.Client, w.store.Keys().Scope(s.id)); !s.drifted && (err != nil || len(v) > 0) {
			w.t.Fatalf("after %s on scope %s, scope %s keeps configs of what ended (%v):\n%s", after, changed.id, s.id, err, strings.Join(v, "\n"))
		}
		if s != changed {
			continue
		}
		w.due(s)
		if s.drifted {
			continue
		}
		var versions []string
		for _, c := range s.configs {
			versions = append(versions, c.Deploy.DeployVer())
		}
		if v := s.capacity.Violations(snap, s.pools, versions, false); len(v) > 0 {
			w.t.Fatalf("after %s on scope %s: %s", after, s.id, strings.Join(v, "; "))
		}
	}
	w.compareTenants(after, changed)
}

// record reads what model.Record renders from Redis, in one round trip.
func (w *world) record(s *side) string {
	w.t.Helper()
	ctx, k := context.Background(), w.store.Keys().Scope(s.id)
	pipe := w.r.Client.Pipeline()
	cfg := pipe.HMGet(ctx, k.Config, "version", "deleted", "config")
	epoch := pipe.Exists(ctx, k.Epoch)
	index := pipe.SMembers(ctx, w.store.Keys().Scopes())
	if _, err := pipe.Exec(ctx); err != nil {
		w.t.Fatal(err)
	}
	v := cfg.Val()
	str := func(v any) string { x, _ := v.(string); return x }
	return model.RecordLine(str(v[0]), str(v[1]), v[2] != nil, epoch.Val() == 1, slices.Contains(index.Val(), s.id))
}

// marks renders the marks and cached route answers of idemRequests as Redis holds
// them, in one round trip.
func (w *world) marks(s *side) []string {
	w.t.Helper()
	ctx, k := context.Background(), w.store.Keys().Scope(s.id)
	pipe := w.r.Client.Pipeline()
	var marks, answers []*redis.StringCmd
	for _, id := range idemRequests {
		marks = append(marks, pipe.Get(ctx, k.IdemMark(id)))
		answers = append(answers, pipe.Get(ctx, k.RouteAnswer(id)))
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	var lines []string
	line := func(what, id string, get *redis.StringCmd) {
		v, err := get.Result()
		switch {
		case err == nil:
			lines = append(lines, fmt.Sprintf("%s %s = %q", what, id, v))
		case !errors.Is(err, redis.Nil):
			w.t.Fatal(err)
		}
	}
	for i, id := range idemRequests {
		line("mark", id, marks[i])
		line("route answer", id, answers[i])
	}
	return lines
}

// modelMarks renders the model's marks and route answers of idemRequests as marks does.
func modelMarks(s *side) []string {
	var lines []string
	for _, id := range idemRequests {
		if v, ok := s.model.Mark(id); ok {
			lines = append(lines, fmt.Sprintf("mark %s = %q", id, v))
		}
		if v, ok := s.model.RouteAnswer(id); ok {
			lines = append(lines, fmt.Sprintf("route answer %s = %q", id, v))
		}
	}
	return lines
}

// due runs scope_due.lua on the scope, as the sweeper does after each visit, and
// compares the due time it sets with the model's.
func (w *world) due(s *side) {
	w.t.Helper()
	at, ok, err := w.store.ScopeDue(context.Background(), s.id, w.now)
	wantAt, wantOK := s.model.Due(w.now)
	w.same("scope_due", []any{at, ok}, []any{wantAt, wantOK}, err, nil)
}

// lineDiff lists the lines only in got (-) and only in want (+).
func lineDiff(got, want []string) string {
	var b strings.Builder
	for _, l := range got {
		if !slices.Contains(want, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestDemandIsRefusedNotMisModelled: the model does not follow warm_policy demand, so
// a test cannot compare the scripts with a model that silently keeps min_idle_pods.
func TestDemandIsRefusedNotMisModelled(t *testing.T) {
	c := warmpool.DefaultScopeConfig()
	c.Pool.WarmPolicy = warmpool.WarmDemand
	err := model.NewScope("d").Publish(redisstore.ScopeRecord{ScopeID: "d", Config: c, Version: 1, DeployVer: c.Deploy.DeployVer()})
	if !errors.Is(err, model.ErrNotModelled) {
		t.Fatalf("publish of a demand scope: %v, want ErrNotModelled", err)
	}
}
