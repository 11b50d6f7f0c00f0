package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// ScopeRecord is a scope's config as published in Redis.
type ScopeRecord struct {
	ScopeID   string
	Config    warmpool.ScopeConfig
	Version   int64
	DeployVer string
	// ChangedAt is when the config was stored (StoredConfig.UpdatedAt), for
	// ScopePublish only: a class A change under rollout "prewarm" keeps the old pods
	// taking sessions until ready_timeout_s after it.
	ChangedAt time.Time
	// Deleted is set (by ScopeAny only) when the scope is deleted: it takes nothing
	// new, and its pods are deleted as they go idle.
	Deleted bool
}

// Published is what ScopePublish writes of rec into the scope's config hash: content,
// the fields that say what the config is (its deploy fingerprint and every pool value
// routing uses), each a field and its value, which a second publish of one version
// must bring unchanged; and the deploy spec and the whole config as JSON.
func (rec ScopeRecord) Published() (content [][2]string, deploy, config string, err error) {
	d, err := json.Marshal(rec.Config.Deploy)
	if err != nil {
		return nil, "", "", err
	}
	full, err := json.Marshal(rec.Config)
	if err != nil {
		return nil, "", "", err
	}
	p := rec.Config.Pool
	ms := func(s int) string { return strconv.FormatInt(int64(s)*1000, 10) }
	cpu, mem := rec.Config.Deploy.PodRequests()
	content = [][2]string{
		{"deploy_ver", rec.DeployVer},
		{"tenant", rec.Config.TenantOf(rec.ScopeID)},
		{"cpu_m", strconv.FormatInt(cpu, 10)},
		{"memory_b", strconv.FormatInt(mem, 10)},
		{"max_pods", strconv.Itoa(p.MaxPods())},
		{"parallel", strconv.Itoa(p.ParallelDeploys())},
		{"pod_concurrency", strconv.Itoa(p.PodConcurrency)},
		{"min_idle", strconv.Itoa(p.MinIdlePods)},
		{"pod_ttl_ms", ms(p.PodTTLS)},
		{"session_ttl_ms", ms(p.SessionTTLS)},
		{"queue_size", strconv.Itoa(p.QueueSize)},
		{"wait_ms", ms(p.WaitTimeoutS)},
		{"hold_ttl_ms", ms(p.HoldTTLS)},
		{"recycle", p.Recycle},
		{"max_served", strconv.Itoa(p.MaxSessionsPerPod)},
		{"rollout", p.Rollout},
		{"warm_policy", p.WarmPolicy},
		{"max_idle", strconv.Itoa(p.MaxIdlePods)},
		{"ready_ms", ms(rec.Config.Deploy.ReadyTimeoutS)},
		{"report_ms", ms(rec.Config.Agent.ReportIntervalS)},
		{"sessions_from_reports", flag(rec.Config.Agent.SessionsFromReports)},
	}
	return content, string(d), string(full), nil
}

// RetiredVer is what the pool records as the deploy_ver of a retired pod (one of a
// deleted scope, PodState.Retired): never a scope's deploy_ver (lib/config.lua's
// RETIRED).
const RetiredVer = "retired"

// ErrPublishConflict is in the chain of the error ScopePublish returns when the
// scope's version is published already with other content: two replicas stored
// different configs under one version, so they do not share one config store. The
// error's code is INTERNAL: a deployment that is never expected.
var ErrPublishConflict = errors.New("published already with other content")

// ScopePublish adds the scope to the global index and its tenant's, then runs scope_publish.lua: it
// writes the scope's config to Redis so every replica routes with it at once. An older
// version never overwrites a newer one, and the same version with other content
// (deploy_ver or a pool field) is refused with ErrPublishConflict. A new scope gets
// its epoch key when the keyspace itself is live, so a scope never becomes routable in
// the middle of a rebuild. The index is written first, as asynq writes its global sets
// before its scripts: the index lives outside the scope's slot (on a Cluster, on
// another node), and a publish that fails after it (a crash, a cancelled caller, the
// scope's node down) leaves an index entry without a config, which readers skip and
// the full pass removes, never a served scope that the index lacks. A publish refused
// as deleted takes out the entry it added.
func (s *Store) ScopePublish(ctx context.Context, rec ScopeRecord) error {
	k := s.keys.Scope(rec.ScopeID)
	content, deploy, full, err := rec.Published()
	if err != nil {
		return err
	}
	epoch, err := s.rdb.Get(ctx, s.keys.Epoch()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return s.redisErr(ctx, err)
	}
	added, err := s.ScopeIndex(ctx, rec.ScopeID)
	if err != nil {
		return err
	}
	// The tenant's index too, first for the same reason (TenantScopes).
	if err := s.rdb.SAdd(ctx, s.keys.TenantScopes(rec.Config.TenantOf(rec.ScopeID)), rec.ScopeID).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	args := []any{rec.Version, epoch, rec.ChangedAt.UnixMilli(), len(content)}
	for _, kv := range content {
		args = append(args, kv[0], kv[1])
	}
	args = append(args,
		"version", rec.Version,
		"deploy", deploy,
		"config", full,
		// A plain field, for the watch's read of a scope's probe period (ProbePeriods).
		"probe_ms", int64(rec.Config.Pool.ProbePeriodS)*1000,
	)
	r, err := s.call(ctx, scopePublish, k, nil, args...)
	if err != nil {
		return err
	}
	// "newer": a newer version was there, which is as good. "deleted": the scope was
	// deleted at this version or a later one, which the store says too by now.
	switch r.oneOf(0, "published", "newer", "deleted", "conflict") {
	case "deleted":
		if err := r.err(); err != nil || !added {
			return err
		}
		_, err = s.ScopeUnindex(ctx, rec.ScopeID)
		return err
	case "conflict":
		field, have := r.str(1), r.str(2)
		if err := r.err(); err != nil {
			return err
		}
		return fmt.Errorf("%w: %w", ErrPublishConflict, warmpool.Errorf(warmpool.CodeInternal,
			"scope %q v%d is published already with %s %s, this one has %v: the replicas do not share one config store",
			rec.ScopeID, rec.Version, field, have, valueOf(content, field)))
	}
	if err := r.err(); err != nil {
		return err
	}
	return s.governPublished(ctx, rec.Config.TenantOf(rec.ScopeID), rec.ScopeID)
}

// governPublished makes a scope just published governed by its tenant's quotas, when
// the tenant has any, and by the total cap when there is one, before the publish
// answers: the tenants job would only get to it at its next pass (quota.go); under
// max_idle_pods it keeps the warm pods it has until that pass gives it its share.
func (s *Store) governPublished(ctx context.Context, tenant, scope string) error {
	l, ok, err := s.TenantLimits(ctx, tenant)
	if err != nil || (!ok && !s.capped()) {
		return err
	}
	if gov := s.governs(l); gov != [2]bool{} {
		if _, _, err := s.balanceScope(ctx, tenant, scope, gov, true); err != nil {
			return err
		}
	}
	if l.IdlePods >= 0 {
		_, err = s.quotaIdle(ctx, scope, "+")
	}
	return err
}

// ScopeIndex adds scope to the global index, and reports whether it was missing.
// Errors: STORE_UNAVAILABLE.
func (s *Store) ScopeIndex(ctx context.Context, scope string) (bool, error) {
	n, err := s.rdb.SAdd(ctx, s.keys.Scopes(), scope).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	return n == 1, nil
}

// ScopeUnindex takes scope out of the global index unless its config hash has a
// config (it is live, or deleted with pods left to drain): a publish that made it
// live between the removal and the check put it back, and it goes back. It reports
// whether the scope was in the index and is out of it now. Errors: STORE_UNAVAILABLE.
func (s *Store) ScopeUnindex(ctx context.Context, scope string) (bool, error) {
	index := s.keys.Scopes()
	n, err := s.rdb.SRem(ctx, index, scope).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	served, err := s.rdb.HExists(ctx, s.keys.Scope(scope).Config, "config").Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	if served {
		if err := s.rdb.SAdd(ctx, index, scope).Err(); err != nil {
			return false, s.redisErr(ctx, err)
		}
	}
	return n == 1 && !served, nil
}

// valueOf is the value of field among content's pairs, or nil.
func valueOf(content [][2]string, field string) any {
	for _, kv := range content {
		if kv[0] == field {
			return kv[1]
		}
	}
	return nil
}

// Scope reads the published config of a live scope. Errors: SCOPE_NOT_FOUND (also
// for a deleted scope), STORE_UNAVAILABLE (also when Redis lost its data).
func (s *Store) Scope(ctx context.Context, scope string) (ScopeRecord, error) {
	rec, err := s.ScopeAny(ctx, scope)
	if err == nil && rec.Deleted {
		return ScopeRecord{}, s.noScope(ctx, scope)
	}
	return rec, err
}

// ScopeAny reads the published config of a scope, live or deleted (Deleted set); a
// deleted scope that was forgotten (ScopeForget) is not found. Errors:
// SCOPE_NOT_FOUND, STORE_UNAVAILABLE (also when Redis lost its data).
func (s *Store) ScopeAny(ctx context.Context, scope string) (ScopeRecord, error) {
	v, err := s.rdb.HMGet(ctx, s.keys.Scope(scope).Config, "config", "version", "deploy_ver", "deleted").Result()
	if err != nil {
		return ScopeRecord{}, s.redisErr(ctx, err)
	}
	raw, _ := v[0].(string)
	if raw == "" {
		return ScopeRecord{}, s.noScope(ctx, scope)
	}
	rec := ScopeRecord{ScopeID: scope}
	if err := json.Unmarshal([]byte(raw), &rec.Config); err != nil {
		return ScopeRecord{}, fmt.Errorf("scope %q: published config: %w", scope, err)
	}
	ver, _ := v[1].(string)
	if rec.Version, err = strconv.ParseInt(ver, 10, 64); err != nil {
		return ScopeRecord{}, fmt.Errorf("scope %q: published version: %w", scope, err)
	}
	rec.DeployVer, _ = v[2].(string)
	rec.Deleted = v[3] != nil
	return rec, nil
}

// ScopeDelete runs scope_delete.lua: the scope, deleted at version (the latest stored),
// takes nothing new from now on, on every replica; its pods are retired and deleted
// as they go idle (the sweeper's due work, or Drain). It returns how many pods the
// scope had. Errors: SCOPE_NOT_FOUND (not published, deleted already, or a version
// newer than version is published: the scope stays), STORE_UNAVAILABLE. The
// followers of its deploys in flight find a note until noteDeadline.
func (s *Store) ScopeDelete(ctx context.Context, scope string, version int64, noteDeadline time.Time) (int, error) {
	r, err := s.call(ctx, scopeDelete, s.keys.Scope(scope), nil, version, ms(noteDeadline), s.publishCmd(), Broadcast)
	if err != nil {
		return 0, err
	}
	switch r.oneOf(0, "deleted", "unknown", "newer") {
	case "unknown":
		return 0, warmpool.Errorf(warmpool.CodeScopeNotFound, "scope %q is not published, or deleted already", scope)
	case "newer":
		return 0, warmpool.Errorf(warmpool.CodeScopeNotFound, "scope %q has a version newer than v%d published", scope, version)
	}
	n := r.count(1)
	return n, r.err()
}

// ScopeForget runs scope_forget.lua: a deleted scope with no pod and no deploy left
// loses every key but its tombstone, and leaves the global index. It reports whether
// it did; a live scope, or one with something left, is kept. Errors:
// STORE_UNAVAILABLE.
func (s *Store) ScopeForget(ctx context.Context, scope string) (bool, error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, scopeForget, k, nil)
	if err != nil {
		return false, err
	}
	if r.oneOf(0, "forgotten", "live", "busy") != "forgotten" {
		return false, r.err()
	}
	if err := r.err(); err != nil {
		return false, err
	}
	if err := s.rdb.ZRem(ctx, s.keys.DueIndex(DueShard(scope)), scope).Err(); err != nil {
		return true, s.redisErr(ctx, err)
	}
	// A publish that made the scope live again since the script added it to the index
	// first: it stays.
	_, err = s.ScopeUnindex(ctx, scope)
	return true, err
}

// ScopeIDs lists the published scopes.
func (s *Store) ScopeIDs(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.keys.Scopes()).Result()
	if err != nil {
		return nil, s.redisErr(ctx, err)
	}
	return ids, nil
}

// Bootstrap writes the global epoch when it is missing and gives every published scope
// its epoch key, in one pipeline (each full pass calls it: a round trip per scope
// would be a pass's longest stretch without a pause). Call it on an empty Redis, or
// after a rebuild restored the pool. It returns whether the keyspace was already live.
func (s *Store) Bootstrap(ctx context.Context, epoch string) (bool, error) {
	fresh, err := s.rdb.SetNX(ctx, s.keys.Epoch(), epoch, 0).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	if fresh {
		// A keyspace this release built (empty, or rebuilt after a loss) has its
		// indexes: every script wrote them.
		if err := s.MarkLayout(ctx); err != nil {
			return false, err
		}
	}
	cur, err := s.rdb.Get(ctx, s.keys.Epoch()).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	ids, err := s.ScopeIDs(ctx)
	if err != nil {
		return false, err
	}
	pipe := s.rdb.Pipeline()
	for _, id := range ids {
		pipe.SetNX(ctx, s.keys.Scope(id).Epoch, cur, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, s.redisErr(ctx, err)
	}
	return !fresh, nil
}

// IndexLayout is the layout of a scope's keys these scripts keep: "1", the indexes of
// lib/index.lua (free, warm, busy, surplus, podsess, podclaims, rooms, open and their
// prev sets).
const IndexLayout = "1"

// LayoutCurrent reports whether the keyspace's layout mark is IndexLayout: false for a
// keyspace an older release wrote, whose scopes lack the indexes.
func (s *Store) LayoutCurrent(ctx context.Context) (bool, error) {
	v, err := s.rdb.Get(ctx, s.keys.Layout()).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	return v == IndexLayout, nil
}

// MarkLayout records that every scope's keys have IndexLayout.
func (s *Store) MarkLayout(ctx context.Context) error {
	if err := s.rdb.Set(ctx, s.keys.Layout(), IndexLayout, 0).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// EpochLive reports whether the global epoch key exists.
func (s *Store) EpochLive(ctx context.Context) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.keys.Epoch()).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	return n == 1, nil
}

// RepairReport is what scope_repair.lua fixed.
type RepairReport struct {
	SlotCounts, Sessions, Claims, Waiters, Deploys int
}

// Any reports whether anything was fixed.
func (r RepairReport) Any() bool { return r != RepairReport{} }

// ScopeRepair runs scope_repair.lua over one scope: expired leftovers always go; with
// recount, every slot count is recomputed from the sessions and claims too.
func (s *Store) ScopeRepair(ctx context.Context, scope string, now, noteDeadline time.Time, recount bool) (RepairReport, error) {
	r, err := s.call(ctx, scopeRepair, s.keys.Scope(scope), nil,
		append([]any{ms(now), ms(noteDeadline), flag(recount)}, s.handoffArgs(now)...)...)
	if err != nil {
		return RepairReport{}, err
	}
	rep := RepairReport{SlotCounts: r.count(0), Sessions: r.count(1), Claims: r.count(2), Waiters: r.count(3), Deploys: r.count(4)}
	return rep, r.err()
}
