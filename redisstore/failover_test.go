package redisstore_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// A server promoted from a replica of the one the keyspace was built on names that
// one's replication id as its master_replid2. A never-promoted server's
// master_replid2 is all zeros: recording that id as the built one makes the server
// look promoted from it. Seen red with the comparison of the record and
// master_replid2 dropped (no failover found).
func TestFailoverFailsTheKeyspaceClosed(t *testing.T) {
	if !testredis.Real() || testredis.Cluster() {
		t.Skip("needs a real redis-server (REDIS_ADDR): INFO replication")
	}
	e := newEnv(t, nil)
	ctx := context.Background()
	key := e.store.Keys().ReplicationID()
	if err := e.store.RecordReplicationID(ctx, true); err != nil {
		t.Fatal(err)
	}
	if found, err := e.store.CheckFailover(ctx); err != nil || found {
		t.Fatalf("check on the server the keyspace was built on: %v, %v", found, err)
	}
	info, err := e.r.Client.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "master_replid2:")
	previous := strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
	if previous == "" {
		t.Fatalf("no master_replid2 in %q", info)
	}
	if err := e.r.Client.Set(ctx, key, previous, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// A record naming the server's previous id is a failover not handled yet: kept.
	if err := e.store.RecordReplicationID(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := e.r.Client.Get(ctx, key).Val(); got != previous {
		t.Fatalf("the record of a failover not handled yet was replaced by %q", got)
	}
	if found, err := e.store.CheckFailover(ctx); err != nil || !found {
		t.Fatalf("check after a promotion: %v, %v; want a failover", found, err)
	}
	if live, err := e.store.EpochLive(ctx); err != nil || live {
		t.Fatalf("epoch live after the failover: %v, %v", live, err)
	}
	if _, err := e.store.PodAcquire(ctx, e.scope, redisstore.AcquireArgs{Now: e.now, Claim: "c"}); err != warmpool.ErrEpochLost {
		t.Fatalf("acquire after the failover: %v, want EPOCH_LOST", err)
	}

	// The hook of a new connection finds it before the connection's first command.
	if _, err := e.store.Bootstrap(ctx, "epoch-2"); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), Username: testredis.ACLUser, Password: testredis.ACLPassword, OnConnect: redisstore.FailoverCheck(e.r.Prefix, slog.New(slog.DiscardHandler))})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if live, err := e.store.EpochLive(ctx); err != nil || live {
		t.Fatalf("epoch live after a new connection to the promoted server: %v, %v", live, err)
	}
	// A rebuild records the server's own id: no failover any more.
	if err := e.store.RecordReplicationID(ctx, true); err != nil {
		t.Fatal(err)
	}
	if found, err := e.store.CheckFailover(ctx); err != nil || found {
		t.Fatalf("check after the rebuild recorded the id: %v, %v", found, err)
	}
}

// After a failover, a pod Redis still knows may serve sessions the new primary lost:
// adopting it with its sessions unknown holds its free slots, not its taken ones.
func TestAdoptHoldsTheFreeSlotsOfAKnownPod(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	res := e.acquire("leader")
	pod, _, err := e.register(res, "leader")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e.store.PodAdopt(ctx, pod, e.now, false); err != nil || st != redisstore.AdoptKnown {
		t.Fatalf("adopt with no session: %q, %v", st, err)
	}
	if s := e.snap(); s.Pods[0].Slots != 1 {
		t.Fatalf("adopt of a known pod with sessions known changed its slots: %+v", s.Pods[0])
	}
	for range 2 { // a second adoption holds nothing more
		if st, err := e.store.PodAdopt(ctx, pod, e.now, true); err != nil || st != redisstore.AdoptKnown {
			t.Fatalf("adopt with sessions unknown: %q, %v", st, err)
		}
	}
	s := e.snap()
	if p := s.Pods[0]; p.Slots != 2 || p.Idle {
		t.Fatalf("pod after the adoption: %+v, want both slots taken", p)
	}
	if s.ClaimPod["leader"] != pod.ID || s.ClaimPod["adopted:"+pod.ID+":1"] != pod.ID || len(s.ClaimPod) != 2 {
		t.Fatalf("claims %v: want the leader's and one adopted hold", s.ClaimPod)
	}
}
