-- session_evict.lua: the expiry sweep. It evicts up to ARGV[2] sessions whose TTL has
-- passed and drops the claims past their deadline (holds not released, grants never
-- bound), so that their capacity comes back even when no route runs. Each freed slot
-- goes to the oldest waiter, or is freed (the pod idle if it was the last).
-- KEYS[1]  {s}:epoch     STRING scope epoch
-- KEYS[2]  {s}:pods      ZSET   pod id -> registered at (ms)
-- KEYS[3]  {s}:slots     HASH   pod id -> sessions + claims
-- KEYS[4]  {s}:idle      ZSET   pod id -> idle since (ms)
-- KEYS[5]  {s}:sessions  HASH   session id -> pod id
-- KEYS[6]  {s}:sexp      ZSET   session id -> expiry (ms)
-- KEYS[7]  {s}:waiters   ZSET   waiter id -> deadline (ms)
-- KEYS[8]  {s}:config    HASH   published scope config
-- KEYS[9]  {s}:podver    HASH   pod id -> deploy_ver
-- KEYS[10] {s}:claims    ZSET   claim id -> deadline (ms)
-- KEYS[11] {s}:claimpod  HASH   claim id -> pod id | "!reason"
-- KEYS[12] {s}:queue     ZSET   waiter id -> arrival number
-- KEYS[13] {s}:wake      the scope's wake-up channel
-- ARGV[1] now (ms)  ARGV[2] most sessions to evict  ARGV[3] grant deadline (ms)
-- ARGV[4] publish command
-- Returns {sessions evicted, claims expired} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'EPOCH_LOST'}
end
local now = tonumber(ARGV[1])
local q = handoff(KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[7], KEYS[12], KEYS[13], now, ARGV[3], ARGV[4])
local gone = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, sid in ipairs(gone) do
  evict_session(KEYS[5], KEYS[6], KEYS[2], KEYS[3], KEYS[4], sid, now, q)
end
local claims = expire_claims(KEYS[10], KEYS[11], KEYS[2], KEYS[3], KEYS[4], now, q)
return {tostring(#gone), tostring(claims)}
