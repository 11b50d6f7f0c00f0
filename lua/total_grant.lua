-- total_grant.lua: the deployment's escrow of --max-pods-total (SPEC §12.1) grants a
-- tenant n more pods for one of its scopes (after tenant_grant.lua did), while the
-- grants of every tenant together stay within the cap, and while the cap binds, in
-- weighted max-min order. A tenant refused here is a rival for want_ms from then: it
-- has live demand, as much as it was refused since it became one less what it was
-- granted since ("want|<tenant>"). The rivals and the asker share what the other
-- tenants hold not, each by its weight; a tenant within its share is granted whenever
-- the cap leaves room, one above it only while the room left after the grant still
-- covers what every rival below its share lacks of it, as far as it wants it (so a
-- tenant's grant above its share never comes out of what a rival below its share
-- waits for, and no pod is kept from use for a demand nobody showed). A warm refill is granted by the same
-- rules, but its refusal does not make its tenant a rival: a refill is no live demand,
-- and yields to the rivals'. No pod is taken back: a tenant over its share comes down
-- to it as its pods go (sessions end, idle pods are reclaimed), since the rivals are
-- served first.
-- Runs on the total's slot; the cap comes with each call (ARGV[8], the replica's
-- --max-pods-total), so no write Redis lost and no pass not yet run leaves it unset;
-- counts are in the total HASH: "pods" over every tenant, "pods|<tenant>", "s|<scope>" per scope (what a
-- credit may give back), "w|<tenant>" its weight, "want|<tenant>" a rival's demand,
-- and the release rate of pods
-- (lib/escrow.lua). The rivals are the want ZSET (tenant -> until, ms); each tenant
-- granted is noted in the granted SET, which the tenants job takes (total.go).
-- KEYS: | extra: total want granted
-- uses: escrow
-- ARGV[1] tenant  ARGV[2] scope  ARGV[3] n  ARGV[4] the tenant's weight  ARGV[5] now
-- (ms)  ARGV[6] "1": adopt (use already taken: granted whatever the cap)
-- ARGV[7] "1": a warm refill (refused, it is no rival)  ARGV[8] the cap (pods)
-- Returns {"granted"}
--       | {"refused", limit, use, retry after (ms)}: use is what every tenant holds
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local k = scope_keys(KEYS)
local tenant, scope, n, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[5])
local want_ms = 10000

local function num(field)
  return tonumber(redis.call('HGET', k.total, field) or '0')
end

local limit = tonumber(ARGV[8])
local total, mine = num('pods'), num('pods|' .. tenant)
if ARGV[6] ~= '1' then
  redis.call('ZREMRANGEBYSCORE', k.want, '-inf', now)
  -- the contenders: the rivals and the asker, with their weights and holdings
  local weights, held = {[tenant] = tonumber(ARGV[4])}, {[tenant] = mine}
  local sum_w, sum_held = weights[tenant], mine
  for _, r in ipairs(redis.call('ZRANGE', k.want, 0, -1)) do
    if r ~= tenant then
      weights[r], held[r] = math.max(1, num('w|' .. r)), num('pods|' .. r)
      sum_w, sum_held = sum_w + weights[r], sum_held + held[r]
    end
  end
  local room = limit - (total - sum_held) -- what the contenders may hold together
  local function share(t)
    return math.floor(room * weights[t] / sum_w)
  end
  -- what the rivals below their shares lack of them
  local reserve = 0
  for r in pairs(weights) do
    if r ~= tenant then
      reserve = reserve + math.max(0, math.min(share(r) - held[r], num('want|' .. r)))
    end
  end
  local within = mine + n <= share(tenant)
  if total + n > limit or not (within or reserve <= limit - total - n) then
    if ARGV[7] ~= '1' then
      -- a rival anew (none, or its time past) wants what it asks; one still a rival
      -- wants that more
      local wanted = n
      if redis.call('ZSCORE', k.want, tenant) then
        wanted = num('want|' .. tenant) + n
      end
      redis.call('ZADD', k.want, now + want_ms, tenant)
      redis.call('HSET', k.total, 'w|' .. tenant, ARGV[4], 'want|' .. tenant, string.format('%d', wanted))
    end
    -- one pod comes back in 1 / rate seconds (1 s to 60 s)
    local rate = release_rate(k.total, 'pods', now)
    local retry = 60000
    if rate > 1 / 60 then
      retry = math.max(1000, math.ceil(1000 / rate))
    end
    return {'refused', string.format('%d', limit), string.format('%d', total), string.format('%d', retry)}
  end
end
redis.call('HINCRBY', k.total, 'pods', string.format('%d', n))
redis.call('HINCRBY', k.total, 'pods|' .. tenant, string.format('%d', n))
redis.call('HINCRBY', k.total, 's|' .. scope, string.format('%d', n))
redis.call('HSET', k.total, 'w|' .. tenant, ARGV[4])
local wanted = num('want|' .. tenant)
if wanted > n then
  redis.call('HINCRBY', k.total, 'want|' .. tenant, string.format('%d', -n))
elseif wanted > 0 then
  redis.call('HDEL', k.total, 'want|' .. tenant)
end
redis.call('SADD', k.granted, tenant)
return {'granted'}
