-- scope_publish.lua: publish a scope's config, unless a newer version is already
-- published (two replicas storing v1 and v2 may publish in either order). The same
-- version already published with other content is refused: two replicas stored
-- different configs under one version, so they do not share one config store, and
-- letting either win would split them silently. A field the published hash lacks (a
-- field a newer release added) is not compared. A new scope gets its epoch key when
-- the keyspace is live, so it is routable at once. A scope deleted at this version or
-- a later one stays deleted (a sync that read the store before the delete publishes
-- late); a newer version makes it live again, its pods of before staying retired.
-- A new deploy_ver (a class A change) ends the refill backoff; under rollout
-- "prewarm" it starts a prewarm (see prewarm_ver in lib/surplus.lua): the deploy_ver it
-- replaces goes on taking new sessions until now + ready_timeout_s or until the new
-- version's first pods are registered. Under "drain" it ends a prewarm still running.
-- A new tenant drops the share of max_idle_pods the tenant before gave (q_idle,
-- quota_idle.lua) until the new one's pass gives its own, and the allowances the one
-- before granted (q_pods, q_sess, lib/quota.lua): the new tenant's escrow never granted
-- them, so its publish governs the scope afresh, its escrow adopting what the scope
-- holds (Store.governPublished), and the old one's pass takes its grants back.
-- A change of a field the indexes of lib/index.lua follow (deploy_ver, prewarm_ver,
-- pod_concurrency, max_pods, max_sessions_per_pod) builds them again: O(pods + deploys),
-- once per such change.
-- KEYS: epoch config pods podver slots idle deploying due backoff free freeprev warm
--       warmprev busy surplus rooms open
-- uses: due index
-- ARGV[1] version  ARGV[2] global epoch ("" while the keyspace is being rebuilt)
-- ARGV[3] now (ms)
-- ARGV[4] n: the first n field pairs below say what the config is (compared at an
--         equal version); the rest are derived from them
-- ARGV[5..] field, value, ... of the config hash
-- Returns {"published"} | {"newer"} (a newer version is there) |
--         {"deleted"} (the scope is deleted at this version or a later one) |
--         {"conflict", field, published value} (same version, other content)
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local cur = redis.call('HGET', k.config, 'version')
local version = tonumber(ARGV[1])
local deleted = redis.call('HGET', k.config, 'deleted')
if deleted and tonumber(deleted) >= version then
  return {'deleted'}
end
if cur then
  cur = tonumber(cur)
  if cur > version then
    return {'newer'}
  end
  if cur == version then
    local last = 4 + 2 * tonumber(ARGV[4])
    for i = 5, last, 2 do
      local have = redis.call('HGET', k.config, ARGV[i])
      if have and have ~= ARGV[i + 1] then
        return {'conflict', ARGV[i], have}
      end
    end
  end
end
local fields, new = {}, {}
for i = 5, #ARGV do
  fields[#fields + 1] = ARGV[i]
  if i % 2 == 1 then
    new[ARGV[i]] = ARGV[i + 1]
  end
end
local indexed = {'deploy_ver', 'prewarm_ver', 'pod_concurrency', 'max_pods', 'max_served'}
local was = redis.call('HMGET', k.config, unpack(indexed))
local old = was[1]
if old ~= new.deploy_ver then
  redis.call('DEL', k.backoff)
  if old and new.rollout == 'prewarm' then
    redis.call('HSET', k.config, 'prewarm_ver', old, 'prewarm_until', tonumber(ARGV[3]) + tonumber(new.ready_ms))
  else
    redis.call('HDEL', k.config, 'prewarm_ver', 'prewarm_until')
  end
end
if redis.call('HGET', k.config, 'tenant') ~= new.tenant then
  -- what the tenant it named before gave is not the new one's
  redis.call('HDEL', k.config, 'q_idle', 'q_pods', 'q_sess')
end
redis.call('HSET', k.config, unpack(fields))
redis.call('HDEL', k.config, 'deleted')
local now_cfg = redis.call('HMGET', k.config, unpack(indexed))
for i = 1, #indexed do
  if now_cfg[i] ~= was[i] then
    index_rebuild(k)
    room_rebuild(k)
    break
  end
end
if ARGV[2] ~= '' then
  redis.call('SET', k.epoch, ARGV[2], 'NX')
end
-- a new deploy_ver, min_idle_pods or pod_ttl_s changes what the sweeper has to do
note_due(0)
return {'published'}
