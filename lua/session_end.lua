-- session_end.lua: end a session: its slot goes to the oldest waiter, or is freed and,
-- when it was the pod's last, the pod goes idle (idle_consider in the same step).
-- A deleted scope's sessions go on until they end, so this works on it too.
-- KEYS: epoch config pods podver slots idle claims claimpod sessions sexp waiters queue
--       wake due served demand fixed sconf free freeprev warm warmprev busy surplus
--       podsess podclaims
-- uses: config handoff slots
-- ARGV[1] now (ms)  ARGV[2] session id  ARGV[3] grant deadline (ms)
-- ARGV[4] publish command
-- Returns {"released", pod} | {"unknown"} | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k, refused = known_scope(KEYS)
if refused then
  return refused
end
local now = tonumber(ARGV[1])
if not redis.call('HGET', k.sessions, ARGV[2]) then
  return {'unknown'}
end
local q = handoff(k, now, ARGV[3], ARGV[4])
local pod = evict_session(k, ARGV[2], now, q)
return {'released', pod}
