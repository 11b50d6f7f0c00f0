-- agent_report.lua: one report of a pod's agent (SPEC §11.2), in one step. Liveness:
-- the pod is spared the probes until three report intervals after the report that
-- last moved its time, which moves only when less than two intervals of it are left,
-- so the shard's index (written by the caller) is written every other report. Activity:
-- each listed session bound to the pod has its TTL refreshed (but one of a fixed
-- expiry, which activity does not move). Rebuild: a listed session bound to no pod
-- whose session_ticket the caller found valid for this pod (SPEC §12.4: it was routed
-- here) takes one of the pod's adopted claims ("adopted:<pod>:<n>", held since Redis
-- lost the pod's sessions) and is bound to the pod again, so never more than
-- pod_concurrency; any other listed session is unknown (ended, expired, bound
-- elsewhere, or without a valid ticket: another pod's agent cannot take a session by
-- naming it first). In a scope governed in sessions (lib/quota.lua) such a session is
-- bound whatever the quota (it runs already), but counted: past the allowance q_sess
-- it takes one of the sessions the caller took from its tenant's escrow, raising the
-- allowance by it; with none left the report stops there and answers "escrow" (what
-- it did so far stays: refreshed expiries and bindings, which the call again finds
-- done), so that the tenant's other scopes are granted no session over the quota
-- beside it. Ground truth (sessions_from_reports): a session bound to the pod
-- that this report and the last one both leave out is ended (its slot to the oldest
-- waiter, or freed). Draining: the pod gets podver DRAINING and takes nothing new;
-- idle, it is due at once and the sweep deletes it. A deleted scope's pods report too:
-- their sessions go on until they end. A report listing more sessions than the pod may
-- hold (pod_concurrency, or its slots when a lowered pod_concurrency left it more) is
-- refused before anything is touched: one report costs at most what a full pod's does.
-- KEYS: epoch config pods podver slots idle claims claimpod sessions sexp waiters queue
--       wake due agents served demand fixed sconf free freeprev warm warmprev busy
--       surplus podsess podclaims
-- uses: config due handoff index slots
-- ARGV[1] now (ms)  ARGV[2] pod id  ARGV[3] "1" when the agent drains, "0" when ready
-- ARGV[4] the default report interval (ms), for a config published without one
-- ARGV[5] grant deadline (ms)  ARGV[6] publish command  ARGV[7] the sessions the
-- caller took from the tenant's escrow for this call  ARGV[8] n, the number of proven
-- sessions (listed with a valid ticket)  ARGV[9..] those n sessions, then the listed
-- sessions
-- Returns {"ok", report interval (ms), spared until (ms, "0": unchanged), sessions
--          ended, the most the pod may list, of the escrow's sessions those unused,
--          n unknown, unknown session ids...}
--       | {"escrow", sessions, tenant}: the allowance is reached and the caller took
--         too few; Store.AgentReport takes that many more from the escrow, whatever
--         the quota, and calls again
--       | {"too_many", the most the pod may list} | {"unknown_pod"} | {"NO_SCOPE"}
--       | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local pod = ARGV[2]
local cfg, refused = published_config(k, 'session_ttl_ms', 'report_ms', 'sessions_from_reports', 'pod_concurrency', 'q_sess')
if not cfg then
  return refused
end
if not redis.call('ZSCORE', k.pods, pod) then
  return {'unknown_pod'}
end
local pc = tonumber(cfg[4])
local slots = tonumber(redis.call('HGET', k.slots, pod) or '0')
local most = math.max(pc, slots)
local first = 9 + tonumber(ARGV[8])
if #ARGV - first + 1 > most then
  return {'too_many', tostring(most)}
end
local proven = {}
for i = 9, first - 1 do
  proven[ARGV[i]] = true
end
local expiry = now + tonumber(cfg[1])
local interval = tonumber(cfg[2] or ARGV[4])
if ARGV[3] == '1' then
  local ver = redis.call('HGET', k.podver, pod)
  if ver ~= RETIRED and ver ~= DRAINING then
    redis.call('HSET', k.podver, pod, DRAINING)
    pod_index(k, pod)
  end
end

-- adopted_claim is a live adopted claim on the pod, or nil.
local function adopted_claim()
  for n = 1, 2 * pc do
    local c = 'adopted:' .. pod .. ':' .. n
    local deadline = redis.call('ZSCORE', k.claims, c)
    if deadline and tonumber(deadline) > now and redis.call('HGET', k.claimpod, c) == pod then
      return c
    end
  end
end

-- escrow_refusal is the answer that asks the escrow for the proven sessions from the
-- i-th listed on (at most what the pod may hold), unless the allowance has room for
-- one more binding or the caller's escrowed sessions still cover it (taking one).
local listed, unknown, on_pod = {}, {}, 0
local allowance, escrowed = tonumber(cfg[5]), tonumber(ARGV[7])
local function escrow_refusal(i)
  if not allowance or redis.call('HLEN', k.sessions) < allowance then
    return nil
  end
  if escrowed > 0 then
    escrowed = escrowed - 1
    allowance = allowance + 1
    redis.call('HSET', k.config, 'q_sess', allowance)
    return nil
  end
  local want, seen = 0, {}
  for j = i, #ARGV do
    local sid = ARGV[j]
    if proven[sid] and not listed[sid] and not seen[sid] then
      seen[sid] = true
      want = want + 1
    end
  end
  return {'escrow', tostring(math.min(want + 1, most)), redis.call('HGET', k.config, 'tenant') or ''}
end

for i = first, #ARGV do
  local sid = ARGV[i]
  if not listed[sid] then
    listed[sid] = true
    local bound = redis.call('HGET', k.sessions, sid)
    local c = nil
    if not bound and proven[sid] then
      c = adopted_claim()
    end
    if c then
      local refused = escrow_refusal(i + 1)
      if refused then
        return refused
      end
    end
    if bound == pod then
      if redis.call('SISMEMBER', k.fixed, sid) == 0 then
        redis.call('ZADD', k.sexp, expiry, sid)
      end
      on_pod = on_pod + 1
    elseif c then
      drop_claim(k, c)
      session_bind(k, sid, pod)
      redis.call('ZADD', k.sexp, expiry, sid)
      note_due(expiry)
      on_pod = on_pod + 1
    else
      unknown[#unknown + 1] = sid
    end
  end
end

local agent = redis.call('HMGET', k.agents, pod, pod .. '|miss')
local ended = 0
local q
if cfg[3] == '1' then
  local missed = {}
  if on_pod < slots then
    local left_out = {}
    for sid in string.gmatch(agent[2] or '', '%S+') do
      left_out[sid] = true
    end
    for _, sid in ipairs(pod_entries(k.podsess, pod)) do
      if not listed[sid] then
        if left_out[sid] then
          -- the handoff's config read only when a report ends a session
          q = q or handoff(k, now, ARGV[5], ARGV[6])
          evict_session(k, sid, now, q)
          ended = ended + 1
        else
          missed[#missed + 1] = sid
        end
      end
    end
  end
  if #missed > 0 then
    table.sort(missed)
    redis.call('HSET', k.agents, pod .. '|miss', table.concat(missed, ' '))
  elseif agent[2] then
    redis.call('HDEL', k.agents, pod .. '|miss')
  end
end

if ARGV[3] == '1' and redis.call('ZSCORE', k.idle, pod) then
  note_due(now)
end

local spared = '0'
if not agent[1] or tonumber(agent[1]) - now < 2 * interval then
  spared = tostring(now + 3 * interval)
  redis.call('HSET', k.agents, pod, spared)
end
local out = {'ok', tostring(interval), spared, tostring(ended), tostring(most), tostring(escrowed), tostring(#unknown)}
for _, sid in ipairs(unknown) do
  out[#out + 1] = sid
end
return out
