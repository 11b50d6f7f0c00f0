-- idem_claim.lua: take a request id's idempotency key for its first request, or read
-- what an earlier request of that id left there.
-- KEYS[1] {s}:idem:<kind>:<id>  STRING  "" while the first request runs, then its answer
-- ARGV[1] ttl (ms)
-- Returns {"won"} | {"taken", value} ("" while the first request still runs)
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it:
-- a claim run after its caller gave up (Redis paused with the call queued) would
-- leave a mark of a first request that runs nowhere, and every retry of the id would
-- wait on it until the ttl.
if redis.call('SET', KEYS[1], '', 'NX', 'PX', ARGV[1]) then
  return {'won'}
end
return {'taken', redis.call('GET', KEYS[1])}
