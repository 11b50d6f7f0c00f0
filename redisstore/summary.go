package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// scopeSummary reads only and needs no deadline: a late answer is as right as a
// timely one.
var scopeSummary = load("scope_summary.lua", unguarded, "config pods podver idle deploying followers sessions waiters")

// SummaryBatch is how many scopes one pipeline of ScopeSummaries reads: each
// pipeline's answers must all arrive within the client's read timeout (a second in a
// replica), which a pipeline of every scope misses when Redis is short of CPU.
const SummaryBatch = 500

// ScopeSummaries reads the pool sizes of every published scope, sorted by scope id,
// deleted ones left out: one call of scope_summary.lua a scope, in pipelines of
// SummaryBatch. It costs Redis about twice what Counts' eight commands a scope do, and
// the replica about half (one short answer a scope to read instead of eight).
// Errors: STORE_UNAVAILABLE, INTERNAL for an answer that does not parse.
func (s *Store) ScopeSummaries(ctx context.Context) ([]warmpool.ScopeSummary, error) {
	ids, err := s.ScopeIDs(ctx)
	if err != nil {
		return nil, err
	}
	sort.Strings(ids)
	out := make([]warmpool.ScopeSummary, 0, len(ids))
	for start := 0; start < len(ids); start += SummaryBatch {
		batch := ids[start:min(start+SummaryBatch, len(ids))]
		cmds, err := s.summaries(ctx, batch)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			// A pipeline does not fall back to EVAL: load the script (a restarted or
			// flushed Redis has none) and run the batch again.
			if err := scopeSummary.Load(ctx, s.rdb).Err(); err != nil {
				return nil, s.redisErr(ctx, err)
			}
			cmds, err = s.summaries(ctx, batch)
		}
		if err != nil {
			return nil, s.redisErr(ctx, err)
		}
		for i, id := range batch {
			v, err := cmds[i].Text()
			if err != nil {
				return nil, s.redisErr(ctx, err)
			}
			if v == "" {
				continue // not published, or deleted
			}
			sum, err := parseSummary(id, v)
			if err != nil {
				return nil, err
			}
			out = append(out, sum)
		}
	}
	return out, nil
}

// summaries runs scope_summary.lua for each of ids in one pipeline.
func (s *Store) summaries(ctx context.Context, ids []string) ([]*redis.Cmd, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(ids))
	for i, id := range ids {
		k := s.keys.Scope(id)
		keys, err := scopeSummary.keys(&k, nil)
		if err != nil {
			return nil, err
		}
		cmds[i] = scopeSummary.EvalSha(ctx, pipe, keys)
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

// parseSummary reads one answer of scope_summary.lua.
func parseSummary(scope, v string) (warmpool.ScopeSummary, error) {
	var n [10]int64
	ver, rest, ok := strings.Cut(v, " ")
	for i := 0; ok && i < len(n); i++ {
		var f string
		f, rest, _ = strings.Cut(rest, " ")
		var err error
		if n[i], err = strconv.ParseInt(f, 10, 64); err != nil {
			ok = false
		}
	}
	if !ok || rest != "" || ver == "" {
		return warmpool.ScopeSummary{}, &warmpool.Error{Code: warmpool.CodeInternal, Message: fmt.Sprintf("scope_summary.lua: malformed reply %q for scope %q", v, scope)}
	}
	return warmpool.ScopeSummary{ScopeCounts: warmpool.ScopeCounts{ScopeID: scope, DeployVer: ver, Version: n[0], MaxPods: n[1], Pods: n[3], Idle: n[4],
		OldPods: n[5], Sessions: n[6], Deploying: n[7], Followers: n[8], Waiters: n[9]}, PodConcurrency: n[2]}, nil
}

// SummaryPass is the summaries of every scope as one pass read them: when it ended,
// by which replica.
type SummaryPass struct {
	At     time.Time
	By     string
	Scopes []warmpool.ScopeSummary
}

// sharedVersion opens the text of a shared pass, so that a replica of another release
// that writes another layout is read as no pass at all.
const sharedVersion = "summaries/1"

// ShareSummaries stores p for the other replicas, for ttl: its text is a header line
// ("summaries/1 <at, ms> <by>") and a line a scope, its id and the fields of
// scope_summary.lua's answer. Errors: STORE_UNAVAILABLE.
func (s *Store) ShareSummaries(ctx context.Context, p SummaryPass, ttl time.Duration) error {
	var b strings.Builder
	b.Grow(64 + 80*len(p.Scopes))
	b.WriteString(sharedVersion + " " + ms(p.At) + " " + strings.ReplaceAll(p.By, "\n", " ") + "\n")
	for i := range p.Scopes {
		c := &p.Scopes[i]
		b.WriteString(c.ScopeID + " " + c.DeployVer)
		for _, n := range [...]int64{c.Version, c.MaxPods, c.PodConcurrency, c.Pods, c.Idle, c.OldPods, c.Sessions, c.Deploying, c.Followers, c.Waiters} {
			b.WriteByte(' ')
			b.WriteString(strconv.FormatInt(n, 10))
		}
		b.WriteByte('\n')
	}
	if err := s.rdb.Set(ctx, s.keys.Summaries(), b.String(), ttl).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// SharedSummaries reads the pass a replica stored with ShareSummaries; false when
// there is none (it expired), or its text is not one this release reads. Errors:
// STORE_UNAVAILABLE.
func (s *Store) SharedSummaries(ctx context.Context) (SummaryPass, bool, error) {
	v, err := s.rdb.Get(ctx, s.keys.Summaries()).Result()
	if errors.Is(err, redis.Nil) {
		return SummaryPass{}, false, nil
	}
	if err != nil {
		return SummaryPass{}, false, s.redisErr(ctx, err)
	}
	p, ok := parseShared(v)
	return p, ok, nil
}

// parseShared reads the text ShareSummaries writes.
func parseShared(v string) (SummaryPass, bool) {
	head, body, _ := strings.Cut(v, "\n")
	f := strings.SplitN(head, " ", 3)
	if len(f) != 3 || f[0] != sharedVersion {
		return SummaryPass{}, false
	}
	at, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return SummaryPass{}, false
	}
	p := SummaryPass{At: time.UnixMilli(at), By: f[2], Scopes: make([]warmpool.ScopeSummary, 0, strings.Count(body, "\n"))}
	for body != "" {
		var line string
		line, body, _ = strings.Cut(body, "\n")
		id, rest, _ := strings.Cut(line, " ")
		sum, err := parseSummary(id, rest)
		if err != nil || id == "" {
			return SummaryPass{}, false
		}
		p.Scopes = append(p.Scopes, sum)
	}
	return p, true
}
