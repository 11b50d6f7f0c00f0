package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
)

// The call protocol is what every script call follows around the bare run
// (Store.run), so that a wrapper only says what goes in and reads what comes out:
//
//   - keys: the script's KEYS are the scope's keys it takes, in the fixed order of
//     keys.go, then the extra keys its wrapper gives (lua.go declares both);
//   - deadline: a guarded script gets its caller's deadline as its last ARGV, and its
//     refusal to run past it, {"DEADLINE"}, is STORE_UNAVAILABLE (lib/guard.lua);
//   - due note: a script that notes sweep work may answer {"DUE", due, answer}; the
//     scope moves in its shard of the due index and the answer is passed on;
//   - epoch check: {"EPOCH_LOST"} is ErrEpochLost, and {"NO_SCOPE"} is
//     SCOPE_NOT_FOUND unless Redis lost its data (then ErrEpochLost too).

// call runs script sc of the scope whose keys are k with the extra keys and the
// arguments of its wrapper, under the call protocol, and returns its answer for
// reading (see reply).
func (s *Store) call(ctx context.Context, sc *script, k ScopeKeys, extra []string, args ...any) (*reply, error) {
	keys, err := sc.keys(&k, extra)
	if err != nil {
		return nil, err
	}
	n := len(args)
	if sc.guarded {
		n++
	}
	// The EVALSHA command in one []any: a key goes in as a *string into keys, which
	// go-redis writes (and routes a Cluster command by) as it does a string, since a
	// string put in an interface is an allocation of its own (20 a warm route).
	argv := make([]any, 3+len(keys), 3+len(keys)+n)
	argv[0], argv[1], argv[2] = "evalsha", sc.sha, len(keys)
	for i := range keys {
		argv[3+i] = &keys[i]
	}
	argv = append(argv, args...)
	if sc.guarded {
		argv = append(argv, s.deadline(ctx))
	}
	v, err := s.run(ctx, sc, argv)
	if err != nil {
		return nil, err
	}
	if sc.due {
		v = s.noted(ctx, k.ID, v)
	}
	r := newReply(sc.name, v)
	if err := s.refusal(ctx, sc, k.ID, r); err != nil {
		return nil, err
	}
	return r, nil
}

// keys are the script's KEYS: its scope keys of k, then extra, the keys its wrapper
// gives, one for each extra key the script declares. The scope keys of a k that has
// only its id and base (Keyspace.scopeBase) are cut from one new string.
func (sc *script) keys(k *ScopeKeys, extra []string) ([]string, error) {
	if len(extra) != len(sc.extra) {
		return nil, fmt.Errorf("%s: %d extra keys, want %d (%v)", sc.name, len(extra), len(sc.extra), sc.extra)
	}
	keys := make([]string, 0, len(sc.scope)+len(extra))
	if k.Epoch != "" || len(sc.scope) == 0 {
		for _, n := range sc.scope {
			keys = append(keys, k.key(n))
		}
		return append(keys, extra...), nil
	}
	var b strings.Builder
	b.Grow(len(sc.scope)*len(k.base) + sc.namesLen)
	for _, n := range sc.scope {
		start := b.Len()
		b.WriteString(k.base)
		b.WriteString(n.name())
		keys = append(keys, b.String()[start:])
	}
	return append(keys, extra...), nil
}

// ScriptKeys are the KEYS the store passes to the script of file (a name in Scripts)
// for the scope whose keys are k, with extra, the extra keys its wrapper gives (its
// header names them), for tools that run a script as a replica does. Errors: no such
// script, or not one extra key for each the script takes.
func ScriptKeys(file string, k ScopeKeys, extra ...string) ([]string, error) {
	sc, ok := scripts[file]
	if !ok {
		return nil, fmt.Errorf("no script %q", file)
	}
	return sc.keys(&k, extra)
}

// deadline is when the caller of a script stops waiting for its answer: ctx's
// deadline, or the client's read timeout from now, whichever comes first; "0" for
// none. It is wall-clock time, compared with Redis's own clock by lib/guard.lua, so it
// never comes from an injected Clock, and it is sent in Redis's time: less the skew
// of the replica's clock the last MeasureClockSkew found.
func (s *Store) deadline(ctx context.Context) string {
	var d time.Time
	if s.wait > 0 {
		d = s.wall().Add(s.wait)
	}
	if cd, ok := ctx.Deadline(); ok && (d.IsZero() || cd.Before(d)) {
		d = cd
	}
	if d.IsZero() {
		return "0"
	}
	return ms(d.Add(-time.Duration(s.skew.Load())))
}

// noted takes the due note off the answer of a script that notes due work
// ({"DUE", due, answer} when a note moved the scope's due time earlier) and moves the
// scope in its shard of the due index to no later than that (indexNoted).
func (s *Store) noted(ctx context.Context, scope string, v any) any {
	a, ok := v.([]any)
	if !ok || len(a) < 2 || a[0] != "DUE" {
		return v
	}
	due, _ := a[1].(string)
	if t, err := strconv.ParseInt(due, 10, 64); err == nil {
		s.indexNoted(ctx, scope, t)
	}
	if len(a) < 3 {
		return nil
	}
	return a[2]
}

// refusal is the error of an answer that refuses the call for the protocol's reasons
// (EPOCH_LOST, NO_SCOPE, DEADLINE), nil for any other answer.
func (s *Store) refusal(ctx context.Context, sc *script, scope string, r *reply) error {
	if len(r.fields) == 0 {
		return nil
	}
	switch r.fields[0] {
	case "EPOCH_LOST":
		return warmpool.ErrEpochLost
	case "NO_SCOPE":
		return s.noScope(ctx, scope)
	case "DEADLINE":
		return &warmpool.Error{Code: warmpool.CodeStoreUnavailable, RetryAfter: 1,
			Message: sc.name + ": Redis ran the call after its caller's deadline, so it did nothing"}
	}
	return nil
}

// noScope tells an unknown scope from a Redis that lost every key: when the global
// epoch is missing too, the data is gone and requests fail closed.
func (s *Store) noScope(ctx context.Context, scope string) error {
	live, err := s.EpochLive(ctx)
	if err != nil {
		return err
	}
	if !live {
		return warmpool.ErrEpochLost
	}
	return warmpool.Errorf(warmpool.CodeScopeNotFound, "scope %q has no config", scope)
}
