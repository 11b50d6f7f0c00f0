-- pod_purge.lua: forget a dead or reclaimed pod: every key of it, the sessions bound to
-- it and the claims on it (their holders get a note). Idempotent. With ARGV[3] set, the
-- pod is purged only if it is still idle since exactly that time, so a pod that got a
-- session in between is not touched.
-- KEYS[1]  {s}:epoch     STRING scope epoch
-- KEYS[2]  {s}:pods      ZSET   pod id -> registered at (ms)
-- KEYS[3]  {s}:podver    HASH   pod id -> deploy_ver
-- KEYS[4]  {s}:podinfo   HASH   pod id -> pod JSON
-- KEYS[5]  {s}:slots     HASH   pod id -> sessions + claims
-- KEYS[6]  {s}:idle      ZSET   pod id -> idle since (ms)
-- KEYS[7]  {s}:claimpod  HASH   claim id -> pod id | "!reason"
-- KEYS[8]  {s}:sessions  HASH   session id -> pod id
-- KEYS[9]  {s}:sexp      ZSET   session id -> expiry (ms)
-- KEYS[10] {s}:health    HASH   pod id -> consecutive failed probes
-- KEYS[11] {s}:gone:<pod> STRING the pod's tombstone (reason), so reconcile does not
--          adopt it again while it is being deleted or a lagging list still shows it
-- ARGV[1] pod id  ARGV[2] reason  ARGV[3] expected idle since (ms), or "" for any state
-- ARGV[4] tombstone TTL (ms)
-- Returns {"purged", n sessions released, session ids...} | {"busy"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'EPOCH_LOST'}
end
local pod = ARGV[1]
if ARGV[3] ~= '' then
  local since = redis.call('ZSCORE', KEYS[6], pod)
  if not since or tonumber(since) ~= tonumber(ARGV[3]) then
    return {'busy'}
  end
end
local out = {'purged', '0'}
local all = redis.call('HGETALL', KEYS[8])
for i = 1, #all, 2 do
  if all[i + 1] == pod then
    redis.call('HDEL', KEYS[8], all[i])
    redis.call('ZREM', KEYS[9], all[i])
    out[#out + 1] = all[i]
  end
end
out[2] = tostring(#out - 2)
local cp = redis.call('HGETALL', KEYS[7])
for i = 1, #cp, 2 do
  if cp[i + 1] == pod then
    redis.call('HSET', KEYS[7], cp[i], '!pod ' .. pod .. ' is gone: ' .. ARGV[2])
  end
end
redis.call('ZREM', KEYS[2], pod)
redis.call('HDEL', KEYS[3], pod)
redis.call('HDEL', KEYS[4], pod)
redis.call('HDEL', KEYS[5], pod)
redis.call('ZREM', KEYS[6], pod)
redis.call('HDEL', KEYS[10], pod)
redis.call('SET', KEYS[11], ARGV[2], 'PX', ARGV[4])
note_fill()
return out
