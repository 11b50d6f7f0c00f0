// Package model is a plain-Go model of one scope's state in Redis (pods, slots, claims,
// deploy leases, follower rooms, sessions, waiters, holds) and of every script of the
// lua package that reads or changes it, rule for rule, with the same arguments and
// answers as the redisstore.Store wrappers. Model-based tests run random sequences of script
// calls through a Store on a real redis-server and through the model side by side and
// compare the answers and the whole state after every step: a script that drifts from
// the rules the model writes down shows up as the first step where the two disagree.
//
// The indexes the scripts keep so that their choices do not scan the scope (free, warm,
// surplus, podsess, rooms, open and the others of lib/index.lua) are not modelled: the
// model makes each choice by scanning, as the index must answer it, and the tests
// check with invariant.Indexes that each index equals what it indexes.
//
// Every time is the caller's, in milliseconds, as the scripts take it from ARGV; the
// model never reads a clock. What lives outside the scripts' clock (the TTLs of
// tombstones and of cached route answers, minutes of real time) is taken not to pass.
package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// Scope is the modelled state of one scope: one field per key of the scope, in the
// types the scripts give them.
type Scope struct {
	id      string
	config  map[string]string // the published config HASH; nil until published
	epoch   bool              // the scope's epoch key exists
	indexed bool              // the scope is in the global index of scopes
	fence   int64
	qseq    int64
	pods    zset              // pod -> registered at
	podVer  map[string]string // pod -> deploy_ver
	podInfo map[string]string // pod -> pod JSON
	slots   map[string]int64  // pod -> sessions + claims
	idle    zset              // pod -> idle since
	deploys zset              // deploy member -> lease deadline
	rooms   zset              // "<deploy>|<claim>" -> deadline
	claims  zset              // claim -> deadline
	claimOf map[string]string // claim -> pod | "!reason" | "!lost:reason"
	sess    map[string]string // session -> pod
	sessExp zset              // session -> expiry
	fixed   map[string]bool   // sessions whose expiry is fixed (RouteArgs.FixedTTL)
	waiters zset              // waiter -> deadline
	queue   zset              // waiter -> arrival number
	health  map[string]int64  // pod -> failed probes in a row
	gone    map[string]bool   // tombstones of purged pods
	idem    map[string]string // request id -> cached route answer, "<fingerprint>\n<flag>\n<pod>\n<pod JSON>"
	marks   map[string]string // request id -> its mark, "<fingerprint>\n<owner token>\n<answer>" (answer "" while it runs)
	agents  map[string]string // "<pod>" -> spared until (ms), "<pod>|miss" -> sessions its last report left out
	backoff backoff           // the refill backoff
	served  map[string]int64  // pod -> slots handed out over its life (max_sessions_per_pod)
	// tenants are the escrows the scope's quota steps go through (nil: none joined);
	// ask is the refusal the last script run left for want of allowance (callQuota).
	tenants *Tenants
	ask     *quotaAsk
}

// NewScope returns the model of a scope that was never published.
func NewScope(id string) *Scope {
	return &Scope{
		id: id, pods: zset{}, podVer: map[string]string{}, podInfo: map[string]string{}, slots: map[string]int64{},
		idle: zset{}, deploys: zset{}, rooms: zset{}, claims: zset{}, claimOf: map[string]string{},
		sess: map[string]string{}, sessExp: zset{}, waiters: zset{}, queue: zset{}, health: map[string]int64{},
		gone: map[string]bool{}, idem: map[string]string{}, marks: map[string]string{}, agents: map[string]string{},
		served: map[string]int64{}, fixed: map[string]bool{},
	}
}

// LoseEpoch models the loss of the scope's epoch key: what a Redis that lost its data
// looks like to the scripts that check it.
func (s *Scope) LoseEpoch() { s.epoch = false }

// Bootstrap models redisstore.Store.Bootstrap on a live keyspace: the scope's epoch key is
// written when missing, if the global index lists the scope.
func (s *Scope) Bootstrap() {
	if s.indexed {
		s.epoch = true
	}
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func (s *Scope) cfgInt(field string) int64 {
	n, _ := strconv.ParseInt(s.config[field], 10, 64)
	return n
}

// published reports whether the config HASH holds a config: not when the scope was
// never published, nor when only the tombstone of a forgotten scope is left.
func (s *Scope) published() bool {
	_, ok := s.config["deploy_ver"]
	return ok
}

// deleted reports whether the scope is deleted (its config HASH has the mark).
func (s *Scope) deleted() bool {
	_, ok := s.config["deleted"]
	return ok
}

// publishedRefused is what lib/config.lua's published_config answers instead of the
// config, deleted or not: NO_SCOPE (here SCOPE_NOT_FOUND, the keyspace being live) or
// EPOCH_LOST; nil when the scripts go on.
func (s *Scope) publishedRefused() error {
	if !s.published() {
		return s.noScope()
	}
	if !s.epoch {
		return warmpool.ErrEpochLost
	}
	return nil
}

// refused is what lib/config.lua's scope_config answers instead of a live scope's
// config: publishedRefused's answers, and NO_SCOPE for a deleted scope.
func (s *Scope) refused() error {
	if err := s.publishedRefused(); err != nil {
		return err
	}
	if s.deleted() {
		return s.noScope()
	}
	return nil
}

func (s *Scope) noScope() error {
	return warmpool.Errorf(warmpool.CodeScopeNotFound, "scope %q has no config", s.id)
}

// malformed is the INTERNAL error of a reply the wrapper cannot read.
func malformed(script, why string) error {
	return &warmpool.Error{Code: warmpool.CodeInternal, Message: script + ": malformed reply: " + why}
}

// decodePod reads a pod's JSON record as the wrapper does.
func decodePod(id, raw string) (warmpool.Pod, error) {
	var p warmpool.Pod
	if raw == "" {
		return p, fmt.Errorf("pod %q has no info", id)
	}
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return p, err
	}
	p.ID = id
	return p, nil
}

// ErrNotModelled is the error of Publish for a config the model does not follow:
// warm_policy "demand", whose target comes from decayed counts of takes and frees and
// the measured deploy time (idle_target in lua/lib/demand.lua), which the model does
// not keep; its tests publish warm_policy "static", under which the scripts keep
// min_idle_pods as before.
var ErrNotModelled = errors.New("model: warm_policy demand is not modelled")

// Publish models redisstore.Store.ScopePublish with a live keyspace: with tenants
// joined, the scope indexed under its tenant first and governed after.
func (s *Scope) Publish(rec redisstore.ScopeRecord) error {
	if rec.Config.Pool.WarmPolicy == warmpool.WarmDemand {
		return ErrNotModelled
	}
	content, deploy, full, err := rec.Published()
	if err != nil {
		return err
	}
	tenant := rec.Config.TenantOf(rec.ScopeID)
	if s.tenants != nil {
		s.tenants.indexScope(tenant, s)
	}
	if s.deleted() && s.cfgInt("deleted") >= rec.Version {
		return nil
	}
	if err := s.publish(rec, content, deploy, full); err != nil || s.tenants == nil {
		return err
	}
	return s.tenants.governPublished(tenant, s)
}

// publish is scope_publish.lua's part of Publish, on a config not deleted at its
// version.
func (s *Scope) publish(rec redisstore.ScopeRecord, content [][2]string, deploy, full string) error {
	s.indexed = true
	if s.config != nil {
		cur := s.cfgInt("version")
		if cur > rec.Version {
			return nil
		}
		if cur == rec.Version {
			for _, kv := range content {
				if have, ok := s.config[kv[0]]; ok && have != kv[1] {
					return fmt.Errorf("%w: %w", redisstore.ErrPublishConflict, warmpool.Errorf(warmpool.CodeInternal, "conflict on %s", kv[0]))
				}
			}
		}
	} else {
		s.config = map[string]string{}
	}
	if old, ok := s.config["deploy_ver"]; old != rec.DeployVer {
		s.backoff = backoff{}
		if ok && rec.Config.Pool.Rollout == warmpool.RolloutPrewarm {
			s.config["prewarm_ver"] = old
			s.config["prewarm_until"] = strconv.FormatInt(ms(rec.ChangedAt)+int64(rec.Config.Deploy.ReadyTimeoutS)*1000, 10)
		} else {
			delete(s.config, "prewarm_ver")
			delete(s.config, "prewarm_until")
		}
	}
	if s.config["tenant"] != rec.Config.TenantOf(rec.ScopeID) {
		// the allowances the tenant before granted are not the new one's
		delete(s.config, "q_pods")
		delete(s.config, "q_sess")
	}
	for _, kv := range content {
		s.config[kv[0]] = kv[1]
	}
	s.config["version"] = strconv.FormatInt(rec.Version, 10)
	s.config["deploy"] = deploy
	s.config["config"] = full
	delete(s.config, "deleted")
	s.epoch = true
	return nil
}

// ScopeDelete models redisstore.Store.ScopeDelete (scope_delete.lua).
func (s *Scope) ScopeDelete(version int64, noteDeadline time.Time) (int, error) {
	if !s.epoch {
		return 0, warmpool.ErrEpochLost
	}
	if _, ok := s.config["config"]; !ok || s.deleted() || s.cfgInt("version") > version {
		return 0, s.noScope()
	}
	v := strconv.FormatInt(version, 10)
	s.config["deleted"], s.config["version"] = v, v
	for pod := range s.pods {
		s.podVer[pod] = redisstore.RetiredVer
	}
	for _, d := range s.deploys.asc() {
		delete(s.deploys, d)
		s.failFollowers(d, "the scope was deleted", ms(noteDeadline), false)
	}
	clear(s.waiters)
	clear(s.queue)
	return len(s.pods), nil
}

// ScopeForget models redisstore.Store.ScopeForget (scope_forget.lua): a deleted scope with no
// pod and no deploy keeps only its tombstone (the config's version and deleted mark),
// its fencing counter, and what lives outside its keys (tombstones of purged pods,
// cached route answers); it leaves the global index.
func (s *Scope) ScopeForget() bool {
	if !s.deleted() || len(s.pods)+len(s.deploys) > 0 {
		return false
	}
	s.config = map[string]string{"version": s.config["version"], "deleted": s.config["deleted"]}
	s.epoch, s.indexed, s.qseq = false, false, 0
	for _, m := range []map[string]string{s.podVer, s.podInfo, s.claimOf, s.sess, s.agents} {
		clear(m)
	}
	for _, z := range []zset{s.idle, s.rooms, s.claims, s.sessExp, s.waiters, s.queue} {
		clear(z)
	}
	clear(s.slots)
	clear(s.health)
	clear(s.served)
	clear(s.fixed)
	s.backoff = backoff{}
	return true
}

// handoff is lib/handoff.lua's handoff: where freed slots go. ver is the scope's
// current deploy_ver ("" with no config: nothing is handed on), pc and maxPods its
// limits.
type handoff struct {
	ver     string
	prev    string // the version a prewarm serves ("": none)
	pc      int64
	maxPods int64
	now     int64
	grant   int64
}

func (s *Scope) handoff(now time.Time) *handoff {
	return &handoff{ver: s.config["deploy_ver"], prev: s.prewarmVer(ms(now)), pc: s.cfgInt("pod_concurrency"), maxPods: s.cfgInt("max_pods"),
		now: ms(now), grant: ms(now.Add(redisstore.GrantTTL))}
}

// prewarmVer is lib/surplus.lua's prewarm_ver: the version whose pods a rollout's
// prewarm still lets take new sessions at now, "" when none.
func (s *Scope) prewarmVer(now int64) string {
	if v, ok := s.config["prewarm_ver"]; ok && now < s.cfgInt("prewarm_until") {
		return v
	}
	return ""
}

// serves is lib/surplus.lua's serves: the pod takes new slots (of ver, or of prev, the
// prewarm's version).
func (s *Scope) serves(pod, ver, prev string) bool {
	v, ok := s.podVer[pod]
	return ok && (v == ver || (prev != "" && v == prev))
}

// serve is lib/served.lua's serve: n slots taken on pod count toward
// max_sessions_per_pod; the one that reaches it retires the pod. It reports whether the
// pod takes no more.
func (s *Scope) serve(pod string, n int64) bool {
	limit := s.cfgInt("max_served")
	if limit == 0 || n <= 0 {
		return false
	}
	s.served[pod] += n
	if s.served[pod] < limit {
		return false
	}
	if v := s.podVer[pod]; v != redisstore.RetiredVer && v != redisstore.DrainingVer {
		s.podVer[pod] = redisstore.RetiredVer
	}
	return true
}

// surplus is what the key surplus holds (lib/surplus.lua, lib/index.lua): the current
// version's pods beyond max_pods. The pods of another version count first, then the
// current version's idle pods (the first to go idle first), then its busy ones (the
// last registered first).
func (s *Scope) surplus(ver string, maxPods int64) map[string]bool {
	set := map[string]bool{}
	excess := int64(len(s.pods)) - maxPods
	if excess <= 0 {
		return set
	}
	var current []string
	for _, pod := range s.pods.asc() {
		if v, ok := s.podVer[pod]; ok && v == ver {
			current = append(current, pod)
		} else {
			excess--
		}
	}
	for _, pod := range s.idle.asc() {
		if excess <= 0 {
			return set
		}
		if v, ok := s.podVer[pod]; ok && v == ver {
			set[pod] = true
			excess--
		}
	}
	for i := len(current) - 1; i >= 0 && excess > 0; i-- {
		if !set[current[i]] {
			set[current[i]] = true
			excess--
		}
	}
	return set
}

func (s *Scope) dropWaiters(q *handoff) {
	for _, w := range s.waiters.upTo(q.now) {
		delete(s.queue, w)
		delete(s.waiters, w)
	}
}

func (s *Scope) nextWaiter(q *handoff) string {
	for {
		w := s.queue.first()
		if w == "" {
			return ""
		}
		delete(s.queue, w)
		if d, ok := s.waiters[w]; ok && d > q.now {
			return w
		}
		delete(s.waiters, w)
	}
}

func (s *Scope) grant(q *handoff, w, pod string) {
	s.serve(pod, 1)
	s.claims[w] = q.grant
	s.claimOf[w] = pod
}

// handOff passes a slot being freed on pod, which holds n slots with it, to the oldest
// waiter: only on a pod of the current version that is not over pod_concurrency nor
// beyond max_pods.
func (s *Scope) handOff(q *handoff, pod string, n int64) bool {
	if q == nil || q.ver == "" || n > q.pc {
		return false
	}
	if !s.serves(pod, q.ver, q.prev) || s.surplus(q.ver, q.maxPods)[pod] {
		return false
	}
	w := s.nextWaiter(q)
	if w == "" {
		return false
	}
	s.grant(q, w, pod)
	return true
}

func (s *Scope) freeSlot(pod string, now int64, idleOnZero bool, q *handoff) int64 {
	if _, ok := s.pods[pod]; !ok {
		return -1
	}
	if held := s.slots[pod]; s.handOff(q, pod, held) {
		return held
	}
	s.slots[pod]--
	n := s.slots[pod]
	if n <= 0 {
		n = 0
		s.slots[pod] = 0
		if idleOnZero && s.config["recycle"] == warmpool.RecycleDelete && s.serves(pod, s.config["deploy_ver"], s.prewarmVer(now)) {
			s.podVer[pod] = redisstore.RetiredVer
		}
		if _, idle := s.idle[pod]; idleOnZero && !idle {
			s.idle[pod] = now
		}
	}
	return n
}

func holdsPod(v string) bool { return v != "" && !strings.HasPrefix(v, "!") }

func (s *Scope) releaseClaim(claim string, now int64, q *handoff) (string, int64) {
	pod := s.claimOf[claim]
	delete(s.claims, claim)
	delete(s.claimOf, claim)
	if holdsPod(pod) {
		return pod, s.freeSlot(pod, now, true, q)
	}
	return "", -1
}

func (s *Scope) expireClaims(now int64, q *handoff) int {
	gone := s.claims.upTo(now)
	for _, c := range gone {
		s.releaseClaim(c, now, q)
	}
	return len(gone)
}

// noteLost marks the note of a lost deploy (LOST in lib/claimpod.lua).
const noteLost = "!lost:"

func (s *Scope) failFollowers(member, reason string, deadline int64, lost bool) int {
	prefix := member + "|"
	note := "!" + reason
	if lost {
		note = noteLost + reason
	}
	n := 0
	for _, f := range s.rooms.asc() {
		if c, ok := strings.CutPrefix(f, prefix); ok {
			delete(s.rooms, f)
			s.claims[c] = deadline
			s.claimOf[c] = note
			n++
		}
	}
	return n
}

const (
	reasonLeaderGone = "the deploy lease expired: its leader is gone"
	reasonRoomTimout = "timed out waiting for the deploy"
	// noSlot is lib/claimpod.lua's NO_SLOT: the note of a follower its pod had no slot
	// for.
	noSlot = "!no slot left for it on the pod: pod_concurrency was lowered while it deployed"
)

func (s *Scope) expirePool(now, noteDeadline int64, q *handoff) {
	s.expireClaims(now, q)
	for _, d := range s.deploys.upTo(now) {
		delete(s.deploys, d)
		s.failFollowers(d, reasonLeaderGone, noteDeadline, true)
	}
	for _, f := range s.rooms.upTo(now) {
		delete(s.rooms, f)
	}
}

func (s *Scope) evictSession(sid string, now int64, q *handoff) string {
	pod, ok := s.sess[sid]
	delete(s.sess, sid)
	delete(s.sessExp, sid)
	delete(s.fixed, sid)
	if ok {
		s.freeSlot(pod, now, true, q)
	}
	return pod
}

// deployNumber is the fence of a deploy member ("<fence>" or "<fence>w").
func deployNumber(d string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(d, "w"), 10, 64)
	return n
}

func (s *Scope) spec() (warmpool.DeploySpec, error) {
	var spec warmpool.DeploySpec
	if err := json.Unmarshal([]byte(s.config["deploy"]), &spec); err != nil {
		return spec, malformed("deploy spec", err.Error())
	}
	return spec, nil
}

// PodAcquire models Store.PodAcquire: pod_acquire.lua, run again after a grant of
// the tenant's escrow when the scope's allowance refused it (callQuota).
func (s *Scope) PodAcquire(a redisstore.AcquireArgs) (redisstore.AcquireResult, error) {
	return callQuota(s, func() (redisstore.AcquireResult, error) { return s.podAcquire(a) })
}

// podAcquire is one run of pod_acquire.lua.
func (s *Scope) podAcquire(a redisstore.AcquireArgs) (redisstore.AcquireResult, error) {
	if err := s.refused(); err != nil {
		return redisstore.AcquireResult{}, err
	}
	now, claim := ms(a.Now), a.Claim
	ver, pc := s.config["deploy_ver"], s.cfgInt("pod_concurrency")
	q := s.handoff(a.Now)
	s.expirePool(now, ms(a.ClaimDeadline), q)

	maxPods := s.cfgInt("max_pods")
	surplus := s.surplus(ver, maxPods)
	for _, pod := range s.idle.desc() {
		if s.serves(pod, ver, q.prev) && !surplus[pod] {
			delete(s.idle, pod)
			s.slots[pod]++
			s.serve(pod, 1)
			s.claims[claim] = ms(a.ClaimDeadline)
			s.claimOf[claim] = pod
			p, err := decodePod(pod, s.podInfo[pod])
			if err != nil {
				return redisstore.AcquireResult{}, malformed("pod_acquire.lua", err.Error())
			}
			return redisstore.AcquireResult{Kind: redisstore.AcquireWarm, Pod: p}, nil
		}
	}

	deploys := s.deploys.asc()
	numbered := append([]string(nil), deploys...)
	sortByNumber(numbered)
	rooms := s.rooms.asc()
	if int64(len(s.pods)+len(deploys)) > maxPods {
		numbered = nil
	}
	for _, d := range numbered {
		capacity := pc - 1
		if strings.HasSuffix(d, "w") {
			capacity = pc
		}
		if limit := s.cfgInt("max_served"); limit > 0 {
			capacity = min(capacity, limit-(pc-capacity))
		}
		if capacity <= 0 {
			continue
		}
		member := d + "|" + claim
		deadline := now + s.cfgInt("ready_ms") + a.RoomMargin.Milliseconds()
		s.rooms[member] = deadline
		n := int64(1)
		for _, f := range rooms {
			if strings.HasPrefix(f, d+"|") {
				n++
			}
		}
		if n <= capacity {
			return redisstore.AcquireResult{Kind: redisstore.AcquireFollower, Deploy: d, Room: member, RoomDeadline: time.UnixMilli(deadline)}, nil
		}
		delete(s.rooms, member)
	}

	if int64(len(s.pods)+len(deploys)) < maxPods && int64(len(deploys)) < s.cfgInt("parallel") {
		if b, held := s.backoffRefusal(now, len(deploys)); held {
			return redisstore.AcquireResult{Kind: redisstore.AcquireBackoff, Backoff: b, Deploys: len(deploys)}, nil
		}
		if s.ask = s.quotaRefusal("pods", int64(len(s.pods)+len(deploys))); s.ask != nil {
			return redisstore.AcquireResult{}, nil
		}
		s.fence++
		member := strconv.FormatInt(s.fence, 10)
		s.deploys[member] = ms(a.LeaseDeadline)
		spec, err := s.spec()
		return redisstore.AcquireResult{Kind: redisstore.AcquireDeploy, Deploy: member, Fence: s.fence, Spec: spec, ReportIntervalS: s.reportIntervalS()}, err
	}
	return redisstore.AcquireResult{Kind: redisstore.AcquireMaxReached, Pods: len(s.pods), Deploys: len(deploys)}, nil
}

func sortByNumber(ds []string) {
	for i := 1; i < len(ds); i++ {
		for j := i; j > 0 && deployNumber(ds[j]) < deployNumber(ds[j-1]); j-- {
			ds[j], ds[j-1] = ds[j-1], ds[j]
		}
	}
}

// PodRegister models pod_register.lua.
func (s *Scope) PodRegister(deploy string, pod warmpool.Pod, leaderClaim string, now, claimDeadline time.Time) (int, error) {
	if !s.epoch {
		return 0, warmpool.ErrEpochLost
	}
	info, err := json.Marshal(pod)
	if err != nil {
		return 0, err
	}
	t := ms(now)
	if _, ok := s.pods[pod.ID]; ok {
		return int(s.slots[pod.ID]), nil
	}
	if lease, ok := s.deploys[deploy]; !ok || lease <= t {
		return 0, redisstore.ErrFenced
	}
	delete(s.deploys, deploy)
	s.pods[pod.ID] = t
	s.podVer[pod.ID] = pod.DeployVer
	s.podInfo[pod.ID] = string(info)
	ver, published := s.config["deploy_ver"]
	if published && ver == pod.DeployVer {
		s.backoff = backoff{}
	}
	pc, n := s.cfgInt("pod_concurrency"), int64(0)
	if leaderClaim != "" {
		s.claims[leaderClaim] = ms(claimDeadline)
		s.claimOf[leaderClaim] = pod.ID
		n++
	}
	for _, f := range s.rooms.asc() {
		if c, ok := strings.CutPrefix(f, deploy+"|"); ok {
			delete(s.rooms, f)
			s.claims[c] = ms(claimDeadline)
			if n < pc {
				s.claimOf[c] = pod.ID
				n++
			} else {
				s.claimOf[c] = noSlot
			}
		}
	}
	spent := s.serve(pod.ID, n)
	if published && ver == pod.DeployVer && s.prewarmVer(t) != "" {
		ready := int64(0)
		for _, v := range s.podVer {
			if v == ver {
				ready++
			}
		}
		if ready >= max(1, s.cfgInt("min_idle")) {
			delete(s.config, "prewarm_ver")
			delete(s.config, "prewarm_until")
		}
	}
	if published && ver == pod.DeployVer && !spent && !s.surplus(ver, s.cfgInt("max_pods"))[pod.ID] {
		q := s.handoff(now)
		for n < pc && s.podVer[pod.ID] == ver {
			w := s.nextWaiter(q)
			if w == "" {
				break
			}
			s.grant(q, w, pod.ID)
			n++
		}
	}
	s.slots[pod.ID] = n
	if n == 0 {
		s.idle[pod.ID] = t
	}
	return int(n), nil
}

// PodPurge models Store.PodPurge: pod_purge.lua, then the pod's allowance given back
// (settle). The sessions it returns are in no particular order
// (the script reads a HASH).
func (s *Scope) PodPurge(pod, reason string, idleSince *time.Time) ([]string, error) {
	if !s.epoch {
		return nil, warmpool.ErrEpochLost
	}
	if idleSince != nil {
		if since, ok := s.idle[pod]; !ok || since != ms(*idleSince) {
			return nil, redisstore.ErrPodBusy
		}
	}
	out := []string{}
	for sid, p := range s.sess {
		if p == pod {
			delete(s.sess, sid)
			delete(s.sessExp, sid)
			delete(s.fixed, sid)
			out = append(out, sid)
		}
	}
	for c, p := range s.claimOf {
		if p == pod {
			s.claimOf[c] = "!pod " + pod + " is gone: " + reason
		}
	}
	delete(s.pods, pod)
	delete(s.podVer, pod)
	delete(s.podInfo, pod)
	delete(s.slots, pod)
	delete(s.idle, pod)
	delete(s.health, pod)
	delete(s.served, pod)
	delete(s.agents, pod)
	delete(s.agents, pod+"|miss")
	s.gone[pod] = true
	s.settle(true)
	return out, nil
}

// fill is what pod_placeholder.lua answers of the scope's pool at now (ms) after its
// hand-off and expiry: PlaceholderDeploy when it starts a warm deploy.
func (s *Scope) fill(now int64) redisstore.PlaceholderResult {
	ver := s.config["deploy_ver"]
	surplus := s.surplus(ver, s.cfgInt("max_pods"))
	warm := int64(0)
	for pod := range s.idle {
		if s.podVer[pod] == ver && !surplus[pod] {
			warm++
		}
	}
	for d := range s.deploys {
		if strings.HasSuffix(d, "w") {
			warm++
		}
	}
	minIdle := s.cfgInt("min_idle")
	if s.prewarmVer(now) != "" {
		minIdle = max(1, minIdle)
	}
	switch {
	case warm >= minIdle:
		return redisstore.PlaceholderResult{Kind: redisstore.PlaceholderEnough}
	case int64(len(s.pods)+len(s.deploys)) >= s.cfgInt("max_pods"):
		return redisstore.PlaceholderResult{Kind: redisstore.PlaceholderMaxReached}
	case int64(len(s.deploys)) >= s.cfgInt("parallel"):
		return redisstore.PlaceholderResult{Kind: redisstore.PlaceholderBusy}
	}
	if b, held := s.backoffRefusal(now, len(s.deploys)); held {
		return redisstore.PlaceholderResult{Kind: redisstore.PlaceholderBackoff, Backoff: b}
	}
	return redisstore.PlaceholderResult{Kind: redisstore.PlaceholderDeploy}
}

// PodPlaceholder models Store.PodPlaceholder: pod_placeholder.lua, through callQuota;
// a refill the tenant's quota refuses answers PlaceholderQuota.
func (s *Scope) PodPlaceholder(now, leaseDeadline, noteDeadline time.Time) (redisstore.PlaceholderResult, error) {
	res, err := callQuota(s, func() (redisstore.PlaceholderResult, error) {
		return s.podPlaceholder(now, leaseDeadline, noteDeadline)
	})
	if warmpool.ErrorCode(err) == warmpool.CodeQuotaExceeded {
		return redisstore.PlaceholderResult{Kind: redisstore.PlaceholderQuota}, nil
	}
	return res, err
}

// podPlaceholder is one run of pod_placeholder.lua.
func (s *Scope) podPlaceholder(now, leaseDeadline, noteDeadline time.Time) (redisstore.PlaceholderResult, error) {
	if err := s.refused(); err != nil {
		return redisstore.PlaceholderResult{}, err
	}
	q := s.handoff(now)
	s.expirePool(ms(now), ms(noteDeadline), q)
	if res := s.fill(ms(now)); res.Kind != redisstore.PlaceholderDeploy {
		return res, nil
	}
	if s.ask = s.quotaRefusal("pods", int64(len(s.pods)+len(s.deploys))); s.ask != nil {
		return redisstore.PlaceholderResult{}, nil
	}
	s.fence++
	member := strconv.FormatInt(s.fence, 10) + "w"
	s.deploys[member] = ms(leaseDeadline)
	spec, err := s.spec()
	return redisstore.PlaceholderResult{Kind: redisstore.PlaceholderDeploy, Deploy: member, Fence: s.fence, Spec: spec, ReportIntervalS: s.reportIntervalS()}, err
}

// PodAdopt models Store.PodAdopt: pod_adopt.lua, and in a scope governed in pods the
// pod taken from its tenant's escrow first (given back unless the adoption raised
// the allowance).
func (s *Scope) PodAdopt(pod warmpool.Pod, now time.Time, sessionsUnknown bool) (string, error) {
	st, _, err := s.podAdopt(pod, now, sessionsUnknown, false)
	if err != nil || st != "escrow" {
		return st, err
	}
	tenant := s.config["tenant"]
	if err := s.tenants.tenantGrant(tenant, s.id, "pods", 1, s.cfgInt("cpu_m"), s.cfgInt("memory_b"), true); err != nil {
		return "", err
	}
	st, raised, err := s.podAdopt(pod, now, sessionsUnknown, true)
	if err != nil || st != redisstore.AdoptAdopted || !raised {
		s.tenants.tenantCredit(tenant, s.id, "pods", 1)
	}
	return st, err
}

// podAdopt is one run of pod_adopt.lua (took: the caller took the pod from the escrow);
// raised says the adoption raised the scope's allowance.
func (s *Scope) podAdopt(pod warmpool.Pod, now time.Time, sessionsUnknown, took bool) (string, bool, error) {
	if !s.published() || s.deleted() {
		return "", false, s.noScope()
	}
	info, err := json.Marshal(pod)
	if err != nil {
		return "", false, err
	}
	switch {
	case hasMember(s.pods, pod.ID):
		if sessionsUnknown {
			s.holdFreeSlots(pod.ID, ms(now))
		}
		return redisstore.AdoptKnown, false, nil
	case s.gone[pod.ID]:
		return redisstore.AdoptGone, false, nil
	case int64(len(s.pods)+len(s.deploys)) >= s.cfgInt("max_pods"):
		return redisstore.AdoptFull, false, nil
	}
	_, governed := s.config["q_pods"]
	if governed && !took {
		return "escrow", false, nil
	}
	t := ms(now)
	s.pods[pod.ID] = t
	s.podVer[pod.ID] = pod.DeployVer
	s.podInfo[pod.ID] = string(info)
	if governed {
		s.config["q_pods"] = strconv.FormatInt(s.cfgInt("q_pods")+1, 10)
	}
	if !sessionsUnknown {
		s.slots[pod.ID] = 0
		s.idle[pod.ID] = t
		return redisstore.AdoptAdopted, governed, nil
	}
	pc := s.cfgInt("pod_concurrency")
	for n := int64(1); n <= pc; n++ {
		claim := fmt.Sprintf("adopted:%s:%d", pod.ID, n)
		s.claims[claim] = t + s.cfgInt("session_ttl_ms")
		s.claimOf[claim] = pod.ID
	}
	s.slots[pod.ID] = pc
	return redisstore.AdoptAdopted, governed, nil
}

// holdFreeSlots holds the free slots of a known pod whose sessions are unknown with
// claims "adopted:<pod>:<n>" until session_ttl_s from now, as pod_adopt.lua does.
func (s *Scope) holdFreeSlots(pod string, now int64) {
	pc := s.cfgInt("pod_concurrency")
	slots := s.slots[pod]
	for n := int64(1); slots < pc && n <= 2*pc; n++ {
		claim := fmt.Sprintf("adopted:%s:%d", pod, n)
		if _, held := s.claims[claim]; held {
			continue
		}
		s.claims[claim] = now + s.cfgInt("session_ttl_ms")
		s.claimOf[claim] = pod
		slots++
	}
	s.slots[pod] = slots
	delete(s.idle, pod)
}

func hasMember(z zset, m string) bool {
	_, ok := z[m]
	return ok
}

// PodHealth models pod_health.lua.
func (s *Scope) PodHealth(pod string, ok bool) int {
	if ok || !hasMember(s.pods, pod) {
		delete(s.health, pod)
		return 0
	}
	s.health[pod]++
	return int(s.health[pod])
}

// FenceRaise models fence_raise.lua.
func (s *Scope) FenceRaise(atLeast int64) {
	s.fence = max(s.fence, atLeast)
}

// DeployExtend models deploy_extend.lua.
func (s *Scope) DeployExtend(deploy string, now, deadline time.Time) bool {
	if lease, ok := s.deploys[deploy]; !ok || lease <= ms(now) {
		return false
	}
	s.deploys[deploy] = ms(deadline)
	return true
}

// DeployAbort models Store.DeployAbort: deploy_abort.lua, then the deploy's allowance
// given back (settle).
func (s *Scope) DeployAbort(deploy, ver, reason string, lost bool, now, noteDeadline time.Time) int {
	delete(s.deploys, deploy)
	if !lost {
		s.backoffFailed(ver, reason, ms(now))
	}
	n := s.failFollowers(deploy, reason, ms(noteDeadline), lost)
	s.settle(true)
	return n
}

// FollowerWait models follower_wait.lua.
func (s *Scope) FollowerWait(deploy, room, claim string, now time.Time) (redisstore.FollowerState, error) {
	if pod, ok := s.claimOf[claim]; ok {
		if pod == noSlot {
			return redisstore.FollowerState{State: redisstore.FollowerRetry}, nil
		}
		if reason, lost := strings.CutPrefix(pod, noteLost); lost {
			return redisstore.FollowerState{State: redisstore.FollowerLost, Reason: reason}, nil
		}
		if reason, failed := strings.CutPrefix(pod, "!"); failed {
			return redisstore.FollowerState{State: redisstore.FollowerFailed, Reason: reason}, nil
		}
		p, err := decodePod(pod, s.podInfo[pod])
		if err != nil {
			return redisstore.FollowerState{}, malformed("follower_wait.lua", err.Error())
		}
		return redisstore.FollowerState{State: redisstore.FollowerReady, Pod: p}, nil
	}
	t := ms(now)
	if lease, ok := s.deploys[deploy]; !ok || lease <= t {
		delete(s.rooms, room)
		return redisstore.FollowerState{State: redisstore.FollowerLost, Reason: reasonLeaderGone}, nil
	}
	if d, ok := s.rooms[room]; !ok || d <= t {
		delete(s.rooms, room)
		return redisstore.FollowerState{State: redisstore.FollowerFailed, Reason: reasonRoomTimout}, nil
	}
	return redisstore.FollowerState{State: redisstore.FollowerWaiting}, nil
}

// FollowerLeave models follower_leave.lua.
func (s *Scope) FollowerLeave(room, claim string, now time.Time) {
	delete(s.rooms, room)
	s.releaseClaim(claim, ms(now), s.handoff(now))
}

// ClaimRelease models claim_release.lua.
func (s *Scope) ClaimRelease(claim string, now time.Time) (string, int) {
	pod, n := s.releaseClaim(claim, ms(now), s.handoff(now))
	return pod, int(n)
}

// HoldTouch models hold_touch.lua.
func (s *Scope) HoldTouch(hold, pod string, now time.Time) (time.Time, error) {
	if err := s.publishedRefused(); err != nil {
		return time.Time{}, err
	}
	t := ms(now)
	d, ok := s.claims[hold]
	if s.claimOf[hold] != pod || !ok || d <= t {
		return time.Time{}, redisstore.ErrNoHold
	}
	until := t + s.cfgInt("hold_ttl_ms")
	s.claims[hold] = until
	return time.UnixMilli(until), nil
}

// HoldRelease models hold_release.lua.
func (s *Scope) HoldRelease(hold, pod string, now time.Time) (bool, error) {
	if err := s.publishedRefused(); err != nil {
		return false, err
	}
	q := s.handoff(now)
	s.expireClaims(ms(now), q)
	if s.claimOf[hold] != pod {
		return false, redisstore.ErrNoHold
	}
	s.releaseClaim(hold, ms(now), q)
	return hasMember(s.idle, pod), nil
}

// SessionRoute models Store.SessionRoute: session_route.lua through callQuota; a cached answer expires only by ExpireRouteAnswer.
func (s *Scope) SessionRoute(a redisstore.RouteArgs) (redisstore.RouteResult, error) {
	return callQuota(s, func() (redisstore.RouteResult, error) { return s.sessionRoute(a) })
}

// sessionRoute is one run of session_route.lua.
func (s *Scope) sessionRoute(a redisstore.RouteArgs) (redisstore.RouteResult, error) {
	if err := s.refused(); err != nil {
		return redisstore.RouteResult{}, err
	}
	now, sid, claim, waiter := ms(a.Now), a.Session, a.Claim, a.Waiter
	ver, pc := s.config["deploy_ver"], s.cfgInt("pod_concurrency")
	q := s.handoff(a.Now)
	prev := q.prev

	leave := func(used string) {
		if waiter == "" {
			return
		}
		delete(s.waiters, waiter)
		delete(s.queue, waiter)
		if _, ok := s.claimOf[waiter]; used != waiter && ok {
			s.releaseClaim(waiter, now, q)
		}
	}
	idem, fp := a.RequestID != "", redisstore.RouteFingerprint(sid)
	if idem {
		cached, ok := s.idem[a.RequestID]
		mark, marked := s.marks[a.RequestID]
		other := (ok && otherRequest(cached, fp)) || (marked && otherRequest(mark, fp))
		if ok || other {
			if claim != "" {
				s.releaseClaim(claim, now, q)
			}
			leave("")
			if other {
				return redisstore.RouteResult{}, warmpool.Errorf(warmpool.CodeIdempotencyMismatch, "request id %q names another request", a.RequestID)
			}
			parts := strings.SplitN(cached, "\n", 4)
			return served(redisstore.RouteReplay, parts[1], parts[2], parts[3], sid)
		}
	}
	refreshed := now + s.cfgInt("session_ttl_ms")
	expiry := refreshed
	if a.FixedTTL > 0 {
		expiry = now + a.FixedTTL.Milliseconds()
	}
	s.expireClaims(now, q)

	answer := func(kind, flag, pod string) (redisstore.RouteResult, error) {
		info := s.podInfo[pod]
		if _, ok := s.idem[a.RequestID]; idem && !ok {
			s.idem[a.RequestID] = fp + "\n" + flag + "\n" + pod + "\n" + info
		}
		return served(kind, flag, pod, info, sid)
	}
	bind := func(pod, used string) (redisstore.RouteResult, error) {
		leave(used)
		s.sess[sid] = pod
		s.sessExp[sid] = expiry
		s.setFixed(sid, a.FixedTTL > 0)
		delete(s.idle, pod)
		return answer(redisstore.RouteNew, "1", pod)
	}

	if bound, ok := s.sess[sid]; ok {
		if e, ok := s.sessExp[sid]; ok && e > now {
			if !s.fixed[sid] {
				s.sessExp[sid] = refreshed
			}
			if claim != "" {
				s.releaseClaim(claim, now, q)
			}
			leave("")
			return answer(redisstore.RouteBound, "0", bound)
		}
		s.evictSession(sid, now, q)
	}

	if s.ask = s.quotaRefusal("sessions", int64(len(s.sess))); s.ask != nil {
		leave("")
		return redisstore.RouteResult{}, nil
	}

	for _, c := range []string{claim, waiter} {
		if c == "" {
			continue
		}
		pod, ok := s.claimOf[c]
		if holdsPod(pod) && (s.serves(pod, ver, prev) || s.podVer[pod] == redisstore.RetiredVer) {
			delete(s.claims, c)
			delete(s.claimOf, c)
			return bind(pod, c)
		}
		if ok {
			s.releaseClaim(c, now, q)
		}
	}

	for pod := s.firstFit(ver, prev, pc); pod != ""; pod = s.firstFit(ver, prev, pc) {
		w := s.nextWaiter(q)
		s.slots[pod]++
		delete(s.idle, pod)
		if w == "" || w == waiter {
			s.serve(pod, 1)
			return bind(pod, "")
		}
		s.grant(q, w, pod)
	}

	if waiter == "" {
		return redisstore.RouteResult{Kind: redisstore.RouteNone}, nil
	}
	if !hasMember(s.queue, waiter) {
		if len(s.queue) == 0 && !a.Join {
			return redisstore.RouteResult{Kind: redisstore.RouteNone}, nil
		}
		size, wait := s.cfgInt("queue_size"), s.cfgInt("wait_ms")
		if size == 0 || wait == 0 {
			return redisstore.RouteResult{Kind: redisstore.RouteNoWait}, nil
		}
		if !hasMember(s.waiters, waiter) {
			s.dropWaiters(q)
			if int64(len(s.waiters)) >= size {
				return redisstore.RouteResult{Kind: redisstore.RouteFull}, nil
			}
			s.waiters[waiter] = now + wait
		}
		s.qseq++
		s.queue[waiter] = s.qseq
	}
	deadline, ok := s.waiters[waiter]
	if !ok {
		return redisstore.RouteResult{}, malformed("session_route.lua", "a queued caller with no deadline")
	}
	return redisstore.RouteResult{Kind: redisstore.RouteQueued, Rank: s.queue.rank(waiter), Deadline: time.UnixMilli(deadline)}, nil
}

// served is the answer of a route that bound (or had bound) the session.
func served(kind, flag, pod, info, sid string) (redisstore.RouteResult, error) {
	p, err := decodePod(pod, info)
	if err != nil {
		return redisstore.RouteResult{}, malformed("session_route.lua", err.Error())
	}
	return redisstore.RouteResult{Kind: kind, New: flag == "1", Pod: p, Session: sid}, nil
}

// firstFit is the first pod, in the order they registered, that takes a new slot: of
// ver (or prev), not surplus, with fewer than pc slots; "" when none. The route asks
// again for every slot it takes, as session_route.lua reads its index (lib/index.lua)
// afresh: a pod retired on the way leaves the surplus, and the one it lets in takes
// slots too.
func (s *Scope) firstFit(ver, prev string, pc int64) string {
	surplus := s.surplus(ver, s.cfgInt("max_pods"))
	for _, pod := range s.pods.asc() {
		if s.serves(pod, ver, prev) && !surplus[pod] && s.slots[pod] < pc {
			return pod
		}
	}
	return ""
}

// SessionTouch models session_touch.lua.
func (s *Scope) SessionTouch(sid string, now time.Time) (string, error) {
	if err := s.publishedRefused(); err != nil {
		return "", err
	}
	t := ms(now)
	e, ok := s.sessExp[sid]
	if !ok {
		return redisstore.TouchUnknown, nil
	}
	if e > t {
		if !s.fixed[sid] {
			s.sessExp[sid] = t + s.cfgInt("session_ttl_ms")
		}
		return redisstore.TouchTouched, nil
	}
	s.evictSession(sid, t, s.handoff(now))
	return redisstore.TouchExpired, nil
}

// SessionEnd models session_end.lua.
func (s *Scope) SessionEnd(sid string, now time.Time) (bool, error) {
	if err := s.publishedRefused(); err != nil {
		return false, err
	}
	if _, ok := s.sess[sid]; !ok {
		return false, nil
	}
	s.evictSession(sid, ms(now), s.handoff(now))
	return true, nil
}

// SessionEvict models session_evict.lua.
func (s *Scope) SessionEvict(now time.Time, limit int) (evicted, claims int, err error) {
	if !s.epoch {
		return 0, 0, warmpool.ErrEpochLost
	}
	t, q := ms(now), s.handoff(now)
	gone := s.sessExp.upTo(t)
	if len(gone) > limit {
		gone = gone[:limit]
	}
	for _, sid := range gone {
		s.evictSession(sid, t, q)
	}
	return len(gone), s.expireClaims(t, q), nil
}

// SessionGet models session_get.lua.
func (s *Scope) SessionGet(sid string, now time.Time) (redisstore.SessionBinding, error) {
	if s.config == nil {
		return redisstore.SessionBinding{}, s.noScope()
	}
	pod, ok := s.sess[sid]
	e, live := s.sessExp[sid]
	if !ok || !live || e <= ms(now) {
		return redisstore.SessionBinding{}, redisstore.ErrNoSession
	}
	p, err := decodePod(pod, s.podInfo[pod])
	if err != nil {
		return redisstore.SessionBinding{}, malformed("session_get.lua", err.Error())
	}
	return redisstore.SessionBinding{Pod: p, ExpiresAt: time.UnixMilli(e)}, nil
}

// WaiterLeave models waiter_leave.lua.
func (s *Scope) WaiterLeave(waiter string, now time.Time) {
	delete(s.waiters, waiter)
	delete(s.queue, waiter)
	s.releaseClaim(waiter, ms(now), s.handoff(now))
}

// ScopeRepair models scope_repair.lua.
func (s *Scope) ScopeRepair(now, noteDeadline time.Time, recount bool) (redisstore.RepairReport, error) {
	if !s.epoch {
		return redisstore.RepairReport{}, warmpool.ErrEpochLost
	}
	t := ms(now)
	rep := redisstore.RepairReport{Deploys: len(s.deploys.upTo(t)), Waiters: len(s.waiters.upTo(t))}
	q := s.handoff(now)
	s.expirePool(t, ms(noteDeadline), q)
	s.dropWaiters(q)
	for w := range s.queue {
		if !hasMember(s.waiters, w) {
			delete(s.queue, w)
			rep.Waiters++
		}
	}
	if !recount {
		return rep, nil
	}
	count := map[string]int64{}
	for pod := range s.pods {
		count[pod] = 0
	}
	for sid, pod := range s.sess {
		if _, ok := count[pod]; ok {
			count[pod]++
		} else {
			delete(s.sess, sid)
			delete(s.sessExp, sid)
			rep.Sessions++
		}
	}
	for c, pod := range s.claimOf {
		if !holdsPod(pod) {
			continue
		}
		if _, ok := count[pod]; ok {
			count[pod]++
		} else {
			delete(s.claimOf, c)
			delete(s.claims, c)
			rep.Claims++
		}
	}
	for pod := range s.slots {
		if _, ok := count[pod]; !ok {
			delete(s.slots, pod)
			rep.SlotCounts++
		}
	}
	for pod, n := range count {
		if have, ok := s.slots[pod]; !ok || have != n {
			s.slots[pod] = n
			rep.SlotCounts++
		}
		if n > 0 {
			delete(s.idle, pod)
		}
	}
	for pod := range s.idle {
		if _, ok := count[pod]; !ok {
			delete(s.idle, pod)
		}
	}
	return rep, nil
}

// Snapshot is the state as redisstore.Store.Snapshot reads it.
func (s *Scope) Snapshot() redisstore.Snapshot {
	snap := redisstore.Snapshot{
		Deploys: times(s.deploys), Followers: times(s.rooms), ClaimPod: copyMap(s.claimOf), Queued: len(s.waiters),
		Claims: times(s.claims), Sessions: copyMap(s.sess), SessExp: times(s.sessExp), Fixed: slices.Sorted(maps.Keys(s.fixed)), Waiters: times(s.waiters),
		Queue: map[string]int64{}, Fence: s.fence, Version: s.cfgInt("version"), Backoff: s.backoffState(),
	}
	if v, ok := s.config["prewarm_ver"]; ok {
		snap.Prewarm = redisstore.Prewarm{Ver: v, Until: time.UnixMilli(s.cfgInt("prewarm_until"))}
	}
	for w, n := range s.queue {
		snap.Queue[w] = n
	}
	claims := map[string]int{}
	for _, pod := range s.claimOf {
		claims[pod]++
	}
	for _, id := range s.pods.asc() {
		p, err := decodePod(id, s.podInfo[id])
		if err != nil {
			p = warmpool.Pod{ID: id, ScopeID: s.id}
		}
		st := redisstore.PodState{Pod: p, Slots: int(s.slots[id]), Claims: claims[id], RegisteredAt: time.UnixMilli(s.pods[id]),
			Retired: s.podVer[id] == redisstore.RetiredVer, Draining: s.podVer[id] == redisstore.DrainingVer, Served: int(s.served[id])}
		if since, ok := s.idle[id]; ok {
			st.Idle, st.IdleSince = true, time.UnixMilli(since)
		}
		snap.Pods = append(snap.Pods, st)
	}
	return snap
}

func times(z zset) map[string]time.Time {
	out := make(map[string]time.Time, len(z))
	for m, v := range z {
		out[m] = time.UnixMilli(v)
	}
	return out
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// DriftSlots models a write outside the scripts (a stray or lost write after a
// failover): the pod's slot count set to n.
func (s *Scope) DriftSlots(pod string, n int64) { s.slots[pod] = n }

// DriftUnbind models a lost write: the session's binding gone, its expiry kept.
func (s *Scope) DriftUnbind(sid string) { delete(s.sess, sid) }

// DriftIdle models a stray write: the pod put in the idle set at since.
func (s *Scope) DriftIdle(pod string, since time.Time) { s.idle[pod] = ms(since) }

// IdleSince is when a pod went idle, false when it is not idle: what the sweeper
// passes to a conditional purge.
func (s *Scope) IdleSince(pod string) (time.Time, bool) {
	since, ok := s.idle[pod]
	return time.UnixMilli(since), ok
}

// Lines renders a snapshot as sorted lines, one fact each, so that two snapshots
// compare as text and their difference reads as the facts that differ.
func Lines(snap redisstore.Snapshot) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for i, p := range snap.Pods {
		add("pod %s #%d ver=%s retired=%v draining=%v slots=%d claims=%d idle=%v since=%d registered=%d sse=%s served=%d",
			p.Pod.ID, i, p.Pod.DeployVer, p.Retired, p.Draining, p.Slots, p.Claims, p.Idle, msOrZero(p.IdleSince), p.RegisteredAt.UnixMilli(), p.Pod.SSEURL, p.Served)
	}
	zs := []struct {
		name string
		m    map[string]time.Time
	}{{"deploy", snap.Deploys}, {"room", snap.Followers}, {"claim", snap.Claims}, {"sexp", snap.SessExp}, {"waiter", snap.Waiters}}
	for _, z := range zs {
		for k, v := range z.m {
			add("%s %s %d", z.name, k, v.UnixMilli())
		}
	}
	for k, v := range snap.ClaimPod {
		add("claimpod %s %s", k, v)
	}
	for k, v := range snap.Sessions {
		add("session %s %s", k, v)
	}
	for _, sid := range snap.Fixed {
		add("fixed %s", sid)
	}
	for k, v := range snap.Queue {
		add("queue %s %d", k, v)
	}
	add("queued %d", snap.Queued)
	add("fence %d", snap.Fence)
	if p := snap.Prewarm; p.Ver != "" {
		add("prewarm ver=%s until=%d", p.Ver, p.Until.UnixMilli())
	}
	if b := snap.Backoff; b.Failures > 0 {
		add("backoff failures=%d until=%d error=%s", b.Failures, b.Until.UnixMilli(), b.LastError)
	}
	slices.Sort(out)
	return out
}

func msOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Due models scope_due.lua: when the scope's next sweep work falls due, false when
// nothing is. That is the earliest session expiry, claim, deploy lease, room entry
// or waiter deadline; now for an idle pod of another deploy_ver than the scope's or
// beyond max_pods; an idle pod of the scope's deploy_ver beyond the newest
// min_idle_pods pod_ttl_s after it went idle; now for a refill that PodPlaceholder
// would start.
func (s *Scope) Due(now time.Time) (time.Time, bool) {
	var due int64
	found := false
	at := func(t int64) {
		if !found || t < due {
			due, found = t, true
		}
	}
	for _, z := range []zset{s.sessExp, s.claims, s.deploys, s.rooms, s.waiters} {
		if m := z.first(); m != "" {
			at(z[m])
		}
	}
	if ver, ok := s.config["deploy_ver"]; ok {
		keep, ttl := s.cfgInt("min_idle"), s.cfgInt("pod_ttl_ms")
		surplus := s.surplus(ver, s.cfgInt("max_pods"))
		prev := s.prewarmVer(ms(now))
		for _, pod := range s.idle.desc() {
			switch v, ok := s.podVer[pod]; {
			case ok && prev != "" && v == prev:
				at(s.cfgInt("prewarm_until"))
			case !ok || v != ver || surplus[pod]:
				at(ms(now))
			case keep > 0:
				keep--
			default:
				at(s.idle[pod] + ttl)
			}
		}
		if !s.deleted() && s.fill(ms(now)).Kind == redisstore.PlaceholderDeploy {
			at(ms(now))
		}
	}
	if s.backoff.failures > 0 && s.backoff.until > ms(now) {
		at(s.backoff.until)
	}
	if !found {
		return time.Time{}, false
	}
	return time.UnixMilli(due), true
}

// Record renders what Lines leaves out of the scope's config HASH and keys: its
// version, its deleted mark, whether it holds a config, and whether the scope has its
// epoch key and is in the global index.
func (s *Scope) Record() string {
	return RecordLine(s.config["version"], s.config["deleted"], s.published(), s.epoch, s.indexed)
}

// RecordLine is the line Record renders, for the same facts read from Redis.
func RecordLine(version, deleted string, published, epoch, indexed bool) string {
	return fmt.Sprintf("version=%s deleted=%s published=%v epoch=%v indexed=%v", version, deleted, published, epoch, indexed)
}

// otherRequest reports whether v, a request id's mark or route answer, names a request
// of another fingerprint than fp.
func otherRequest(v, fp string) bool {
	first, _, _ := strings.Cut(v, "\n")
	return first != fp
}

// IdemClaim models idem_claim.lua on one request id of the scope (a key's ttl, real
// time, is taken not to pass; ExpireMark and ExpireRouteAnswer make it pass).
func (s *Scope) IdemClaim(requestID, fp, token string) (redisstore.IdemClaimResult, error) {
	mark, marked := s.marks[requestID]
	cached, ok := s.idem[requestID]
	if (marked && otherRequest(mark, fp)) || (ok && otherRequest(cached, fp)) {
		return redisstore.IdemClaimResult{}, warmpool.Errorf(warmpool.CodeIdempotencyMismatch, "request id %q names another request", requestID)
	}
	if !marked {
		s.marks[requestID] = fp + "\n" + token + "\n"
		return redisstore.IdemClaimResult{State: redisstore.IdemWon}, nil
	}
	if answer := strings.SplitN(mark, "\n", 3)[2]; answer != "" {
		return redisstore.IdemClaimResult{State: redisstore.IdemDone, Answer: []byte(answer)}, nil
	}
	return redisstore.IdemClaimResult{State: redisstore.IdemRunning}, nil
}

// running returns the fingerprint of the request id's mark when token owns it and its
// request still runs.
func (s *Scope) running(requestID, token string) (string, bool) {
	parts := strings.SplitN(s.marks[requestID], "\n", 3)
	if len(parts) != 3 || parts[1] != token || parts[2] != "" {
		return "", false
	}
	return parts[0], true
}

// IdemAnswer models idem_answer.lua.
func (s *Scope) IdemAnswer(requestID, token string, answer []byte) bool {
	fp, ok := s.running(requestID, token)
	if ok {
		s.marks[requestID] = fp + "\n" + token + "\n" + string(answer)
	}
	return ok
}

// IdemRelease models idem_release.lua.
func (s *Scope) IdemRelease(requestID, token string) bool {
	_, ok := s.running(requestID, token)
	if ok {
		delete(s.marks, requestID)
	}
	return ok
}

// ExpireMark models the end of a request id's mark's ttl: the mark is gone.
func (s *Scope) ExpireMark(requestID string) { delete(s.marks, requestID) }

// ExpireRouteAnswer models the end of a route answer's ttl: the answer is gone.
func (s *Scope) ExpireRouteAnswer(requestID string) { delete(s.idem, requestID) }

// Mark is the request id's mark, as Redis holds it; false when there is none.
func (s *Scope) Mark(requestID string) (string, bool) {
	v, ok := s.marks[requestID]
	return v, ok
}

// RouteAnswer is the request id's cached route answer, as Redis holds it; false when
// there is none.
func (s *Scope) RouteAnswer(requestID string) (string, bool) {
	v, ok := s.idem[requestID]
	return v, ok
}

// Idempotent models redisstore.Store.Idempotent on one request id of the scope, with fn run
// inline and token the owner token the store's call took the mark under: the first
// call of an id runs fn and keeps its answer, or frees the mark when fn fails; a later
// call of the same fingerprint replays the answer, one of another fingerprint is
// refused; a call while the first one runs gets NO_POD_AVAILABLE, as when its wait
// ends.
func (s *Scope) Idempotent(requestID, fp, token string, fn func() ([]byte, error)) ([]byte, bool, error) {
	m, err := s.IdemClaim(requestID, fp, token)
	switch {
	case err != nil:
		return nil, false, err
	case m.State == redisstore.IdemRunning:
		return nil, false, warmpool.Errorf(warmpool.CodeNoPodAvailable, "request is still running on another replica")
	case m.State == redisstore.IdemDone:
		return m.Answer, true, nil
	}
	answer, err := fn()
	if err != nil {
		s.IdemRelease(requestID, token)
		return nil, false, err
	}
	s.IdemAnswer(requestID, token, answer)
	return answer, false, nil
}
