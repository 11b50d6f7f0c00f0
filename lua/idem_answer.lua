-- idem_answer.lua: keep the first request's answer under its request id's mark, only
-- for the mark's owner while it runs: a first request that outlived its mark (the ttl
-- passed and a retry took the id) leaves the retry's mark as it is.
-- KEYS: | extra: idem_mark
-- uses: idem
-- ARGV[1] owner token  ARGV[2] answer (never empty)  ARGV[3] ttl (ms)
-- Returns 1 when kept, 0 when the mark is not the caller's running one.
local k = scope_keys(KEYS)
local fp, owner, answer = idem_mark(k.idem_mark)
if owner ~= ARGV[1] or answer ~= '' then
  return 0
end
redis.call('SET', k.idem_mark, fp .. '\n' .. owner .. '\n' .. ARGV[2], 'PX', ARGV[3])
return 1
