-- lock_obtain.lua: take a lease lock, or renew it when the caller already holds it.
-- KEYS[1] lock key  STRING holder token, PX lease
-- ARGV[1] token  ARGV[2] lease (ms)
-- Returns 1 when held by the caller now, else 0.
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
