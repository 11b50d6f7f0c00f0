//go:build e2e_multi || faults

package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// redisServer is one redis-server process on a fixed loopback port, without
// persistence, with the README's ACL user as whom the replicas connect (URL): the
// Redis of the multi-replica and fault tests.
type redisServer struct {
	*testredis.Server
	port int
	// admin is a connection as the default user, for faults and snapshots.
	admin *redis.Client
}

// startRedisServer starts redis-server on port with extra arguments and waits until it
// answers; it is killed when the test ends.
func startRedisServer(t *testing.T, port int, extra ...string) *redisServer {
	t.Helper()
	r := &redisServer{Server: testredis.StartServerAt(t, port, extra...), port: port}
	r.admin = redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = r.admin.Close() })
	return r
}

// freePort is a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	_, port, _ := strings.Cut(freeAddr(t), ":")
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
