package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// The version check passes the test's Redis (whatever it is, a Cluster's every node)
// and refuses a server older than warmpool needs, naming what it found and what it
// needs: 6.2, and 7.0 on a Cluster.
func TestCheckVersion(t *testing.T) {
	r := testredis.New(t)
	ctx := context.Background()
	found, err := redisstore.NewStore(r.Client, r.Prefix).CheckVersion(ctx)
	if err != nil {
		t.Fatalf("the test's Redis: %v", err)
	}
	if testredis.Real() == (found == "") {
		t.Fatalf("found version %q on a real Redis %v", found, testredis.Real())
	}

	found, err = redisstore.NewStore(oldClient(t, "6.0.9"), "wp:").CheckVersion(ctx)
	var ve *redisstore.VersionError
	if !errors.As(err, &ve) || found != "6.0.9" || ve.Found != "6.0.9" || ve.Need != redisstore.MinRedisVersion ||
		!strings.Contains(err.Error(), "6.0.9") || !strings.Contains(err.Error(), "6.2 or later") {
		t.Fatalf("a Redis 6.0.9: found %q, %v; want a VersionError naming 6.0.9 and 6.2", found, err)
	}
	for _, v := range []string{"6.2.0", "6.2.14", "7.0.15", "10.0"} {
		if _, err := redisstore.NewStore(oldClient(t, v), "wp:").CheckVersion(ctx); err != nil {
			t.Errorf("a Redis %s: %v", v, err)
		}
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	if _, err := redisstore.NewStore(down, "wp:").CheckVersion(ctx); warmpool.ErrorCode(err) != warmpool.CodeStoreUnavailable {
		t.Fatalf("a Redis that does not answer: %v, want STORE_UNAVAILABLE", err)
	}
}

// oldClient is a client of an OldServer of version v.
func oldClient(t *testing.T, v string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testredis.OldServer(t, v)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The versions are compared number by number, not as text.
func TestOlderVersion(t *testing.T) {
	for _, c := range []struct {
		a, b  string
		older bool
	}{
		{"6.0.9", "6.2", true}, {"6.2.0", "6.2", false}, {"6.10.1", "6.2", false}, {"7.0.0", "7.0", false},
		{"6.2.14", "7.0", true}, {"10.0.1", "7.0", false}, {"7", "7.0", false}, {"5.0.14", "6.2", true},
	} {
		if got := redisstore.OlderVersion(c.a, c.b); got != c.older {
			t.Errorf("%s older than %s: %v, want %v", c.a, c.b, got, c.older)
		}
	}
}

// A replica whose wall clock is behind Redis's by more than the time to its deadline
// plus the guard's 100 ms has every guarded call refused (DEADLINE, answered
// STORE_UNAVAILABLE): its deadlines are in Redis's past. Once it has measured the
// skew, it sends its deadlines in Redis's time and the calls run; a replica ahead of
// Redis measures a positive skew.
func TestGuardTakesTheMeasuredClockSkew(t *testing.T) {
	r := testredis.New(t)
	ctx := context.Background()
	// Behind by more than the client's read timeout (go-redis's default: 5 s; a
	// replica's: 1 s), the deadline of a call with no deadline of its own.
	const behind = 30 * time.Second
	s := redisstore.NewStore(r.Client, r.Prefix)
	redisstore.SetWallClock(s, func() time.Time { return time.Now().Add(-behind) })
	key := s.Keys().Lock("skew")
	if _, err := s.Obtain(ctx, key, time.Minute); warmpool.ErrorCode(err) != warmpool.CodeStoreUnavailable {
		t.Fatalf("a guarded call %s behind Redis, skew not measured: %v, want STORE_UNAVAILABLE (DEADLINE)", behind, err)
	}
	m, err := s.MeasureClockSkew(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Skew + behind; d.Abs() > 100*time.Millisecond || m.Guard != m.Skew || m.RTT > 200*time.Millisecond {
		t.Fatalf("measured %+v, want a skew of -%s", m, behind)
	}
	lock, err := s.Obtain(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("a guarded call %s behind Redis, skew measured: %v", behind, err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	ahead := redisstore.NewStore(r.Client, r.Prefix)
	redisstore.SetWallClock(ahead, func() time.Time { return time.Now().Add(time.Second) })
	if m, err := ahead.MeasureClockSkew(ctx); err != nil || (m.Skew-time.Second).Abs() > 100*time.Millisecond {
		t.Fatalf("a replica 1s ahead measured %+v, %v", m, err)
	}
}
