package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/warmpool/warmpool/scripts/wpbench/bench"
)

// sessionConfig runs wpbench sessionconfig: routes carrying a session_config against
// plain routes on one warm pool (issue 34). It fails when the secret's value was
// found in the replica's log or /metrics, the table written all the same.
func sessionConfig(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.SessionConfigBench
	cmd := newCommand("sessionconfig", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	fs.DurationVar(&c.Delay, "deploy-delay", bench.DefaultConfigDelay, "how long each deploy of the fake driver takes")
	fs.Float64Var(&c.Rate, "rate", bench.DefaultConfigRate, "new sessions a second")
	fs.DurationVar(&c.Life, "life", bench.DefaultConfigLife, "how long each session lives")
	fs.IntVar(&c.MinIdle, "min-idle", bench.DefaultConfigMinIdle, "the scope's min_idle_pods (pods of 4 sessions)")
	fs.DurationVar(&c.Warmup, "warmup", bench.DefaultConfigWarmup, "plain routes before the measured windows, to reach the load's steady state")
	fs.DurationVar(&c.Window, "window", bench.DefaultConfigWindow, "length of each measured window")
	fs.IntVar(&c.Rounds, "rounds", bench.DefaultConfigRounds, "pairs of windows, plain and config routes in turn")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sessionconfig takes no arguments, got %q", fs.Args())
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"--rate", c.Rate > 0}, {"--life", c.Life > 0}, {"--window", c.Window > 0}, {"--rounds", c.Rounds > 0}, {"--min-idle", c.MinIdle > 0}, {"--deploy-delay", c.Delay > 0}} {
		if !f.ok {
			return fmt.Errorf("%s: want a positive value", f.name)
		}
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.SessionConfigs(ctx, c)
	if res != nil && len(res.Searched) > 0 {
		err = errors.Join(err, res.WriteText(stdout))
	}
	return err
}
