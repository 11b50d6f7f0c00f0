-- tenant_credit.lua: allowance a scope gave back returns to its tenant's escrow
-- (tenant_grant.lua): n pods (with the cpu and memory they were granted with, in
-- proportion) or n sessions, at most what the scope was granted; the release rate of
-- the dimension (lib/escrow.lua) moves on by what came back.
-- KEYS: | extra: escrow
-- uses: escrow
-- ARGV[1] scope  ARGV[2] "pods"|"sessions"  ARGV[3] n  ARGV[4] now (ms)
-- ARGV[5] "1": not a release (a grant taken back unused): the rate does not move
-- Returns the number credited.
local k = scope_keys(KEYS)
local scope, dim, now = ARGV[1], ARGV[2], tonumber(ARGV[4])
local fields = dim == 'pods' and {'pods', 'cpu_m', 'memory_b'} or {'sessions'}
local granted = tonumber(redis.call('HGET', k.escrow, fields[1] .. '|' .. scope) or '0')
local n = math.min(tonumber(ARGV[3]), granted)
if n <= 0 then
  return 0
end
for _, f in ipairs(fields) do
  local mine = tonumber(redis.call('HGET', k.escrow, f .. '|' .. scope) or '0')
  local back = math.floor(mine * n / granted)
  if back == mine then
    redis.call('HDEL', k.escrow, f .. '|' .. scope)
  else
    redis.call('HINCRBY', k.escrow, f .. '|' .. scope, string.format('%d', -back))
  end
  redis.call('HINCRBY', k.escrow, f, string.format('%d', -back))
end
if ARGV[5] ~= '1' then
  note_release(k.escrow, dim, n, now)
end
return n
