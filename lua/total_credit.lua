-- total_credit.lua: pods a scope gave back return to the deployment's escrow of
-- --max-pods-total (total_grant.lua), at most what the scope was granted; the
-- release rate of pods (lib/escrow.lua) moves on by what came back.
-- KEYS: | extra: total
-- uses: escrow
-- ARGV[1] tenant  ARGV[2] scope  ARGV[3] n  ARGV[4] now (ms)
-- ARGV[5] "1": not a release (a grant taken back unused): the rate does not move
-- Returns the number credited.
local k = scope_keys(KEYS)
local tenant, scope, now = ARGV[1], ARGV[2], tonumber(ARGV[4])
local granted = tonumber(redis.call('HGET', k.total, 's|' .. scope) or '0')
local n = math.min(tonumber(ARGV[3]), granted)
if n <= 0 then
  return 0
end
local function take(field)
  local have = tonumber(redis.call('HGET', k.total, field) or '0')
  if have <= n then
    redis.call('HDEL', k.total, field)
  else
    redis.call('HINCRBY', k.total, field, string.format('%d', -n))
  end
end
take('s|' .. scope)
take('pods|' .. tenant)
take('pods')
if ARGV[5] ~= '1' then
  note_release(k.total, 'pods', n, now)
end
return n
