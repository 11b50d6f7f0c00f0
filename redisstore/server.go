package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// What the store learns of the Redis servers themselves: whether they are recent
// enough for warmpool's commands, and how far their clocks are from the replica's.

// The oldest Redis warmpool runs on: ZADD GT/LT (the due index), SET … GET (the probe
// windows) and ZMSCORE (the report index) came with 6.2; a Cluster's wake-ups use
// sharded pub/sub (SPUBLISH, SSUBSCRIBE), which came with 7.0.
const (
	MinRedisVersion   = "6.2"
	MinClusterVersion = "7.0"
)

// VersionError is a Redis server older than warmpool needs.
type VersionError struct {
	Addr, Found, Need string
	Cluster           bool
}

func (e *VersionError) Error() string {
	if e.Cluster {
		return fmt.Sprintf("redis %s is version %s: warmpool needs %s or later on a Redis Cluster (sharded pub/sub: SPUBLISH)", e.Addr, e.Found, e.Need)
	}
	return fmt.Sprintf("redis %s is version %s: warmpool needs %s or later (ZADD GT/LT, SET … GET, ZMSCORE)", e.Addr, e.Found, e.Need)
}

// CheckVersion reads the version of every Redis server the store talks to (INFO
// server: each master and replica of a Cluster) and refuses one older than
// MinRedisVersion, or MinClusterVersion on a Cluster, with a *VersionError. found is
// the oldest version read, "" when no server told its version (an embedded Redis, a
// server whose INFO has no redis_version or refuses the section). Errors:
// STORE_UNAVAILABLE, *VersionError.
func (s *Store) CheckVersion(ctx context.Context) (found string, err error) {
	need := MinRedisVersion
	if s.cluster() {
		need = MinClusterVersion
	}
	var mu sync.Mutex
	var tooOld *VersionError
	check := func(ctx context.Context, c redis.Cmdable, addr string) error {
		v, err := serverVersion(ctx, c)
		if err != nil || v == "" {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if found == "" || olderVersion(v, found) {
			found = v
		}
		if olderVersion(v, need) && tooOld == nil {
			tooOld = &VersionError{Addr: addr, Found: v, Need: need, Cluster: s.cluster()}
		}
		return nil
	}
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return check(ctx, n, n.Options().Addr) })
	case *redis.Client:
		err = check(ctx, c, c.Options().Addr)
	default:
		err = check(ctx, c, "")
	}
	if err != nil {
		return "", s.redisErr(ctx, err)
	}
	if tooOld != nil {
		return found, tooOld
	}
	return found, nil
}

// serverVersion is the redis_version of INFO server, "" when the server refuses the
// section (a user without INFO, an embedded Redis that lacks it) or does not say.
func serverVersion(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	var refused redis.Error
	if errors.As(err, &refused) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// olderVersion reports whether version a is older than b, comparing their dotted
// numbers from the left (a part that is no number counts as 0).
func olderVersion(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// ClockSkew is one measurement of the replica's wall clock against Redis's TIME.
type ClockSkew struct {
	// Skew is the replica's clock minus Redis's (SPEC §12.4's
	// warmpool_clock_skew_seconds); on a Cluster, the largest in size over its
	// masters.
	Skew time.Duration
	// Guard is what the store takes off each guarded call's deadline, so that
	// lib/guard.lua compares it with Redis's clock in Redis's own time: Skew, or on a
	// Cluster the smallest skew over its masters (that of the master whose clock is
	// furthest ahead), so that no master refuses a call in time.
	Guard time.Duration
	// RTT is the round trip the measurement came from: its error is half of it at
	// most.
	RTT time.Duration
}

// Bounds of a clock skew measurement: the fastest of skewSamples round trips counts,
// and one slower than maxSkewRTT is no measurement (its error could exceed the 100 ms
// the guard allows).
const (
	skewSamples = 3
	maxSkewRTT  = 200 * time.Millisecond
)

// MeasureClockSkew measures the skew between the replica's wall clock and Redis's
// TIME (each master's on a Cluster), from the fastest of three round trips, and from
// then on sends each guarded script its caller's deadline in Redis's time (the
// replica's deadline less ClockSkew.Guard): a replica whose clock is behind Redis's
// is no longer refused every guarded call. Errors: STORE_UNAVAILABLE, and an error
// when every round trip took more than maxSkewRTT (nothing is changed then).
func (s *Store) MeasureClockSkew(ctx context.Context) (ClockSkew, error) {
	var mu sync.Mutex
	var m ClockSkew
	n := 0
	measure := func(ctx context.Context, c redis.Cmdable) error {
		skew, rtt, err := s.skewOf(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if n == 0 || skew.Abs() > m.Skew.Abs() {
			m.Skew = skew
		}
		if n == 0 || skew < m.Guard {
			m.Guard = skew
		}
		m.RTT = max(m.RTT, rtt)
		n++
		return nil
	}
	var err error
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return measure(ctx, n) })
	} else {
		err = measure(ctx, s.rdb)
	}
	if err != nil {
		var slow *slowClockRead
		if errors.As(err, &slow) {
			return ClockSkew{}, err
		}
		return ClockSkew{}, s.redisErr(ctx, err)
	}
	s.skew.Store(int64(m.Guard))
	return m, nil
}

// slowClockRead: no round trip of a clock skew measurement was fast enough.
type slowClockRead struct{ rtt time.Duration }

func (e *slowClockRead) Error() string {
	return fmt.Sprintf("clock skew not measured: the fastest of %d reads of Redis's TIME took %s (at most %s counts)", skewSamples, e.rtt.Round(time.Millisecond), maxSkewRTT)
}

// skewOf measures the wall clock less c's TIME, taken as of the middle of the
// fastest of skewSamples round trips.
func (s *Store) skewOf(ctx context.Context, c redis.Cmdable) (skew, rtt time.Duration, err error) {
	for i := range skewSamples {
		t0 := s.wall()
		at, err := c.Time(ctx).Result()
		t1 := s.wall()
		if err != nil {
			return 0, 0, err
		}
		if d := t1.Sub(t0); i == 0 || d < rtt {
			rtt, skew = d, t0.Add(d/2).Sub(at)
		}
	}
	if rtt > maxSkewRTT {
		return 0, 0, &slowClockRead{rtt: rtt}
	}
	return skew, rtt, nil
}
