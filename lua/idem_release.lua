-- idem_release.lua: free a request id's mark after its first request failed, so that
-- a retry runs again; only for the mark's owner while it runs: a first request that
-- outlived its mark (the ttl passed and a retry took the id) leaves the retry's mark
-- as it is.
-- KEYS[1] {s}:idem:<kind>:<id>  STRING  "<owner token>\n<answer>" (idem_claim.lua)
-- ARGV[1] owner token
-- Returns 1 when freed, 0 when the mark is not the caller's running one.
if redis.call('GET', KEYS[1]) ~= ARGV[1] .. '\n' then
  return 0
end
return redis.call('DEL', KEYS[1])
