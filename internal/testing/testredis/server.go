package testredis

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process of the test's own, which the test may pause and
// resume (SIGSTOP, SIGCONT) as a Redis that hangs for a while; the shared test server
// of REDIS_ADDR must never be paused.
type Server struct {
	// Addr is host:port.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartServer starts a redis-server without persistence on a free loopback port, with
// the README's ACL user; it is killed with the test. The test fails when redis-server
// is not installed.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	for range 5 {
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		if s := start(tb, port); s != nil {
			return s
		}
		// The port was taken meanwhile: try another.
	}
	tb.Fatal("redis-server did not start")
	return nil
}

// StartServerAt starts a redis-server as StartServer does, on port (again on the port
// of one killed before, say) with extra arguments such as --replicaof; the test fails
// when it does not answer.
func StartServerAt(tb testing.TB, port int, extra ...string) *Server {
	tb.Helper()
	s := start(tb, port, extra...)
	if s == nil {
		tb.Fatalf("redis-server on port %d did not start", port)
	}
	return s
}

// start starts a redis-server on port and returns it once it answers, with the ACL
// user created, or nil when it does not answer.
func start(tb testing.TB, port int, extra ...string) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal("redis-server is missing (Debian: apt-get install redis-server)")
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", tb.TempDir()}, extra...)
	s.cmd = exec.Command(bin, args...)
	if err := s.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if !s.await() {
		s.Kill()
		return nil
	}
	tb.Cleanup(s.Kill)
	s.createUser(tb)
	return s
}

// await reports whether the server answers PING within 10 seconds.
func (s *Server) await() bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// createUser creates the README's ACL user, whom URL names.
func (s *Server) createUser(tb testing.TB) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := setUser(ctx, c, ACLUser, "wp:"); err != nil {
		tb.Fatal(err)
	}
}

// Kill ends the server at once, a paused one too, and waits until it is gone.
func (s *Server) Kill() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Clients is the number of client connections the server has, this one's included
// (made as the default user).
func (s *Server) Clients(tb testing.TB) int {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		tb.Fatalf("client list: %v", err)
	}
	return strings.Count(list, "\n")
}

// URL is the server's redis:// URL for warmpool's connection: the README's ACL user.
func (s *Server) URL() string { return UserURL(s.Addr) }

// Pause stops the server process (SIGSTOP): connections stay open and what clients
// send waits in the kernel until Resume.
func (s *Server) Pause(tb testing.TB) {
	tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatal(err)
	}
}

// Resume lets a paused server run again (SIGCONT) and returns once it has answered a
// PING on a connection made afterwards. Redis reads every client that had input
// waiting in the event-loop turn that also accepts that connection, so by then it has
// run everything sent to it while it was paused.
func (s *Server) Resume(tb testing.TB) {
	tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		tb.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis-server after SIGCONT: %v", err)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
