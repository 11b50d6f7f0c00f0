package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/warmpool/warmpool/loadtest"
)

// loadtestCmd runs `warmpool loadtest`: the scenarios of package loadtest against one
// replica on this machine, a summary on stdout, progress on stderr, and results.json
// plus report.html in --out.
func loadtestCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprint(stderr, `usage: warmpool loadtest [flags]

Drives one warmpool replica on this machine (loopback only) through its HTTP API and
reports throughput, latency quantiles per call kind and outcomes, in results.json and
report.html. Scenarios (each creates its own scopes, named --scope-prefix + scenario +
random suffix):
  warm    session slots loop route → touch → end on warm pods (--warm-mode route: routes
          only; hold: sessions held and touched), flat out or at --rate
  cold    --bursts bursts of --burst concurrent routes, each on a fresh scope: wall time,
          served, pods deployed (want ceil(burst / pod-concurrency))
  queued  a scope at capacity (--max-concurrency) while --queued-clients route, queue and
          are served as others end after --hold

flags:
`)
		fs.PrintDefaults()
	}
	var c loadtest.Config
	fs.StringVar(&c.Server, "server", envOr(getenv, "WARMPOOL_SERVER", loadtest.DefaultServer), "server URL; loopback hosts only [WARMPOOL_SERVER]")
	fs.StringVar(&c.Token, "token", cmp.Or(getenv("WARMPOOL_ADMIN_TOKEN"), getenv("WARMPOOL_AUTH_TOKEN")), "bearer token; the scenarios store their scopes, which needs the admin token when the server has one [WARMPOOL_ADMIN_TOKEN, else WARMPOOL_AUTH_TOKEN]")
	scenario := fs.String("scenario", "all", "warm, cold, queued, all, or a comma-separated list")
	fs.StringVar(&c.ScopePrefix, "scope-prefix", loadtest.DefaultScopePrefix, "prefix of the scopes the run creates")
	out := fs.String("out", "loadtest-out", "directory for results.json and report.html (empty = write none)")
	fs.DurationVar(&c.Duration, "duration", loadtest.DefaultDuration, fmt.Sprintf("measured time of the warm and of the queued scenario (at most %v)", loadtest.MaxDuration))
	fs.Float64Var(&c.Rate, "rate", 0, "warm: target calls per second (0 = flat out)")
	fs.IntVar(&c.Sessions, "sessions", loadtest.DefaultSessions, "warm: concurrent session slots")
	fs.IntVar(&c.Workers, "workers", loadtest.DefaultWorkers, "warm: concurrent requests")
	fs.StringVar(&c.WarmMode, "warm-mode", loadtest.WarmCycle, "warm: cycle (route → touch → end), route (routes only, never ended: needs capacity), hold (route once, then touch)")
	fs.IntVar(&c.Touches, "touches", loadtest.DefaultTouches, "warm: touches per cycle")
	fs.IntVar(&c.PodConcurrency, "pod-concurrency", loadtest.DefaultPodConc, "pod_concurrency of every scope the run creates")
	fs.IntVar(&c.MaxConcurrency, "max-concurrency", loadtest.DefaultMaxConc, "max_concurrency of the cold and queued scopes (warm: at least --sessions)")
	fs.IntVar(&c.Burst, "burst", 0, "cold: concurrent routes per burst (default --max-concurrency)")
	fs.IntVar(&c.Bursts, "bursts", loadtest.DefaultBursts, "cold: bursts, each on a fresh scope")
	fs.DurationVar(&c.DeployDelay, "deploy-delay", 0, "cold: the server's deploy delay, if known (e.g. serve --fake-deploy-delay), for the wall/delay ratio")
	fs.IntVar(&c.QueueSize, "queue-size", loadtest.DefaultQueueSize, "queued: queue_size of the scope")
	fs.DurationVar(&c.WaitTimeout, "wait-timeout", loadtest.DefaultWaitTimeout, "queued: wait_timeout_s of the scope (whole seconds)")
	fs.IntVar(&c.QueuedClients, "queued-clients", 0, "queued: concurrent session loops (default 3 × --max-concurrency)")
	fs.DurationVar(&c.Hold, "hold", loadtest.DefaultHold, "queued: how long each client holds its session")
	fs.DurationVar(&c.Timeout, "timeout", loadtest.DefaultTimeout, "bound of every request")
	fs.DurationVar(&c.WarmupTimeout, "warmup-timeout", loadtest.DefaultWarmupTimeout, "bound of the wait for warm pods")
	fs.DurationVar(&c.ProgressEvery, "progress", loadtest.DefaultProgress, "interval of the progress line on stderr (negative = none)")
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loadtest: unexpected argument %q", fs.Arg(0))
	}
	if c.Touches == 0 {
		c.Touches = -1 // none; Config takes 0 as "the default"
	}
	if *scenario != "all" {
		for _, s := range strings.Split(*scenario, ",") {
			c.Scenarios = append(c.Scenarios, strings.TrimSpace(s))
		}
	}
	// Refuse a non-loopback target before anything else happens.
	if err := loadtest.CheckLoopback(c.Server); err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	res, runErr := loadtest.Run(ctx, c, stderr)
	if res == nil {
		return fmt.Errorf("loadtest: %w", runErr)
	}
	if err := res.WriteSummary(stdout); err != nil {
		return err
	}
	if *out != "" {
		jsonPath, htmlPath, err := res.WriteFiles(*out)
		if err != nil {
			return fmt.Errorf("loadtest: %w", err)
		}
		if _, err := fmt.Fprintf(stdout, "\nwrote %s and %s\n", jsonPath, htmlPath); err != nil {
			return err
		}
	}
	if runErr != nil {
		return fmt.Errorf("loadtest: %w", runErr)
	}
	return nil
}
