-- session_deadline.lua: fix a live session's expiry at now + a TTL (E2B's set_timeout
-- and connect): from then on routes, touches and reports leave it where it is, and the
-- expiry sweep ends the session then, however busy it is. With ARGV[4] "1" (connect)
-- the expiry only moves later: it becomes the later of its own and now + the TTL. An
-- expired session is evicted here, as session_touch.lua does (its slot goes to the
-- oldest waiter, or is freed and the pod idle if it was the last). A deleted scope's
-- sessions go on until they end, so this works on it too.
-- KEYS: epoch config pods podver slots idle claims claimpod sessions sexp waiters queue
--       wake due served demand fixed sconf free freeprev warm warmprev busy surplus
--       podsess podclaims
-- uses: config due handoff slots
-- ARGV[1] now (ms)  ARGV[2] session id  ARGV[3] TTL (ms)  ARGV[4] "1": only later, "0": set
-- ARGV[5] grant deadline (ms)  ARGV[6] publish command
-- Returns {"set", expiry (ms)} | {"expired"} | {"unknown"} | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k, refused = known_scope(KEYS)
if refused then
  return refused
end
local now = tonumber(ARGV[1])
local sid = ARGV[2]
local e = redis.call('ZSCORE', k.sexp, sid)
if not e or not redis.call('HGET', k.sessions, sid) then
  return {'unknown'}
end
if tonumber(e) <= now then
  evict_session(k, sid, now, handoff(k, now, ARGV[5], ARGV[6]))
  return {'expired'}
end
local expiry = now + tonumber(ARGV[3])
if ARGV[4] == '1' then
  expiry = math.max(expiry, tonumber(e))
end
redis.call('ZADD', k.sexp, expiry, sid)
redis.call('SADD', k.fixed, sid)
note_due(expiry)
return {'set', tostring(expiry)}
