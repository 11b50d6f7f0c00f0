-- session_touch.lua: refresh a live session's TTL (a session of a fixed expiry keeps
-- it); an expired one is evicted here (its slot goes to the oldest waiter, or is freed
-- and the pod idle if it was the last).
-- A deleted scope's sessions go on until they end, so this works on it too.
-- KEYS: epoch config pods podver slots idle claims claimpod sessions sexp waiters queue
--       wake due served demand fixed sconf free freeprev warm warmprev busy surplus
--       podsess podclaims
-- uses: config handoff slots
-- ARGV[1] now (ms)  ARGV[2] session id  ARGV[3] grant deadline (ms)
-- ARGV[4] publish command
-- Returns {"touched"} | {"expired"} | {"unknown"} | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local cfg, refused = published_config(k, 'session_ttl_ms')
if not cfg then
  return refused
end
local e = redis.call('ZSCORE', k.sexp, ARGV[2])
if not e then
  return {'unknown'}
end
if tonumber(e) > now then
  if redis.call('SISMEMBER', k.fixed, ARGV[2]) == 0 then
    redis.call('ZADD', k.sexp, now + tonumber(cfg[1]), ARGV[2])
  end
  return {'touched'}
end
local q = handoff(k, now, ARGV[3], ARGV[4])
evict_session(k, ARGV[2], now, q)
return {'expired'}
