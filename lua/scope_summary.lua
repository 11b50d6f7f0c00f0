-- scope_summary.lua: the sizes of a scope's pool in one short answer, for the pool
-- page's summary of every scope (Store.ScopeSummaries pipelines one call a scope).
-- Reads only; O(pods) for the count of old pods, O(1) otherwise.
-- KEYS: config pods podver idle deploying followers sessions waiters
-- ARGV none
-- Returns "" when the scope is not published or deleted, else one string of eleven
-- fields separated by single spaces: deploy_ver version max_pods pod_concurrency pods
-- idle old_pods sessions deploying followers waiters (old_pods: of another deploy_ver
-- than the scope's, retired ones included). One string, not an array: the replica
-- reads 5,000 of them a pass, and one bulk string is one value to read.
local k = scope_keys(KEYS)
local cfg = redis.call('HMGET', k.config, 'deploy_ver', 'version', 'max_pods', 'pod_concurrency', 'deleted')
if not cfg[1] or cfg[5] then
  return ''
end
local old = 0
for _, v in ipairs(redis.call('HVALS', k.podver)) do
  if v ~= cfg[1] then
    old = old + 1
  end
end
return table.concat({cfg[1], cfg[2] or '0', cfg[3] or '0', cfg[4] or '0',
  redis.call('ZCARD', k.pods), redis.call('ZCARD', k.idle), old, redis.call('HLEN', k.sessions),
  redis.call('ZCARD', k.deploying), redis.call('ZCARD', k.followers), redis.call('ZCARD', k.waiters)}, ' ')
