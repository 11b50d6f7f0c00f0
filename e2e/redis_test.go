//go:build e2e_multi || faults

package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/internal/testredis"
)

// redisServer is one redis-server process on a fixed loopback port, without
// persistence: the Redis of the multi-replica and fault tests.
type redisServer struct {
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	// admin is a connection as the default user, for faults and snapshots.
	admin *redis.Client
}

// startRedisServer starts redis-server on port with extra arguments, its log in dir,
// waits until it answers and creates the README's ACL user in it, as whom the
// replicas connect (url); it is killed when the test ends.
func startRedisServer(t *testing.T, dir string, port int, extra ...string) *redisServer {
	t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))}, extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v (install redis-server)", err)
	}
	r := &redisServer{port: port, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(r.kill)
	r.admin = redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = r.admin.Close() })
	eventually(t, 10*time.Second, "redis-server answers", func() bool {
		return r.admin.Ping(context.Background()).Err() == nil
	})
	if err := testredis.CreateACLUser(context.Background(), r.admin, testredis.ACLPassword); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// url is the --redis URL of the replicas: the README's ACL user.
func (r *redisServer) url() string { return testredis.UserURL(r.addr()) }

func (r *redisServer) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redis-server %v: %v", sig, err)
	}
}

// kill ends the server at once, a stopped (SIGSTOP) one too, and waits for it.
func (r *redisServer) kill() {
	select {
	case <-r.done:
	default:
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		<-r.done
	}
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
