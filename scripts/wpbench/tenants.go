package main

import (
	"context"
	"io"

	"github.com/warmpool/warmpool/scripts/wpbench/bench"
)

// tenants is `wpbench tenants` (make tenants, issue 35): three tenants of weights
// 1/1/2 under --max-pods-total 60, one of them offering 10 × the others' load; the
// quiet two alone first, then with the loud one.
func tenants(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.TenantsConfig
	cmd := newCommand("tenants", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	fs.IntVar(&c.Cap, "max-pods-total", bench.DefaultTenantsCap, "the replica's --max-pods-total")
	fs.Float64Var(&c.QuietRate, "rate", bench.DefaultQuietRate, "new sessions a second of each quiet tenant")
	fs.IntVar(&c.LoudFactor, "loud", bench.DefaultLoudFactor, "the loud tenant's load, in quiet tenants'")
	fs.DurationVar(&c.Hold, "hold", bench.DefaultTenantsHold, "how long each session lives")
	fs.DurationVar(&c.Deploy, "deploy", bench.DefaultTenantsDeploy, "the fake driver's deploy time")
	fs.DurationVar(&c.Window, "window", bench.DefaultTenantsWindow, "how long each phase runs")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.Tenants(ctx, c)
	return report(stdout, res, err)
}

// quotaCost is `wpbench quotacost` (make quotacost, issue 35's target of ≤ 1 ms p99
// for the quota check at 2,500 routes/s across replicas): the same routes without
// quotas, with tenants' quotas far above their use, and under --max-pods-total too.
func quotaCost(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.QuotaCostConfig
	cmd := newCommand("quotacost", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	fs.Float64Var(&c.Rate, "rate", bench.DefaultQuotaCostRate, "new sessions a second, over every replica")
	fs.IntVar(&c.Replicas, "replicas", bench.DefaultQuotaCostReplicas, "replicas on the one redis-server")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultQuotaCostScopes, "scopes, spread over three tenants")
	fs.DurationVar(&c.Hold, "hold", bench.DefaultQuotaCostHold, "how long each session lives")
	fs.DurationVar(&c.Window, "window", bench.DefaultQuotaCostWindow, "how long each phase routes")
	fs.IntVar(&c.Runs, "runs", 1, "how often the three phases run, in turn")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.QuotaCost(ctx, c)
	return report(stdout, res, err)
}
