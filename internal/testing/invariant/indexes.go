package invariant

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/redisstore"
)

// An index is one ZSET of lib/index.lua as member -> score.
type index map[string]float64

// indexState is every index of one scope (by key), and the keys they are read from.
type indexState map[string]index

// scopeState is what a scope's indexes are a function of, as Redis holds it.
type scopeState struct {
	ver, prev                 string
	pc, maxPods, served       int64
	hasMax                    bool
	pods, idle, deploys, room index
	podver, slots, sessions   map[string]string
	claimpod                  map[string]string
}

// readState reads the keys the indexes follow, in one round trip.
func readState(ctx context.Context, rdb redis.Cmdable, k redisstore.ScopeKeys) (scopeState, error) {
	pipe := rdb.Pipeline()
	cfg := pipe.HMGet(ctx, k.Config, "deploy_ver", "prewarm_ver", "pod_concurrency", "max_pods", "max_served")
	pods := pipe.ZRangeWithScores(ctx, k.Pods, 0, -1)
	idle := pipe.ZRangeWithScores(ctx, k.Idle, 0, -1)
	deploys := pipe.ZRangeWithScores(ctx, k.Deploying, 0, -1)
	room := pipe.ZRangeWithScores(ctx, k.Followers, 0, -1)
	podver := pipe.HGetAll(ctx, k.PodVer)
	slots := pipe.HGetAll(ctx, k.Slots)
	sessions := pipe.HGetAll(ctx, k.Sessions)
	claimpod := pipe.HGetAll(ctx, k.ClaimPod)
	if _, err := pipe.Exec(ctx); err != nil {
		return scopeState{}, err
	}
	str := func(v any) string { s, _ := v.(string); return s }
	num := func(v any) int64 { n, _ := strconv.ParseInt(str(v), 10, 64); return n }
	c := cfg.Val()
	return scopeState{ver: str(c[0]), prev: str(c[1]), pc: num(c[2]), maxPods: num(c[3]), hasMax: c[3] != nil, served: num(c[4]),
		pods: zindex(pods.Val()), idle: zindex(idle.Val()), deploys: zindex(deploys.Val()), room: zindex(room.Val()),
		podver: podver.Val(), slots: slots.Val(), sessions: sessions.Val(), claimpod: claimpod.Val()}, nil
}

func zindex(zs []redis.Z) index {
	m := make(index, len(zs))
	for _, z := range zs {
		m[fmt.Sprint(z.Member)] = z.Score
	}
	return m
}

// entry is one member of an index with its score, ordered as Redis orders a ZSET.
type entry struct {
	member string
	score  float64
}

func sorted(ix index) []entry {
	var out []entry
	for m, s := range ix {
		out = append(out, entry{m, s})
	}
	slices.SortFunc(out, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.score, b.score), strings.Compare(a.member, b.member))
	})
	return out
}

// want computes every index from the state it indexes, as lib/index.lua defines them.
func (st scopeState) want(k redisstore.ScopeKeys) indexState {
	ix := indexState{}
	for _, key := range []string{k.Free, k.FreePrev, k.Warm, k.WarmPrev, k.Busy, k.Surplus, k.PodSess, k.PodClaims, k.Rooms, k.Open} {
		ix[key] = index{}
	}
	slots := func(pod string) int64 { n, _ := strconv.ParseInt(st.slots[pod], 10, 64); return n }
	for pod, reg := range st.pods {
		v, ok := st.podver[pod]
		since, idle := st.idle[pod]
		switch {
		case ok && st.ver != "" && v == st.ver:
			if idle {
				ix[k.Warm][pod] = since
			} else {
				ix[k.Busy][pod] = reg
			}
		case ok && st.prev != "" && v == st.prev:
			if idle {
				ix[k.WarmPrev][pod] = since
			}
			if slots(pod) < st.pc {
				ix[k.FreePrev][pod] = reg
			}
		}
	}
	// the surplus: the first of warm, then the last of busy (lib/surplus.lua)
	warm, busy := sorted(ix[k.Warm]), sorted(ix[k.Busy])
	if s := int64(len(warm)+len(busy)) - st.maxPods; st.hasMax && s > 0 {
		for _, e := range warm[:min(s, int64(len(warm)))] {
			ix[k.Surplus][e.member] = 0
		}
		slices.Reverse(busy)
		for _, e := range busy[:max(0, min(s-int64(len(warm)), int64(len(busy))))] {
			ix[k.Surplus][e.member] = 1
		}
	}
	for _, set := range []index{ix[k.Warm], ix[k.Busy]} {
		for pod := range set {
			if _, out := ix[k.Surplus][pod]; !out && slots(pod) < st.pc {
				ix[k.Free][pod] = st.pods[pod]
			}
		}
	}
	for sid, pod := range st.sessions {
		ix[k.PodSess][pod+" "+sid] = 0
	}
	for c, v := range st.claimpod {
		if v != "" && !strings.HasPrefix(v, "!") {
			ix[k.PodClaims][v+" "+c] = 0
		}
	}
	size := map[string]int64{}
	for f := range st.room {
		ix[k.Rooms][f] = 0
		if d, _, ok := strings.Cut(f, "|"); ok {
			size[d]++
		}
	}
	for d := range st.deploys {
		limit := st.pc - 1
		if strings.HasSuffix(d, "w") {
			limit = st.pc
		}
		if st.served > 0 {
			limit = min(limit, st.served-(st.pc-limit))
		}
		if size[d] < limit {
			n, _ := strconv.ParseInt(strings.TrimSuffix(d, "w"), 10, 64)
			ix[k.Open][d] = float64(n)
		}
	}
	return ix
}

// Indexes returns how the indexes of lib/index.lua (the keys free, freeprev, warm,
// warmprev, busy, surplus, podsess, podclaims, rooms and open) differ from what they
// index: each is computed from the scope's pods, podver, slots, idle, sessions,
// claimpod, deploying and followers and its config, and compared entry by entry,
// score and all.
func Indexes(ctx context.Context, rdb redis.Cmdable, k redisstore.ScopeKeys) ([]string, error) {
	st, err := readState(ctx, rdb, k)
	if err != nil {
		return nil, err
	}
	want := st.want(k)
	pipe := rdb.Pipeline()
	got := map[string]*redis.ZSliceCmd{}
	for key := range want {
		got[key] = pipe.ZRangeWithScores(ctx, key, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	var out []string
	for _, key := range slices.Sorted(maps.Keys(want)) {
		have := zindex(got[key].Val())
		for m, s := range want[key] {
			if hs, ok := have[m]; !ok || hs != s {
				out = append(out, fmt.Sprintf("index %s: %q should be there with score %v (has %v, %v)", key, m, s, hs, ok))
			}
		}
		for m := range have {
			if _, ok := want[key][m]; !ok {
				out = append(out, fmt.Sprintf("index %s: %q should not be there", key, m))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// WriteIndexes sets every index of the scope to what it indexes: a test's write
// outside the scripts (a stray write to a pod's slots, say) that is to reach the
// indexes as a script's write does.
func WriteIndexes(ctx context.Context, rdb redis.Cmdable, k redisstore.ScopeKeys) error {
	st, err := readState(ctx, rdb, k)
	if err != nil {
		return err
	}
	pipe := rdb.TxPipeline()
	for key, ix := range st.want(k) {
		pipe.Del(ctx, key)
		for m, s := range ix {
			pipe.ZAdd(ctx, key, redis.Z{Score: s, Member: m})
		}
	}
	_, err = pipe.Exec(ctx)
	return err
}
