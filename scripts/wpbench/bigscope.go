package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/warmpool/warmpool/scripts/wpbench/bench"
)

// bigScope is `wpbench bigscope` (make bigscope, issue 33): one scope of 10, 1,000 and
// 10,000 pods at pod_concurrency 1 and 8 on the fake driver and a real redis-server,
// the Redis commands and CPU of a warm route, a release, a warm acquire, a hold release
// and a cold route; then cold bursts of 5,000 routes into one empty scope; then an idle
// scope of 10,000 warm pods, sweeps on.
func bigScope(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.BigScopeConfig
	cmd := newCommand("bigscope", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	sizes := fs.String("sizes", "10,1000,10000", "the scope's pods, one run each")
	pcs := fs.String("pod-concurrency", "1,8", "the pod_concurrency of each run")
	rates := fs.String("burst-rates", "500,2000", "routes a second of the cold bursts")
	fs.IntVar(&c.Ops, "ops", bench.DefaultBigScopeOps, "the least operations of each kind measured")
	fs.IntVar(&c.Workers, "workers", bench.DefaultBigScopeWorkers, "concurrent calls of the measured windows")
	fs.IntVar(&c.Idle, "idle", bench.DefaultBigScopeIdle, "idle pods of each size (at most half of it) that warm routes and acquires take")
	fs.IntVar(&c.Cold, "cold", bench.DefaultBigScopeCold, "deploys of each cold window")
	fs.IntVar(&c.BurstRoutes, "burst", bench.DefaultBurstRoutes, "routes of each cold burst (negative: no burst)")
	fs.DurationVar(&c.BurstDeploy, "burst-deploy", bench.DefaultBurstDeploy, "the fake driver's deploy time in the bursts")
	fs.IntVar(&c.IdlePods, "idle-pods", bench.DefaultIdlePods, "warm pods of the idle scope measured last, sweeps on (negative: none)")
	fs.DurationVar(&c.IdleWindow, "idle-window", bench.DefaultIdleWindow, "how long the idle scope is measured")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	var err error
	if c.Sizes, err = ints(*sizes); err != nil {
		return fmt.Errorf("--sizes: %w", err)
	}
	if c.PodConcurrency, err = ints(*pcs); err != nil {
		return fmt.Errorf("--pod-concurrency: %w", err)
	}
	for _, f := range strings.Split(*rates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return fmt.Errorf("--burst-rates: %q is no rate", f)
		}
		c.BurstRates = append(c.BurstRates, r)
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.BigScope(ctx, c)
	return report(stdout, res, err)
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is no positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
