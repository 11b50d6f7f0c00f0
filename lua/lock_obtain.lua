-- lock_obtain.lua: take a lease lock when nobody holds it (SET NX PX); every obtain
-- brings a new token, so a holder never takes its own lock twice.
-- KEYS: | extra: lock
-- ARGV[1] token  ARGV[2] lease (ms)
-- Returns 1 when taken, 0 when another holder has it.
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local k = scope_keys(KEYS)
if redis.call('SET', k.lock, ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
