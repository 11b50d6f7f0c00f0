package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a throwaway redis-server started by scripts/redis.sh.
type redisServer struct {
	script string
	dir    string
	Addr   string
	PID    int
	rdb    *redis.Client
}

// startRedis starts a redis-server with scripts/redis.sh (its path is script) in dir.
func startRedis(ctx context.Context, script, dir string) (*redisServer, error) {
	out, err := exec.CommandContext(ctx, script, "start", dir).Output()
	if err != nil {
		return nil, fmt.Errorf("%s start: %w", script, exitText(err))
	}
	r := &redisServer{script: script, dir: dir, Addr: strings.TrimSpace(string(out))}
	b, err := os.ReadFile(filepath.Join(dir, "redis.pid"))
	if err == nil {
		r.PID, err = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("redis pid: %w", err)
	}
	r.rdb = redis.NewClient(&redis.Options{Addr: r.Addr})
	return r, nil
}

func (r *redisServer) stop() {
	if r.rdb != nil {
		r.rdb.Close()
	}
	_ = exec.Command(r.script, "stop", r.dir).Run()
}

// exitText adds a failed command's stderr to its error.
func exitText(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

// process is a server under test: a warmpool replica or the baseline handler, which
// print the URL they listen on in their first line.
type process struct {
	cmd *exec.Cmd
	URL string
	PID int
}

var listenRe = regexp.MustCompile(`http://[0-9.:]+`)

// startProcess runs bin with args, its stderr to logFile, and waits for the URL it
// prints and for its health answer (healthPath).
func startProcess(ctx context.Context, bin string, args []string, logFile, healthPath string) (*process, error) {
	logf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }() // the process writes through its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, PID: cmd.Process.Pid}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if u := listenRe.FindString(sc.Text()); u != "" && !sent {
				found <- u
				sent = true
			}
		}
		close(found)
	}()
	select {
	case u, ok := <-found:
		if !ok {
			p.stop()
			return nil, fmt.Errorf("%s exited before listening (see %s)", bin, logFile)
		}
		p.URL = u
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, fmt.Errorf("%s: no listen address in 30s (see %s)", bin, logFile)
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.URL + healthPath)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			return nil, fmt.Errorf("%s%s not ready in 30s (see %s)", p.URL, healthPath, logFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the process: it is thrown away with its Redis, so nothing needs a clean
// shutdown.
func (p *process) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// startReplica runs `warmpool serve` with the fake driver on r, plus extra flags. Its
// logs are text, so that it prints the URL it listens on to stdout whatever the level
// (with JSON logs that line is an info record, and the level here is warn).
func startReplica(ctx context.Context, bin, dir, name string, r *redisServer, extra ...string) (*process, error) {
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--redis", "redis://" + r.Addr + "/0",
		"--store", filepath.Join(dir, name+".db"), "--driver", "fake", "--log-level", "warn", "--log-format", "text"}, extra...)
	return startProcess(ctx, bin, args, filepath.Join(dir, name+".log"), "/readyz")
}
