-- pod_purge.lua: forget a dead or reclaimed pod: every key of it, the sessions bound to
-- it and the claims on it (their holders get a note). Idempotent. With ARGV[3] set, the
-- pod is purged only if it is still idle since exactly that time, so a pod that got a
-- session in between is not touched.
-- KEYS[1]  {s}:epoch      STRING scope epoch
-- KEYS[2]  {s}:config     HASH   published scope config
-- KEYS[3]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[5]  {s}:podinfo    HASH   pod id -> pod JSON
-- KEYS[6]  {s}:slots      HASH   pod id -> sessions + claims
-- KEYS[7]  {s}:idle       ZSET   pod id -> idle since (ms)
-- KEYS[8]  {s}:claimpod   HASH   claim id -> pod id | "!reason"
-- KEYS[9]  {s}:sessions   HASH   session id -> pod id
-- KEYS[10] {s}:sexp       ZSET   session id -> expiry (ms)
-- KEYS[11] {s}:health     HASH   pod id -> consecutive failed probes
-- KEYS[12] {s}:due        STRING when the scope's next sweep work falls due (ms)
-- KEYS[13] {s}:agents     HASH   the pods' report records
-- KEYS[14] {s}:served     HASH   pod id -> slots handed out over its life (max_sessions_per_pod)
-- KEYS[15] {s}:fixed      SET    sessions whose expiry is fixed (routes, touches, reports keep it)
-- KEYS[16] gone {s}:gone:<pod>  STRING the pod's tombstone (reason), so reconcile does not
--          adopt it again while it is being deleted or a lagging list still shows it
-- ARGV[1] pod id  ARGV[2] reason  ARGV[3] expected idle since (ms), or "" for any state
-- ARGV[4] tombstone TTL (ms)
-- Returns {"purged", n sessions released, session ids...} | {"busy"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due in _lib.lua): the answer is then {"DUE", due, answer} when a
-- note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
if redis.call('EXISTS', k.epoch) == 0 then
  return {'EPOCH_LOST'}
end
local pod = ARGV[1]
if ARGV[3] ~= '' then
  local since = redis.call('ZSCORE', k.idle, pod)
  if not since or tonumber(since) ~= tonumber(ARGV[3]) then
    return {'busy'}
  end
end
local out = {'purged', '0'}
local all = redis.call('HGETALL', k.sessions)
for i = 1, #all, 2 do
  if all[i + 1] == pod then
    redis.call('HDEL', k.sessions, all[i])
    redis.call('ZREM', k.sexp, all[i])
    redis.call('SREM', k.fixed, all[i])
    out[#out + 1] = all[i]
  end
end
out[2] = tostring(#out - 2)
local cp = redis.call('HGETALL', k.claimpod)
for i = 1, #cp, 2 do
  if cp[i + 1] == pod then
    redis.call('HSET', k.claimpod, cp[i], '!pod ' .. pod .. ' is gone: ' .. ARGV[2])
  end
end
redis.call('ZREM', k.pods, pod)
redis.call('HDEL', k.podver, pod)
redis.call('HDEL', k.podinfo, pod)
redis.call('HDEL', k.slots, pod)
redis.call('ZREM', k.idle, pod)
redis.call('HDEL', k.health, pod)
redis.call('HDEL', k.served, pod)
redis.call('HDEL', k.agents, pod, pod .. '|miss')
redis.call('SET', k.gone, ARGV[2], 'PX', ARGV[4])
note_fill()
return out
