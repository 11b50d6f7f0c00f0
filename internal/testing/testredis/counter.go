package testredis

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook that counts round trips: one per command, one per
// pipeline.
type Counter struct {
	n atomic.Int64
}

// Count is the number of round trips so far.
func (c *Counter) Count() int64 { return c.n.Load() }

// DialHook passes through.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one pipeline.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}
