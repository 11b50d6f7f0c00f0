-- lock_extend.lua: extend a lease lock, only for its holder.
-- KEYS: | extra: lock
-- ARGV[1] token  ARGV[2] lease (ms)
-- Returns 1 when extended, 0 when the caller does not hold it.
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local k = scope_keys(KEYS)
if redis.call('GET', k.lock) == ARGV[1] then
  redis.call('PEXPIRE', k.lock, ARGV[2])
  return 1
end
return 0
