-- waiter_leave.lua: a waiter that gave up (or whose route failed) leaves the queue; a
-- slot handed to it in the meantime goes on to the next waiter, or is freed.
-- KEYS: config pods podver slots idle claims claimpod waiters queue wake due served
--       demand sconf free freeprev warm warmprev busy surplus podclaims
-- uses: handoff slots
-- ARGV[1] waiter id  ARGV[2] now (ms)  ARGV[3] grant deadline (ms)  ARGV[4] publish command
-- Returns 1 when it was a waiter, else 0.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[2])
local was = redis.call('ZREM', k.waiters, ARGV[1])
redis.call('ZREM', k.queue, ARGV[1])
local q = handoff(k, now, ARGV[3], ARGV[4])
release_claim(k, ARGV[1], now, true, q)
return was
