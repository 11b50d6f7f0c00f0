package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The E2B front door's sandboxes (package e2b). A sandbox is a session of its
// template's scope whose session id is the sandbox id; its record says which scope,
// when it started and its metadata, so that a call naming only the sandbox finds its
// scope with one read. The records are a small index kept outside the scripts, as
// the global index of scopes is (three keys under one hash tag, written together in
// a MULTI); the session in the scope's keys stays the truth of whether the sandbox
// lives and when it ends, and a record outliving its session is dropped by the
// front door when it meets it, or pruned past its deadline.

// Sandbox is the record of one E2B sandbox.
type Sandbox struct {
	ID       string
	Scope    string
	Started  time.Time
	Metadata map[string]string
}

// sandboxRecord is a Sandbox as its record holds it.
type sandboxRecord struct {
	Scope    string            `json:"scope"`
	Started  int64             `json:"started"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// SandboxAdd records a sandbox, with the deadline past which SandboxPrune may drop
// it. Errors: STORE_UNAVAILABLE.
func (s *Store) SandboxAdd(ctx context.Context, sb Sandbox, deadline time.Time) error {
	raw, err := json.Marshal(sandboxRecord{Scope: sb.Scope, Started: sb.Started.UnixMilli(), Metadata: sb.Metadata})
	if err != nil {
		return fmt.Errorf("sandbox record: %w", err)
	}
	k := s.keys
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, k.SandboxRecords(), sb.ID, raw)
	pipe.ZAdd(ctx, k.SandboxStarts(), redis.Z{Score: float64(sb.Started.UnixMilli()), Member: sb.ID})
	pipe.ZAdd(ctx, k.SandboxDeadlines(), redis.Z{Score: float64(deadline.UnixMilli()), Member: sb.ID})
	if _, err := pipe.Exec(ctx); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// SandboxGet reads a sandbox's record; false when there is none. Errors:
// STORE_UNAVAILABLE.
func (s *Store) SandboxGet(ctx context.Context, id string) (Sandbox, bool, error) {
	raw, err := s.rdb.HGet(ctx, s.keys.SandboxRecords(), id).Result()
	if errors.Is(err, redis.Nil) {
		return Sandbox{}, false, nil
	}
	if err != nil {
		return Sandbox{}, false, s.redisErr(ctx, err)
	}
	sb, err := decodeSandbox(id, raw)
	return sb, err == nil, err
}

func decodeSandbox(id, raw string) (Sandbox, error) {
	var r sandboxRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: malformed record: %w", id, err)
	}
	return Sandbox{ID: id, Scope: r.Scope, Started: time.UnixMilli(r.Started), Metadata: r.Metadata}, nil
}

// SandboxDeadline moves the deadline of a recorded sandbox (nothing when it has no
// record). Errors: STORE_UNAVAILABLE.
func (s *Store) SandboxDeadline(ctx context.Context, id string, deadline time.Time) error {
	err := s.rdb.ZAddXX(ctx, s.keys.SandboxDeadlines(), redis.Z{Score: float64(deadline.UnixMilli()), Member: id}).Err()
	if err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// SandboxRemove drops the records of sandboxes. Errors: STORE_UNAVAILABLE.
func (s *Store) SandboxRemove(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	k := s.keys
	pipe := s.rdb.TxPipeline()
	pipe.HDel(ctx, k.SandboxRecords(), ids...)
	pipe.ZRem(ctx, k.SandboxStarts(), members...)
	pipe.ZRem(ctx, k.SandboxDeadlines(), members...)
	if _, err := pipe.Exec(ctx); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// SandboxPrune drops up to limit records whose deadline is before before, the oldest
// first, and returns how many it dropped. Errors: STORE_UNAVAILABLE.
func (s *Store) SandboxPrune(ctx context.Context, before time.Time, limit int) (int, error) {
	ids, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.keys.SandboxDeadlines(), Start: "-inf",
		Stop: "(" + ms(before), ByScore: true, Count: int64(limit)}).Result()
	if err != nil {
		return 0, s.redisErr(ctx, err)
	}
	return len(ids), s.SandboxRemove(ctx, ids...)
}

// SandboxCursor is a place in the sandboxes ordered by start: after the sandbox ID
// that started at Started. The zero cursor is the start of the order.
type SandboxCursor struct {
	Started time.Time
	ID      string
}

// SandboxScan reads up to n records in order of start (newest first unless asc),
// after the cursor. Records of the index that have gone meanwhile are left out.
// Errors: STORE_UNAVAILABLE.
func (s *Store) SandboxScan(ctx context.Context, asc bool, after SandboxCursor, n int) ([]Sandbox, error) {
	args := redis.ZRangeArgs{Key: s.keys.SandboxStarts(), Start: "-inf", Stop: "+inf", ByScore: true, Rev: !asc, Count: int64(n)}
	at := after.Started.UnixMilli()
	if after.ID != "" {
		// From the cursor's start, inclusive: a sandbox of the same start comes
		// before or after the cursor by its id, as the sorted set orders ties.
		if asc {
			args.Start = strconv.FormatInt(at, 10)
		} else {
			args.Start, args.Stop = strconv.FormatInt(at, 10), "-inf"
		}
	} else if !asc {
		args.Start, args.Stop = "+inf", "-inf"
	}
	var out []Sandbox
	for len(out) < n {
		zs, err := s.rdb.ZRangeArgsWithScores(ctx, args).Result()
		if err != nil {
			return nil, s.redisErr(ctx, err)
		}
		var ids []string
		for _, z := range zs {
			id := fmt.Sprint(z.Member)
			if after.ID != "" && int64(z.Score) == at && (asc && id <= after.ID || !asc && id >= after.ID) {
				continue
			}
			ids = append(ids, id)
		}
		if len(ids) > 0 {
			raws, err := s.rdb.HMGet(ctx, s.keys.SandboxRecords(), ids...).Result()
			if err != nil {
				return nil, s.redisErr(ctx, err)
			}
			for i, raw := range raws {
				if v, ok := raw.(string); ok && len(out) < n {
					if sb, err := decodeSandbox(ids[i], v); err == nil {
						out = append(out, sb)
					}
				}
			}
		}
		if int64(len(zs)) < args.Count {
			break
		}
		args.Offset += args.Count
	}
	return out, nil
}
