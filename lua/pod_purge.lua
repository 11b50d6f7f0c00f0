-- pod_purge.lua: forget a dead or reclaimed pod: every key of it, the sessions bound to
--       it and the claims on it (their holders get a note), read from the pod's own entries of podsess and podclaims. Idempotent. With ARGV[3] set, the session_configs too) note, hold's session_config goes).
-- pod is purged only if it is still idle since exactly that time, so a pod that got a
-- session in between is not touched. The pod keeps a tombstone (gone, for ARGV[4]), so
-- reconcile does not adopt it again while it is being deleted or a lagging list still
-- shows it.
-- KEYS: epoch config pods podver podinfo slots idle claimpod sessions sexp health due
--       agents served fixed sconf free freeprev warm warmprev busy surplus podsess
--       podclaims | extra: gone
-- uses: due index
-- ARGV[1] pod id  ARGV[2] reason  ARGV[3] expected idle since (ms), or "" for any state
-- ARGV[4] tombstone TTL (ms)  ARGV[5] "1": the rebuild's purge of a pod the driver no
-- longer has, run while the keyspace is closed (no epoch yet), before it adopts any
-- Returns {"purged", n sessions released, session ids...} | {"busy"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
if ARGV[5] ~= '1' and redis.call('EXISTS', k.epoch) == 0 then
  return {'EPOCH_LOST'}
end
local pod = ARGV[1]
if ARGV[3] ~= '' then
  local since = redis.call('ZSCORE', k.idle, pod)
  if not since or tonumber(since) ~= tonumber(ARGV[3]) then
    return {'busy'}
  end
end
local out = {'purged', '0'}
for _, sid in ipairs(pod_entries(k.podsess, pod)) do
  session_unbind(k, sid)
  redis.call('ZREM', k.sexp, sid)
  redis.call('SREM', k.fixed, sid)
  redis.call('HDEL', k.sconf, sid)
  out[#out + 1] = sid
end
out[2] = tostring(#out - 2)
for _, c in ipairs(pod_entries(k.podclaims, pod)) do
  claim_set(k, c, '!pod ' .. pod .. ' is gone: ' .. ARGV[2])
  redis.call('HDEL', k.sconf, 'hold|' .. c)
end
redis.call('ZREM', k.pods, pod)
redis.call('HDEL', k.podver, pod)
redis.call('HDEL', k.podinfo, pod)
redis.call('HDEL', k.slots, pod)
redis.call('ZREM', k.idle, pod)
redis.call('HDEL', k.health, pod)
redis.call('HDEL', k.served, pod)
redis.call('HDEL', k.agents, pod, pod .. '|miss')
pod_index(k, pod)
redis.call('SET', k.gone, ARGV[2], 'PX', ARGV[4])
note_fill()
return out
