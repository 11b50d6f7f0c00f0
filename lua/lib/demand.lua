-- lib/demand.lua: demand (warm_policy "demand", SPEC §11.3). A scope under it counts,
-- across replicas, the slots its pods' callers take (a session bound to a free slot, a
-- hold, a place in a deploy's room, a deploy led for a caller, a slot granted to a
-- waiter) and the slots freed on pods of the current deploy_ver that stay in the pool
-- (a slot handed straight to a waiter is neither). Each count is kept twice, decayed
-- exponentially with a fast and a slow time constant: a count decayed with time
-- constant tau, divided by tau, is the rate of the last tau or so, and the two rates
-- together give the trend. idle_target turns them into the idle pods to keep
-- (docs/architecture.md, "Demand-driven warm pools").
local DEMAND_FAST, DEMAND_SLOW = 15000, 60000
-- DEMAND_HEADROOM is k in the burst headroom k * sqrt(slots taken over the lead time,
-- gross) (Poisson: k standard deviations of the takes; make pooltrace tuned it).
local DEMAND_HEADROOM = 0.5
-- DEMAND_DEPLOY is the deploy time assumed before the scope has a measured one (ms).
local DEMAND_DEPLOY = 10000

-- demand_counts reads the scope's counts decayed to now: takes and frees, each with
-- the fast and the slow time constant.
local function demand_counts(k, now)
  local d = redis.call('HMGET', k.demand, 't', 'in_fast', 'in_slow', 'out_fast', 'out_slow')
  local dt = math.max(0, now - (tonumber(d[1]) or now))
  local ff, fs = math.exp(-dt / DEMAND_FAST), math.exp(-dt / DEMAND_SLOW)
  return {in_fast = (tonumber(d[2]) or 0) * ff, in_slow = (tonumber(d[3]) or 0) * fs,
    out_fast = (tonumber(d[4]) or 0) * ff, out_slow = (tonumber(d[5]) or 0) * fs}
end

-- demand_note counts one slot taken (dir "in") or freed ("out") at now, when the
-- script takes the demand key and the scope's warm_policy is "demand" (demanding).
local function demand_note(k, now, dir, demanding)
  if not demanding or not k.demand then
    return
  end
  local c = demand_counts(k, now)
  c[dir .. '_fast'], c[dir .. '_slow'] = c[dir .. '_fast'] + 1, c[dir .. '_slow'] + 1
  redis.call('HSET', k.demand, 't', now, 'in_fast', c.in_fast, 'in_slow', c.in_slow,
    'out_fast', c.out_fast, 'out_slow', c.out_slow)
end

-- idle_target is how many idle pods of the current version the scope keeps at now:
-- min_idle_pods under warm_policy "static"; under "demand" the slots its callers are
-- expected to take, net of the slots expected back, over the lead time of a refill
-- (the measured deploy time, k.dstats "est", plus period ms, the sweep's tick), with
-- headroom for bursts, in pods, within min_idle_pods and max_idle_pods (0: max_pods).
-- Returns the target and the figures it came from (rates per ms), read only.
local function idle_target(k, now, period)
  local cfg = redis.call('HMGET', k.config, 'warm_policy', 'min_idle', 'max_idle', 'max_pods', 'pod_concurrency')
  local min_idle = tonumber(cfg[2] or '0')
  local f = {policy = cfg[1] or 'static', min_idle = min_idle, target = min_idle}
  if f.policy ~= 'demand' then
    return min_idle, f
  end
  local max_idle = tonumber(cfg[3] or '0')
  if max_idle == 0 then
    max_idle = tonumber(cfg[4] or '0')
  end
  f.max_idle = max_idle
  local c = demand_counts(k, now)
  f.deploy = tonumber(redis.call('HGET', k.dstats, 'est') or DEMAND_DEPLOY)
  f.lead = f.deploy + period
  f.takes, f.frees = c.in_fast / DEMAND_FAST, c.out_fast / DEMAND_FAST
  -- A count decayed with time constant tau follows a rate that grows linearly with a
  -- lag of tau: the fast and the slow net rate, tau apart, give the slope, which
  -- carries the fast rate to the middle of the lead time.
  local fast, slow = f.takes - f.frees, (c.in_slow - c.out_slow) / DEMAND_SLOW
  f.trend = (fast - slow) / (DEMAND_SLOW - DEMAND_FAST)
  f.need = math.max(0, (fast + f.trend * (DEMAND_FAST + f.lead / 2)) * f.lead)
  local pods = math.ceil((f.need + DEMAND_HEADROOM * math.sqrt(f.takes * f.lead)) / tonumber(cfg[5] or '1'))
  f.target = math.max(min_idle, math.min(max_idle, pods))
  return f.target, f
end
