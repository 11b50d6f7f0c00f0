-- lock_release.lua: release a lease lock, only for its holder.
-- KEYS: | extra: lock
-- ARGV[1] token
-- Returns 1 when released, 0 when the caller did not hold it.
local k = scope_keys(KEYS)
if redis.call('GET', k.lock) == ARGV[1] then
  return redis.call('DEL', k.lock)
end
return 0
