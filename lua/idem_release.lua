-- idem_release.lua: free a request id's mark after its first request failed, so that
-- a retry runs again; only for the mark's owner while it runs: a first request that
-- outlived its mark (the ttl passed and a retry took the id) leaves the retry's mark
-- as it is.
-- KEYS: | extra: idem_mark
-- uses: idem
-- ARGV[1] owner token
-- Returns 1 when freed, 0 when the mark is not the caller's running one.
local k = scope_keys(KEYS)
local _, owner, answer = idem_mark(k.idem_mark)
if owner ~= ARGV[1] or answer ~= '' then
  return 0
end
return redis.call('DEL', k.idem_mark)
