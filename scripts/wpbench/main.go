// Command wpbench runs the measurements of docs/performance.md that need more than
// `warmpool loadtest`:
//
//	wpbench scale      the scale benchmark (make scale): S scopes × P pods × N sessions
//	                   on a fresh redis-server and replica per size; an idle phase and a
//	                   phase of steady routing; route latency with full passes against
//	                   sweeps off; the replica's RSS from 0 to 100,000 sessions
//	wpbench baseline   warmpool's CPU per warm route against the bare handler of
//	                   scripts/routebaseline on the same Redis keys
//	wpbench metrics    what /metrics costs at S scopes: its size, the CPU of a scrape,
//	                   warm routes with and without scrape loops, slow readers' RSS
//	wpbench ui         what the pool page's data (GET /v1/ui/state) costs per refresh
//	                   at S scopes: replica and Redis CPU, bytes; one page, two pages on
//	                   one replica, one page on each of two replicas
//	wpbench scopes     callers paging through GET /v1/scopes at S scopes (issue 31):
//	                   answers by status, each replica's peak RSS, and the other
//	                   replica's touch latency with the readers and without
//	wpbench reports    what agent reports cost at S pods reporting every 5 s: Redis
//	                   commands, Redis and replica CPU per report; route latency with
//	                   reports and without, sweeps on and off
//	wpbench rollout    routes by source across an image update under steady load, for
//	                   rollout drain and prewarm: one replica, the fake driver with a
//	                   deploy delay, a PUT of a new image mid-run
//	wpbench pooltrace  the warm-pool traces (make pooltrace): steady, ramp, step,
//	                   diurnal and bursty arrivals against static min_idle_pods and
//	                   warm_policy demand on one fake-driver replica; a table, the
//	                   goals met or missed, and an SVG plot (--svg)
//	wpbench capacity   the capacity model (docs/scaling.md): Redis and replica CPU per
//	                   warm route, cold route, PUT, due scope, sweep tick and report on
//	                   one redis-server, then warm routes from N replicas on a 3-master
//	                   Redis Cluster, each master's CPU per route and share of the scopes
//	wpbench bigscope   one scope of 10 to 10,000 pods, cold bursts into one (make bigscope)
//	wpbench tenants    three tenants of weights 1/1/2 under --max-pods-total (make tenants)
//	wpbench quotacost  what the quota check adds to a route across replicas (make quotacost)
//	wpbench sessionconfig
//	                   routes carrying a session_config (env and a secret ref, the
//	                   agent's fetch of it included) against plain routes on one warm
//	                   pool; the secret's value looked for in the log and /metrics
//	wpbench script F   print the source Redis runs for lua/F (redisstore.Sources)
//	wpbench keys F PREFIX SCOPE [EXTRA...]
//	                   print the KEYS a replica passes to lua/F for SCOPE under the
//	                   key PREFIX, EXTRA being the extra keys its header names
//
// Flags default to the environment variables named in their help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warmpool/warmpool/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wpbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: wpbench scale|baseline|metrics|ui|scopes|reports|rollout|pooltrace|capacity|bigscope|tenants|quotacost|sessionconfig [flags] | script FILE | keys FILE PREFIX SCOPE [EXTRA...]")
	}
	switch args[0] {
	case "script":
		if len(args) != 2 {
			return fmt.Errorf("usage: wpbench script FILE (one of %s)", strings.Join(scriptNames(), ", "))
		}
		src, ok := redisstore.Sources[args[1]]
		if !ok {
			return fmt.Errorf("no script %q (one of %s)", args[1], strings.Join(scriptNames(), ", "))
		}
		_, err := io.WriteString(stdout, src)
		return err
	case "keys":
		if len(args) < 4 {
			return fmt.Errorf("usage: wpbench keys FILE PREFIX SCOPE [EXTRA...]")
		}
		keys, err := redisstore.ScriptKeys(args[1], redisstore.NewKeyspace(args[2]).Scope(args[3]), args[4:]...)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, strings.Join(keys, " "))
		return err
	case "scale":
		return scale(ctx, args[1:], getenv, stdout, stderr)
	case "baseline":
		return baseline(ctx, args[1:], getenv, stdout, stderr)
	case "metrics":
		return metrics(ctx, args[1:], getenv, stdout, stderr)
	case "ui":
		return poolPage(ctx, args[1:], getenv, stdout, stderr)
	case "scopes":
		return scopeList(ctx, args[1:], getenv, stdout, stderr)
	case "reports":
		return agentReports(ctx, args[1:], getenv, stdout, stderr)
	case "rollout":
		return rollout(ctx, args[1:], getenv, stdout, stderr)
	case "pooltrace":
		return poolTrace(ctx, args[1:], getenv, stdout, stderr)
	case "capacity":
		return capacity(ctx, args[1:], getenv, stdout, stderr)
	case "bigscope":
		return bigScope(ctx, args[1:], getenv, stdout, stderr)
	case "tenants":
		return tenants(ctx, args[1:], getenv, stdout, stderr)
	case "quotacost":
		return quotaCost(ctx, args[1:], getenv, stdout, stderr)
	case "sessionconfig":
		return sessionConfig(ctx, args[1:], getenv, stdout, stderr)
	}
	return fmt.Errorf("unknown command %q: want scale, baseline, metrics, ui, scopes, reports, rollout, pooltrace, capacity, bigscope, tenants, quotacost, sessionconfig, script or keys", args[0])
}

func scriptNames() []string {
	var names []string
	for n := range redisstore.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// command is what the command lines of the measurements share: the flag set, with
// the flags every one takes, and where the run's progress goes.
type command struct {
	name   string
	fs     *flag.FlagSet
	stderr io.Writer
	serve  string    // -flags, for the measurements that take it
	into   *[]string // where parse puts -flags, split at spaces
}

// newCommand makes the flag set of the measurement name with the flags every one
// takes: the binary, the script that starts redis-server and the output directory.
func newCommand(name string, getenv func(string) string, stderr io.Writer, bin, redisSh, out *string) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(bin, "bin", or(getenv("WARMPOOL_BIN"), "bin/warmpool"), "warmpool binary [WARMPOOL_BIN]")
	fs.StringVar(redisSh, "redis-script", "scripts/redis.sh", "scripts/redis.sh, which starts the throwaway redis-server")
	fs.StringVar(out, "out", getenv("SCALE_OUT"), "directory for the servers' files and the JSON results (default: a new temporary one) [SCALE_OUT]")
	return &command{name: name, fs: fs, stderr: stderr}
}

// serveFlags adds -flags, serve flags added to those of whose (the replica's, the
// replicas'), which parse splits into into.
func (c *command) serveFlags(into *[]string, whose string) {
	c.into = into
	c.fs.StringVar(&c.serve, "flags", "", "serve flags added to the "+whose+", space-separated")
}

// parse parses args, then stops the run when an environment variable env read did not
// parse (env may be nil).
func (c *command) parse(args []string, env *envs) error {
	if err := c.fs.Parse(args); err != nil {
		return err
	}
	if env != nil {
		if err := env.err(); err != nil {
			return err
		}
	}
	if c.into != nil {
		*c.into = strings.Fields(c.serve)
	}
	return nil
}

// start makes the run's directory dir (a new temporary one when -out is empty) and
// sends the run's log to stderr; announce says on stderr where the files go.
func (c *command) start(dir *string, log *io.Writer, announce bool) error {
	d, err := outDir(*dir)
	if err != nil {
		return err
	}
	*dir, *log = d, c.stderr
	if announce {
		_, _ = fmt.Fprintf(c.stderr, "wpbench %s: files in %s\n", c.name, d) // progress on stderr: nothing to do if it fails
	}
	return nil
}

func or(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// outDir is the directory of a run's files, absolute: redis-server, started with
// its --dir there, opens its log file from that directory.
func outDir(dir string) (string, error) {
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", err
		}
		return abs, os.MkdirAll(abs, 0o755)
	}
	return os.MkdirTemp("", "wpbench.")
}

// atLeastPods refuses fewer sessions per scope than pods: the pods are deployed by
// the sessions' routes.
func atLeastPods(sessions, pods int) error {
	if sessions < pods {
		return fmt.Errorf("--sessions %d: at least --pods (%d): the pods are deployed by the sessions' routes", sessions, pods)
	}
	return nil
}

// wholeSeconds refuses a report interval (of the flag name) that is not whole seconds.
func wholeSeconds(name string, d time.Duration) error {
	if d < time.Second || d%time.Second != 0 {
		return fmt.Errorf("--%s %v: want whole seconds, at least 1s (agent.report_interval_s)", name, d)
	}
	return nil
}

// writeFile writes a file with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close() // the write's error is the one to tell
		return err
	}
	return f.Close()
}

// envs collects the environment variables that did not parse, so that a typo stops
// the run instead of measuring the defaults.
type envs struct {
	getenv func(string) string
	bad    []string
}

func (e *envs) int(name string, d int) int {
	v := e.getenv(name)
	if v == "" {
		return d
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.bad = append(e.bad, fmt.Sprintf("%s=%q: want an integer", name, v))
		return d
	}
	return n
}

func (e *envs) dur(name string, d time.Duration) time.Duration {
	v := e.getenv(name)
	if v == "" {
		return d
	}
	t, err := time.ParseDuration(v)
	if err != nil {
		e.bad = append(e.bad, fmt.Sprintf("%s=%q: want a duration such as 60s", name, v))
		return d
	}
	return t
}

func (e *envs) err() error {
	if len(e.bad) == 0 {
		return nil
	}
	return errors.New(strings.Join(e.bad, "; "))
}

// report writes the results of a bench run as text to stdout, or returns the run's
// error.
func report[R interface{ WriteText(io.Writer) error }](stdout io.Writer, res R, err error) error {
	if err != nil {
		return err
	}
	return res.WriteText(stdout)
}
