-- idem_claim.lua: take a request id's mark for its first request, under the caller's
-- owner token, or read what an earlier request of that id left there; an id that
-- names another request (another fingerprint, in its mark or a route's answer) is
-- refused, and nothing changes.
-- KEYS: | extra: idem_mark route_answer
-- uses: idem
-- ARGV[1] fingerprint  ARGV[2] owner token  ARGV[3] ttl (ms)
-- Returns {"won"} | {"running"} | {"done", answer} | {"mismatch"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it:
-- a claim run after its caller gave up (Redis paused with the call queued) would
-- leave a mark of a first request that runs nowhere, and every retry of the id would
-- wait on it until the ttl.
local k = scope_keys(KEYS)
if idem_other(k.idem_mark, ARGV[1]) or idem_other(k.route_answer, ARGV[1]) then
  return {'mismatch'}
end
local fp, _, answer = idem_mark(k.idem_mark)
if not fp then
  redis.call('SET', k.idem_mark, ARGV[1] .. '\n' .. ARGV[2] .. '\n', 'PX', ARGV[3])
  return {'won'}
end
if answer == '' then
  return {'running'}
end
return {'done', answer}
