-- waiter_gate.lua: admission to the scope's waiter queue: drop expired waiters, add
-- first, remove self when over queue_size (never check-then-add).
-- KEYS[1] {s}:epoch    STRING scope epoch
-- KEYS[2] {s}:config   HASH   published scope config
-- KEYS[3] {s}:waiters  ZSET   waiter id -> deadline (ms)
-- ARGV[1] now (ms)  ARGV[2] waiter id
-- Returns {"ok", deadline} | {"full", queue_size} | {"no_wait"} (queue_size or
--         wait_timeout_s is 0) | {"NO_SCOPE"} | {"EPOCH_LOST"}
local cfg, refused = scope_config(KEYS[1], KEYS[2], 'queue_size', 'wait_ms')
if not cfg then
  return refused
end
local size, wait = tonumber(cfg[1]), tonumber(cfg[2])
if size == 0 or wait == 0 then
  return {'no_wait'}
end
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local deadline = now + wait
redis.call('ZADD', KEYS[3], deadline, ARGV[2])
if redis.call('ZCARD', KEYS[3]) > size then
  redis.call('ZREM', KEYS[3], ARGV[2])
  return {'full', tostring(size)}
end
return {'ok', tostring(deadline)}
