-- claim_release.lua: give back a claim that will not be bound to a session. Its slot
-- goes to the oldest waiter, or is freed (the pod idle if it was the last).
-- KEYS: config pods podver slots idle claims claimpod waiters queue wake due served
--       demand sconf free freeprev warm warmprev busy surplus podclaims
-- uses: handoff slots
-- ARGV[1] claim id  ARGV[2] now (ms)  ARGV[3] grant deadline (ms)  ARGV[4] publish command
-- Returns {pod or "", slots left or -1}
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[2])
local q = handoff(k, now, ARGV[3], ARGV[4])
local pod, n = release_claim(k, ARGV[1], now, true, q)
return {pod, tostring(n)}
