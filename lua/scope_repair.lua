-- scope_repair.lua: reconcile's pass over one scope's derived state. Expired deploy
-- leases, room entries, claims and waiters go (an expired claim's slot goes to the
-- oldest waiter first), queue entries of no waiter go; then every pod's slot count is recomputed
-- from the sessions and claims that point at it (never patched entry by entry), sessions
-- and claims on unknown pods are dropped, and the idle set is made to agree: a pod with
-- a slot is not idle, and idle pods keep their idle_since. The indexes of lib/index.lua
-- are then built again from what was repaired.
-- KEYS: epoch config pods podver slots idle deploying followers claims claimpod sessions
--       sexp waiters queue wake dstats due served demand sconf free freeprev warm warmprev
--       busy surplus podsess podclaims rooms open
-- uses: claimpod expire handoff index
-- ARGV[1] now (ms)  ARGV[2] note deadline (ms)
-- ARGV[3] "1" to recount (reads every session of the scope), "0" to expire only
-- ARGV[4] grant deadline (ms)  ARGV[5] publish command
-- Returns {fixed slot counts, dropped sessions, dropped claims, expired waiters,
--          expired deploys} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
if redis.call('EXISTS', k.epoch) == 0 then
  return {'EPOCH_LOST'}
end
local now = tonumber(ARGV[1])
local deploys = redis.call('ZCOUNT', k.deploying, '-inf', now)
local waiters = redis.call('ZCOUNT', k.waiters, '-inf', now)
local q = handoff(k, now, ARGV[4], ARGV[5])
expire_pool(k, now, ARGV[2], q)
drop_waiters(q)
for _, w in ipairs(redis.call('ZRANGE', k.queue, 0, -1)) do
  if not redis.call('ZSCORE', k.waiters, w) then
    redis.call('ZREM', k.queue, w)
    waiters = waiters + 1
  end
end
if ARGV[3] ~= '1' then
  return {'0', '0', '0', tostring(waiters), tostring(deploys)}
end

local count = {}
for _, pod in ipairs(redis.call('ZRANGE', k.pods, 0, -1)) do
  count[pod] = 0
end
-- tally counts the entries of an "id -> pod" HASH that name a registered pod and drops
-- those that name an unknown one (from the HASH, from the id's ZSET, and its
-- session_config: conf .. id in sconf).
local function tally(hash, zset, conf, names_pod)
  local dropped = 0
  local h = redis.call('HGETALL', hash)
  for i = 1, #h, 2 do
    local id, pod = h[i], h[i + 1]
    if not names_pod or names_pod(pod) then
      if count[pod] then
        count[pod] = count[pod] + 1
      else
        redis.call('HDEL', hash, id)
        redis.call('ZREM', zset, id)
        redis.call('HDEL', k.sconf, conf .. id)
        dropped = dropped + 1
      end
    end
  end
  return dropped
end
local dropped_sessions = tally(k.sessions, k.sexp, '')
local dropped_claims = tally(k.claimpod, k.claims, 'hold|', holds_pod)
local fixed = 0
for _, pod in ipairs(redis.call('HKEYS', k.slots)) do
  if not count[pod] then
    redis.call('HDEL', k.slots, pod)
    fixed = fixed + 1
  end
end
for pod, n in pairs(count) do
  if tonumber(redis.call('HGET', k.slots, pod) or '-1') ~= n then
    redis.call('HSET', k.slots, pod, n)
    fixed = fixed + 1
  end
  if n > 0 then
    redis.call('ZREM', k.idle, pod)
  end
end
for _, pod in ipairs(redis.call('ZRANGE', k.idle, 0, -1)) do
  if not count[pod] then
    redis.call('ZREM', k.idle, pod)
  end
end
redis.call('DEL', k.podsess, k.podclaims, k.rooms)
local h = redis.call('HGETALL', k.sessions)
for i = 1, #h, 2 do
  redis.call('ZADD', k.podsess, 0, h[i + 1] .. ' ' .. h[i])
end
h = redis.call('HGETALL', k.claimpod)
for i = 1, #h, 2 do
  if holds_pod(h[i + 1]) then
    redis.call('ZADD', k.podclaims, 0, h[i + 1] .. ' ' .. h[i])
  end
end
for _, f in ipairs(redis.call('ZRANGE', k.followers, 0, -1)) do
  redis.call('ZADD', k.rooms, 0, f)
end
index_rebuild(k)
room_rebuild(k)
return {tostring(fixed), tostring(dropped_sessions), tostring(dropped_claims), tostring(waiters), tostring(deploys)}
