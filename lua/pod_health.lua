-- pod_health.lua: count a registered pod's consecutive failed health probes; a
-- passing probe resets the count.
-- KEYS: pods health
-- ARGV[1] pod id  ARGV[2] "1" when the probe passed, "0" when it failed
-- Returns the consecutive failures now (0 for a passing probe or an unknown pod).
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local k = scope_keys(KEYS)
if ARGV[2] == '1' or not redis.call('ZSCORE', k.pods, ARGV[1]) then
  redis.call('HDEL', k.health, ARGV[1])
  return 0
end
return redis.call('HINCRBY', k.health, ARGV[1], 1)
