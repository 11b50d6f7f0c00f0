-- lock_extend.lua: extend a lease lock, only for its holder.
-- KEYS[1] lock key  STRING holder token, PX lease
-- ARGV[1] token  ARGV[2] lease (ms)
-- Returns 1 when extended, 0 when the caller does not hold it.
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
