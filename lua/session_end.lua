-- session_end.lua: end a session: its slot goes to the oldest waiter, or is freed and,
-- when it was the pod's last, the pod goes idle (idle_consider in the same step).
-- A deleted scope's sessions go on until they end, so this works on it too.
-- KEYS[1]  {s}:epoch     STRING scope epoch
-- KEYS[2]  {s}:config    HASH   published scope config
-- KEYS[3]  {s}:pods      ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:slots     HASH   pod id -> sessions + claims
-- KEYS[5]  {s}:idle      ZSET   pod id -> idle since (ms)
-- KEYS[6]  {s}:sessions  HASH   session id -> pod id
-- KEYS[7]  {s}:sexp      ZSET   session id -> expiry (ms)
-- KEYS[8]  {s}:waiters   ZSET   waiter id -> deadline (ms)
-- KEYS[9]  {s}:podver    HASH   pod id -> deploy_ver
-- KEYS[10] {s}:claims    ZSET   claim id -> deadline (ms)
-- KEYS[11] {s}:claimpod  HASH   claim id -> pod id | "!reason"
-- KEYS[12] {s}:queue     ZSET   waiter id -> arrival number
-- KEYS[13] {s}:wake      the scope's wake-up channel
-- ARGV[1] now (ms)  ARGV[2] session id  ARGV[3] grant deadline (ms)
-- ARGV[4] publish command
-- Returns {"released", pod} | {"unknown"} | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
local now = tonumber(ARGV[1])
local cfg, refused = published_config(KEYS[1], KEYS[2], 'deploy_ver')
if not cfg then
  return refused
end
if not redis.call('HGET', KEYS[6], ARGV[2]) then
  return {'unknown'}
end
local q = handoff(KEYS[2], KEYS[9], KEYS[10], KEYS[11], KEYS[8], KEYS[12], KEYS[13], now, ARGV[3], ARGV[4])
local pod = evict_session(KEYS[6], KEYS[7], KEYS[3], KEYS[4], KEYS[5], ARGV[2], now, q)
return {'released', pod}
