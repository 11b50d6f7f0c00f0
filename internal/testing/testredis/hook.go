package testredis

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// EachCommand is a go-redis hook that calls its function with every command before
// the command is sent, alone or in a pipeline. The function may change the command's
// arguments (to swap a script, say) or record them.
type EachCommand func(cmd redis.Cmder)

// DialHook passes through.
func (f EachCommand) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook calls f with the command.
func (f EachCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook calls f with every command of the pipeline.
func (f EachCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			f(cmd)
		}
		return next(ctx, cmds)
	}
}

// Failing is a go-redis hook that fails the commands its match selects, as a Redis that
// could not be reached would (the command is not sent), until it has failed n of them;
// commands in a pipeline pass.
type Failing struct {
	match func(cmd redis.Cmder) bool
	mu    sync.Mutex
	left  int
	// failed counts the commands failed so far.
	failed int
}

// ErrInjected is the error of the commands a Failing hook fails.
var ErrInjected = errors.New("testredis: injected failure: connection reset")

// FailCommands returns a hook that fails the next n commands match selects (n < 0:
// every one until Stop).
func FailCommands(n int, match func(cmd redis.Cmder) bool) *Failing {
	return &Failing{match: match, left: n}
}

// Failed is how many commands the hook failed.
func (f *Failing) Failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// Stop makes the hook fail no more commands.
func (f *Failing) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = 0
}

func (f *Failing) take(cmd redis.Cmder) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.left == 0 || !f.match(cmd) {
		return false
	}
	if f.left > 0 {
		f.left--
	}
	f.failed++
	return true
}

// DialHook passes through.
func (f *Failing) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook fails the command when it is one of those to fail.
func (f *Failing) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.take(cmd) {
			cmd.SetErr(ErrInjected)
			return ErrInjected
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook passes through.
func (f *Failing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Named selects the commands of one name (lower case, "sadd") whose first key starts
// with prefix.
func Named(name, prefix string) func(cmd redis.Cmder) bool {
	return func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return cmd.Name() == name && len(args) > 1 && strings.HasPrefix(Arg(args[1]), prefix)
	}
}
