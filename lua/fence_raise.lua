-- fence_raise.lua: raise the fencing counter to at least the highest number a pod in
-- the cluster carries, so that after Redis lost its data new deploys never reuse a
-- live pod's number (and name).
-- KEYS: fence
-- ARGV[1] lowest allowed value
-- Returns the counter.
local k = scope_keys(KEYS)
local cur = tonumber(redis.call('GET', k.fence) or '0')
local want = tonumber(ARGV[1])
if cur < want then
  redis.call('SET', k.fence, want)
  return want
end
return cur
