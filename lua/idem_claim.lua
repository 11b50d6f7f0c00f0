-- idem_claim.lua: take a request id's mark for its first request, under the caller's
-- owner token, or read what an earlier request of that id left there.
-- KEYS[1] {s}:idem:<kind>:<id>  STRING  "<owner token>\n<answer>", the answer "" while
--                                the first request runs; PX ttl
-- ARGV[1] owner token  ARGV[2] ttl (ms)
-- Returns {"won"} | {"running"} | {"done", answer}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it:
-- a claim run after its caller gave up (Redis paused with the call queued) would
-- leave a mark of a first request that runs nowhere, and every retry of the id would
-- wait on it until the ttl.
local mark = redis.call('GET', KEYS[1])
if not mark then
  redis.call('SET', KEYS[1], ARGV[1] .. '\n', 'PX', ARGV[2])
  return {'won'}
end
local answer = string.match(mark, '^[^\n]*\n(.*)$')
if answer == '' then
  return {'running'}
end
return {'done', answer}
