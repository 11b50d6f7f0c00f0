-- session_evict.lua: the expiry sweep. It evicts up to ARGV[2] sessions whose TTL has
-- passed and drops the claims past their deadline (holds not released, grants never
-- bound), so that their capacity comes back even when no route runs. Each freed slot
-- goes to the oldest waiter, or is freed (the pod idle if it was the last).
-- KEYS: epoch config pods podver slots idle claims claimpod sessions sexp waiters queue
--       wake due served demand fixed sconf free freeprev warm warmprev busy surplus
--       podsess podclaims
-- uses: handoff slots
-- ARGV[1] now (ms)  ARGV[2] most sessions to evict  ARGV[3] grant deadline (ms)
-- ARGV[4] publish command
-- Returns {sessions evicted, claims expired} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
if redis.call('EXISTS', k.epoch) == 0 then
  return {'EPOCH_LOST'}
end
local now = tonumber(ARGV[1])
local q = handoff(k, now, ARGV[3], ARGV[4])
local gone = redis.call('ZRANGEBYSCORE', k.sexp, '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, sid in ipairs(gone) do
  evict_session(k, sid, now, q)
end
local claims = expire_claims(k, now, q)
return {tostring(#gone), tostring(claims)}
