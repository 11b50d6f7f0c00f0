-- quota_yield.lua: the scope gives pods up to the total cap's fair share (total.go):
-- until n of its pods are leaving (retired, draining, or of a deploy_ver it no longer
-- deploys), it retires more, its longest idle first (the due sweep deletes it at once),
-- then busy ones: a retired pod takes no new slot, and goes once its last slot is
-- freed. What it frees goes back to the escrows when the pod is purged (settle).
-- KEYS: config pods podver slots idle due free freeprev warm warmprev busy surplus
-- uses: config due index
-- ARGV[1] now (ms)  ARGV[2] n
-- Returns the scope's pods leaving now; {"NO_SCOPE"} for a scope without a config.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- it is work due sooner than the scope's due time.
local k = scope_keys(KEYS)
if redis.call('HEXISTS', k.config, 'deploy_ver') == 0 then
  return {'NO_SCOPE'}
end
local now, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local leaving = redis.call('ZCARD', k.pods) - redis.call('ZCARD', k.warm) - redis.call('ZCARD', k.busy)
while leaving < n do
  local pod = redis.call('ZRANGE', k.warm, 0, 0)[1]
  if pod then
    note_due(now)
  else
    pod = redis.call('ZRANGE', k.busy, 0, 0)[1]
  end
  if not pod then
    break
  end
  redis.call('HSET', k.podver, pod, RETIRED)
  pod_index(k, pod)
  leaving = leaving + 1
end
return {tostring(leaving)}
