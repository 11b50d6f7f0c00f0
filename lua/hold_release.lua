-- hold_release.lua: release a hold (a claim handed out by acquire) on its pod. Its slot
-- goes to the oldest waiter, or is freed (the pod idle if it was the last). Holds past
-- their deadline are dropped first, so an expired hold is not found.
-- A deleted scope's holds go on until they end, so this works on it too.
-- KEYS: epoch config pods podver slots idle claims claimpod waiters queue wake due served
--       demand sconf free freeprev warm warmprev busy surplus podclaims
-- uses: config handoff slots
-- ARGV[1] now (ms)  ARGV[2] hold id  ARGV[3] pod id  ARGV[4] grant deadline (ms)
-- ARGV[5] publish command
-- Returns {"released", "1" when the pod is idle now else "0"} | {"unknown"} (no such
-- live hold on that pod) | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k, refused = known_scope(KEYS)
if refused then
  return refused
end
local now = tonumber(ARGV[1])
local q = handoff(k, now, ARGV[4], ARGV[5])
expire_claims(k, now, q)
if redis.call('HGET', k.claimpod, ARGV[2]) ~= ARGV[3] then
  return {'unknown'}
end
release_claim(k, ARGV[2], now, true, q)
if redis.call('ZSCORE', k.idle, ARGV[3]) then
  return {'released', '1'}
end
return {'released', '0'}
