package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// PodRef names one pod of one scope.
type PodRef struct {
	Scope string
	Pod   string
}

func (r PodRef) member() string { return r.Scope + " " + r.Pod }

// ProbeWindow moves the end of shard's probe window to now and returns the previous
// end (zero when there was none: the shard's first run, or Redis lost it), the pods
// of the shard whose last probe failed, and whether any pod of the shard is spared
// the probes by its reports (the entries of its Reported index that are behind now
// are dropped first; see Spared), in one round trip. The shard's watch runs under its
// lease, so one caller at a time moves the window. Errors: STORE_UNAVAILABLE.
func (s *Store) ProbeWindow(ctx context.Context, shard int, now time.Time) (time.Time, []PodRef, bool, error) {
	pipe := s.rdb.Pipeline()
	prev := pipe.SetArgs(ctx, s.keys.ProbeWindow(shard), ms(now), redis.SetArgs{Get: true})
	members := pipe.SMembers(ctx, s.keys.Failing(shard))
	dropped := pipe.ZRemRangeByScore(ctx, s.keys.Reported(shard), "-inf", ms(now))
	reporting := pipe.ZCard(ctx, s.keys.Reported(shard))
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	if err := prev.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return time.Time{}, nil, false, s.redisErr(ctx, err)
	}
	for _, err := range []error{members.Err(), dropped.Err(), reporting.Err()} {
		if err != nil {
			return time.Time{}, nil, false, s.redisErr(ctx, err)
		}
	}
	var since time.Time
	if v, err := prev.Result(); err == nil {
		if t, perr := strconv.ParseInt(v, 10, 64); perr == nil {
			since = time.UnixMilli(t)
		}
	}
	refs := make([]PodRef, 0, len(members.Val()))
	for _, m := range members.Val() {
		if scope, pod, ok := strings.Cut(m, " "); ok {
			refs = append(refs, PodRef{Scope: scope, Pod: pod})
		}
	}
	return since, refs, reporting.Val() > 0, nil
}

// MarkFailing adds a pod to its shard's set of pods whose last probe failed, before
// the failure is counted (pod_health.lua), so that a count is never left without an
// entry that makes its recovery reset it. Errors: STORE_UNAVAILABLE.
func (s *Store) MarkFailing(ctx context.Context, ref PodRef) error {
	if err := s.rdb.SAdd(ctx, s.keys.Failing(DueShard(ref.Scope)), ref.member()).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// ClearFailing takes pods of one shard out of its set of failing pods: they recovered
// (their count was reset) or are gone. Errors: STORE_UNAVAILABLE.
func (s *Store) ClearFailing(ctx context.Context, shard int, refs []PodRef) error {
	if len(refs) == 0 {
		return nil
	}
	members := make([]any, len(refs))
	for i, r := range refs {
		members[i] = r.member()
	}
	if err := s.rdb.SRem(ctx, s.keys.Failing(shard), members...).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// PodKnown reports whether the pod is registered in its scope's pool (a read only):
// the sweeper buries a pod the driver reports dead only when Redis knows it, and a
// leader whose register got no answer deletes its pod only when Redis does not.
// Errors: STORE_UNAVAILABLE.
func (s *Store) PodKnown(ctx context.Context, scope, pod string) (bool, error) {
	err := s.rdb.ZScore(ctx, s.keys.Scope(scope).Pods, pod).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil
	}
	return false, s.redisErr(ctx, err)
}

// ProbePeriods reads the probe periods (pool.probe_period_s) of the published scopes
// among scopes, in one round trip: the plain field probe_ms of each scope's config
// hash. A scope published by a release that did not write it has its config document
// read and decoded instead, in a second round trip. A scope not published is left
// out. Errors: STORE_UNAVAILABLE.
func (s *Store) ProbePeriods(ctx context.Context, scopes []string) (map[string]time.Duration, error) {
	out := make(map[string]time.Duration, len(scopes))
	if len(scopes) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	plain := make([]*redis.StringCmd, len(scopes))
	for i, id := range scopes {
		plain[i] = pipe.HGet(ctx, s.keys.Scope(id).Config, "probe_ms")
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	var old []string
	for i, cmd := range plain {
		v, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			old = append(old, scopes[i])
			continue
		}
		if err != nil {
			return nil, s.redisErr(ctx, err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("scope %q: published probe_ms %q: %w", scopes[i], v, err)
		}
		out[scopes[i]] = time.Duration(n) * time.Millisecond
	}
	if len(old) == 0 {
		return out, nil
	}
	pipe = s.rdb.Pipeline()
	docs := make([]*redis.StringCmd, len(old))
	for i, id := range old {
		docs[i] = pipe.HGet(ctx, s.keys.Scope(id).Config, "config")
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range docs {
		doc, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue // not published
		}
		if err != nil {
			return nil, s.redisErr(ctx, err)
		}
		var cfg warmpool.ScopeConfig
		if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
			return nil, fmt.Errorf("scope %q: published config: %w", old[i], err)
		}
		out[old[i]] = time.Duration(cfg.Pool.ProbePeriodS) * time.Second
	}
	return out, nil
}
