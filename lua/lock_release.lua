-- lock_release.lua: release a lease lock, only for its holder.
-- KEYS[1] lock key  STRING holder token, PX lease
-- ARGV[1] token
-- Returns 1 when released, 0 when the caller did not hold it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
