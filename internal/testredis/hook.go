package testredis

import (
	"context"

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
