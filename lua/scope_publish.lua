-- scope_publish.lua: publish a scope's config, unless a newer version is already
-- published (two replicas storing v1 and v2 may publish in either order). A new scope
-- gets its epoch key when the keyspace is live, so it is routable at once.
-- KEYS[1] {s}:config  HASH   published scope config
-- KEYS[2] {s}:epoch   STRING scope epoch
-- ARGV[1] version  ARGV[2] global epoch ("" while the keyspace is being rebuilt)
-- ARGV[3..] field, value, ... of the config hash
-- Returns 1 when published, 0 when a newer version was there.
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if cur > tonumber(ARGV[1]) then
  return 0
end
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[2], ARGV[2], 'NX')
end
return 1
