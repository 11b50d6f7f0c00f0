-- lib/escrow.lua: the release rate of a tenant's escrow (tenant_grant.lua,
-- tenant_credit.lua): per dimension ("pods", "sessions"), the units that came back,
-- as an exponentially decayed count over release_tau_ms, in units per second, kept in
-- the escrow HASH as "rate|<dim>" and the time it was last decayed, "rate_t|<dim>".

local release_tau_ms = 30000

-- release_rate is the dimension's release rate at now (units per second).
local function release_rate(escrow, dim, now)
  local r = redis.call('HMGET', escrow, 'rate|' .. dim, 'rate_t|' .. dim)
  local rate, t = tonumber(r[1] or '0'), tonumber(r[2] or now)
  return rate * math.exp(-math.max(0, now - t) / release_tau_ms)
end

-- note_release counts n units of the dimension back at now.
local function note_release(escrow, dim, n, now)
  local rate = release_rate(escrow, dim, now) + n * 1000 / release_tau_ms
  redis.call('HSET', escrow, 'rate|' .. dim, string.format('%.6f', rate), 'rate_t|' .. dim, now)
end
