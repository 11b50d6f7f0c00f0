-- scope_forget.lua: forget a deleted scope once nothing of it is left: no pod, no
-- deploy in flight. Every key below goes, the deploy estimate and the deploy log
-- included, but for a tombstone: the config HASH keeps only its version and the
-- deleted mark (a late publish of that version stays refused, and the next one makes
-- the scope live again), and the fencing counter, not among them, stays (pods of a
-- later life never reuse a name of this one). The caller then takes the scope out of
-- the global index.
-- KEYS[1]  {s}:epoch      STRING scope epoch
-- KEYS[2]  {s}:config     HASH   published scope config
-- KEYS[3]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[5]  {s}:podinfo    HASH   pod id -> pod JSON
-- KEYS[6]  {s}:slots      HASH   pod id -> sessions + claims
-- KEYS[7]  {s}:idle       ZSET   pod id -> idle since (ms)
-- KEYS[8]  {s}:deploying  ZSET   deploy member -> lease deadline (ms)
-- KEYS[9]  {s}:followers  ZSET   "<deploy>|<claim>" -> deadline (ms)
-- KEYS[10] {s}:claims     ZSET   claim id -> deadline (ms)
-- KEYS[11] {s}:claimpod   HASH   claim id -> pod id | "!reason"
-- KEYS[12] {s}:sessions   HASH   session id -> pod id
-- KEYS[13] {s}:sexp       ZSET   session id -> expiry (ms)
-- KEYS[14] {s}:waiters    ZSET   waiter id -> deadline (ms)
-- KEYS[15] {s}:queue      ZSET   waiter id -> arrival number
-- KEYS[16] {s}:qseq       STRING arrival counter
-- KEYS[17] {s}:health     HASH   pod id -> consecutive failed probes
-- KEYS[18] {s}:dstats     HASH   deploy time estimate and start times of deploys in flight
-- KEYS[19] {s}:due        STRING when the scope's next sweep work falls due (ms)
-- KEYS[20] {s}:deploylog  LIST   the latest finished deploys
-- KEYS[21] {s}:agents     HASH   the pods' report records
-- KEYS[22] {s}:backoff    HASH   refill backoff
-- KEYS[23] {s}:served     HASH   pod id -> slots handed out over its life (max_sessions_per_pod)
-- KEYS[24] {s}:demand     HASH   slot takes and frees, decayed (warm_policy "demand")
-- KEYS[25] {s}:fixed      SET    sessions whose expiry is fixed (routes, touches, reports keep it)
-- ARGV none
-- Returns {"forgotten"} | {"live"} (not deleted, or live again) | {"busy"} (pods
-- or deploys left)
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local k = scope_keys(KEYS)
local cfg = redis.call('HMGET', k.config, 'version', 'deleted')
if not cfg[2] then
  return {'live'}
end
if redis.call('ZCARD', k.pods) + redis.call('ZCARD', k.deploying) > 0 then
  return {'busy'}
end
for _, key in pairs(k) do
  redis.call('DEL', key)
end
redis.call('HSET', k.config, 'version', cfg[1], 'deleted', cfg[2])
return {'forgotten'}
