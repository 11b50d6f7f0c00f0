-- follower_leave.lua: a follower that gives up leaves the room; a claim it already got
-- is given back (to the oldest waiter, or freed: the pod idle if it was its last slot).
-- KEYS: config pods podver slots idle deploying followers claims claimpod waiters queue
--       wake due served demand sconf free freeprev warm warmprev busy surplus podclaims
--       rooms open
-- uses: handoff index slots
-- ARGV[1] room member  ARGV[2] claim id  ARGV[3] now (ms)  ARGV[4] grant deadline (ms)
-- ARGV[5] publish command
-- Returns 1 when the follower was still in the room, else 0.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[3])
local was = room_leave(k, ARGV[1])
local q = handoff(k, now, ARGV[4], ARGV[5])
release_claim(k, ARGV[2], now, true, q)
return was
