-- session_end.lua: end a session: its slot goes to the oldest waiter, or is freed and,
-- when it was the pod's last, the pod goes idle (idle_consider in the same step).
-- A deleted scope's sessions go on until they end, so this works on it too.
-- KEYS[1]  {s}:epoch      STRING scope epoch
-- KEYS[2]  {s}:config     HASH   published scope config
-- KEYS[3]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[5]  {s}:slots      HASH   pod id -> sessions + claims
-- KEYS[6]  {s}:idle       ZSET   pod id -> idle since (ms)
-- KEYS[7]  {s}:claims     ZSET   claim id -> deadline (ms)
-- KEYS[8]  {s}:claimpod   HASH   claim id -> pod id | "!reason"
-- KEYS[9]  {s}:sessions   HASH   session id -> pod id
-- KEYS[10] {s}:sexp       ZSET   session id -> expiry (ms)
-- KEYS[11] {s}:waiters    ZSET   waiter id -> deadline (ms)
-- KEYS[12] {s}:queue      ZSET   waiter id -> arrival number
-- KEYS[13] {s}:wake       the scope's wake-up channel
-- KEYS[14] {s}:due        STRING when the scope's next sweep work falls due (ms)
-- KEYS[15] {s}:served     HASH   pod id -> slots handed out over its life (max_sessions_per_pod)
-- KEYS[16] {s}:demand     HASH   slot takes and frees, decayed (warm_policy "demand")
-- KEYS[17] {s}:fixed      SET    sessions whose expiry is fixed (routes, touches, reports keep it)
-- ARGV[1] now (ms)  ARGV[2] session id  ARGV[3] grant deadline (ms)
-- ARGV[4] publish command
-- Returns {"released", pod} | {"unknown"} | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due in _lib.lua): the answer is then {"DUE", due, answer} when a
-- note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local cfg, refused = published_config(k, 'deploy_ver')
if not cfg then
  return refused
end
if not redis.call('HGET', k.sessions, ARGV[2]) then
  return {'unknown'}
end
local q = handoff(k, now, ARGV[3], ARGV[4])
local pod = evict_session(k, ARGV[2], now, q)
return {'released', pod}
