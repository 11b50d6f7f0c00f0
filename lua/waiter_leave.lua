-- waiter_leave.lua: a waiter that was served or gave up leaves the queue.
-- KEYS[1] {s}:waiters  ZSET waiter id -> deadline (ms)
-- ARGV[1] waiter id
-- Returns 1 when it was queued, else 0.
return redis.call('ZREM', KEYS[1], ARGV[1])
