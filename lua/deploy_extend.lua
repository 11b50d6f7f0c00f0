-- deploy_extend.lua: extend a deploy lease, only for its holder and only while it has
-- not expired (an expired lease may already have been given up by a sweeper).
-- KEYS: deploying
-- ARGV[1] deploy member  ARGV[2] now (ms)  ARGV[3] new deadline (ms)
-- Returns 1 when extended, 0 when the lease is lost.
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local k = scope_keys(KEYS)
local lease = redis.call('ZSCORE', k.deploying, ARGV[1])
if not lease or tonumber(lease) <= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', k.deploying, 'XX', ARGV[3], ARGV[1])
return 1
