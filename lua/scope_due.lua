-- scope_due.lua: set the scope's due time to when its next sweep work falls due, after
-- the sweeper looked at the scope: the earliest session expiry, claim, deploy lease,
-- room entry or waiter deadline; an idle pod of an old deploy_ver, or beyond max_pods
-- (the key surplus), at once, or when the prewarm of a rollout ends for an idle pod of the
-- version it serves; an idle pod of the current one (beyond the newest idle_target
-- pods, which are kept) when pod_ttl_s has passed, and under warm_policy "demand" one
-- kept beyond min_idle_pods a pod_ttl_s from now too (the target falls as the demand
-- decays, with no script to note it); the end of a refill backoff
-- still to come (the refill tries again then); and at once a pool with fewer warm pods
-- (its warm deploys in flight counted) than it keeps and room to deploy one, which
-- pod_placeholder.lua would start: a due time that only a visit's refill would leave
-- behind, so that a full pass auditing the index between a publish's note and the
-- visit does not drop the refill. Scripts only move the due
-- time earlier (note_due in lib/due.lua); this is the one script that moves it later,
-- reading the state it is computed from in the same step, so a note made before it is
-- counted and one made after it is kept. It reads the pods from the indexes of
-- lib/index.lua (warm, warmprev, surplus) and the sizes of idle, O(log P), and the
-- deploys in flight only when the idle pods fall short of those kept (refill_refusal).
-- KEYS: config pods idle deploying followers claims sexp waiters dstats due backoff
--       demand warm warmprev surplus
-- uses: demand refill surplus
-- ARGV[1] now (ms)  ARGV[2] the sweep's tick (ms), for the demand target (idle_target)
-- Returns the due time (ms, as a string), or "" when nothing is due (the key is deleted:
-- an unknown scope has nothing due either).
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local t = nil
local function at(v)
  v = tonumber(v)
  if not t or v < t then
    t = v
  end
end
for _, key in ipairs({k.sexp, k.claims, k.deploying, k.followers, k.waiters}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then
    at(first[2])
  end
end
local cfg = redis.call('HMGET', k.config, 'deploy_ver', 'min_idle', 'pod_ttl_ms', 'prewarm_until',
  'max_pods', 'parallel', 'deleted')
local prev = prewarm_ver(k, now)
if cfg[1] then
  local keep = idle_target(k, now, tonumber(ARGV[2]))
  local min_idle, ttl = tonumber(cfg[2]), tonumber(cfg[3])
  local warm, beyond = redis.call('ZCARD', k.warm), redis.call('ZCOUNT', k.surplus, 0, 0)
  local others = redis.call('ZCARD', k.idle) - warm
  if prev then
    local serving = redis.call('ZCARD', k.warmprev)
    others = others - serving
    if serving > 0 then
      at(cfg[4])
    end
  end
  -- an idle pod of another version (or none), or beyond max_pods, at once
  if others > 0 or beyond > 0 then
    at(now)
  end
  -- the current version's other idle pods, newest first: the first keep are kept, those
  -- beyond min_idle_pods among them (the demand's) go a pod_ttl_s from now, the others
  -- each a pod_ttl_s after it went idle, the oldest first
  local kept = warm - beyond
  if math.min(kept, keep) > min_idle then
    at(now + ttl)
  end
  if kept > keep then
    at(tonumber(redis.call('ZRANGE', k.warm, beyond, beyond, 'WITHSCORES')[2]) + ttl)
  end
  -- a refill pod_placeholder.lua would start (a full pool, the parallel bound and a
  -- backoff are noted as they end: a pod purged, a deploy done, the backoff's end)
  if not cfg[7] and not refill_refusal(k, now, keep, tonumber(cfg[5]), tonumber(cfg[6])) then
    at(now)
  end
end
local ends = tonumber(redis.call('HGET', k.backoff, 'until'))
if ends and ends > now then
  at(ends)
end
if not t then
  redis.call('DEL', k.due)
  return ''
end
redis.call('SET', k.due, t)
return tostring(t)
