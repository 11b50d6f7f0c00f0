-- hold_release.lua: release a hold (a claim handed out by acquire) on its pod. Its slot
-- goes to the oldest waiter, or is freed (the pod idle if it was the last). Holds past
-- their deadline are dropped first, so an expired hold is not found.
-- A deleted scope's holds go on until they end, so this works on it too.
-- KEYS[1]  {s}:epoch     STRING scope epoch
-- KEYS[2]  {s}:config    HASH   published scope config
-- KEYS[3]  {s}:pods      ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:podver    HASH   pod id -> deploy_ver
-- KEYS[5]  {s}:slots     HASH   pod id -> sessions + claims
-- KEYS[6]  {s}:idle      ZSET   pod id -> idle since (ms)
-- KEYS[7]  {s}:claims    ZSET   claim id -> deadline (ms)
-- KEYS[8]  {s}:claimpod  HASH   claim id -> pod id | "!reason"
-- KEYS[9]  {s}:waiters   ZSET   waiter id -> deadline (ms)
-- KEYS[10] {s}:queue     ZSET   waiter id -> arrival number
-- KEYS[11] {s}:wake      the scope's wake-up channel
-- ARGV[1] now (ms)  ARGV[2] hold id  ARGV[3] pod id  ARGV[4] grant deadline (ms)
-- ARGV[5] publish command
-- Returns {"released", "1" when the pod is idle now else "0"} | {"unknown"} (no such
-- live hold on that pod) | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
local now = tonumber(ARGV[1])
local cfg, refused = published_config(KEYS[1], KEYS[2], 'deploy_ver')
if not cfg then
  return refused
end
local q = handoff(KEYS[2], KEYS[4], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], now, ARGV[4], ARGV[5])
expire_claims(KEYS[7], KEYS[8], KEYS[3], KEYS[5], KEYS[6], now, q)
if redis.call('HGET', KEYS[8], ARGV[2]) ~= ARGV[3] then
  return {'unknown'}
end
release_claim(KEYS[7], KEYS[8], KEYS[3], KEYS[5], KEYS[6], ARGV[2], now, true, q)
if redis.call('ZSCORE', KEYS[6], ARGV[3]) then
  return {'released', '1'}
end
return {'released', '0'}
