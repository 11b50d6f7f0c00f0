-- lib/idem.lua: idempotency. The keys of a request id, its mark (idem_claim.lua) and a
-- route's answer (session_route.lua), each open with the fingerprint of the request the
-- id names, "<fingerprint>\n…", so a request with another fingerprint is refused
-- whichever of them it finds.

-- idem_mark reads the request id's mark at key: its fingerprint, owner token and answer
-- ("" while the first request runs); nothing when there is no mark.
local function idem_mark(key)
  local v = redis.call('GET', key)
  if v then
    return string.match(v, '^([^\n]*)\n([^\n]*)\n(.*)$')
  end
end

-- idem_other reports whether key, a mark or a route's answer, names a request of
-- another fingerprint than fp.
local function idem_other(key, fp)
  local v = redis.call('GET', key)
  return v ~= false and string.match(v, '^[^\n]*') ~= fp
end
