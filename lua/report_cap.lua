-- report_cap.lua: the most sessions a report of a pod may list (read-only), as
-- agent_report.lua holds it to: the scope's pod_concurrency, or the pod's slots when a
-- lowered pod_concurrency left it more. The report route reads it before the body, in
-- one round trip that fails as fast as a script does.
-- KEYS: epoch config slots
-- uses: config
-- ARGV[1] pod id
-- Returns {"ok", most} | {"NO_SCOPE"} | {"EPOCH_LOST"}
local k = scope_keys(KEYS)
local cfg, refused = published_config(k, 'pod_concurrency')
if not cfg then
  return refused
end
local slots = tonumber(redis.call('HGET', k.slots, ARGV[1]) or '0')
return {'ok', tostring(math.max(tonumber(cfg[1]), slots))}
