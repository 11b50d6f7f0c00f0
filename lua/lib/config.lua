-- lib/config.lua: a scope's published config, deleted scopes and the versions of
-- pods that are never handed out again.

-- Deleted scopes. Deleting a scope marks its config HASH with a "deleted" field (the
-- version deleted) and retires its pods: their podver entry becomes RETIRED, which is
-- never a scope's deploy_ver, so they are never handed out again, as pods of an old
-- deploy_ver. The sessions and holds already on them go on until they end.
local RETIRED = 'retired'

-- Draining pods. A pod whose agent reports "draining" (agent_report.lua) gets podver
-- DRAINING: like a retired pod it is never handed out again (no session, hold or
-- grant lands on it), its sessions go on, and it is deleted once it has none: going
-- idle it makes the scope due at once, and the sweep deletes it as a pod of an old
-- deploy_ver.
local DRAINING = 'draining'

-- published_config reads fields of the scope's published config (k.config), deleted or
-- not, checking first that the scope is known and that Redis still has its data
-- (k.epoch). Returns the fields, or nil and the answer to give: {"NO_SCOPE"} |
-- {"EPOCH_LOST"}.
local function published_config(k, ...)
  local cfg = redis.call('HMGET', k.config, ...)
  if not cfg[1] then
    return nil, {'NO_SCOPE'}
  end
  if redis.call('EXISTS', k.epoch) == 0 then
    return nil, {'EPOCH_LOST'}
  end
  return cfg
end

-- known_scope opens a script that reads no field of the config: the table of its KEYS
-- by name (scope_keys), and nil or the answer to give when the scope is unknown or
-- Redis lost its data, as published_config checks them: {"NO_SCOPE"} | {"EPOCH_LOST"}.
local function known_scope(keys)
  local k = scope_keys(keys)
  if redis.call('HEXISTS', k.config, 'deploy_ver') == 0 then
    return k, {'NO_SCOPE'}
  end
  if redis.call('EXISTS', k.epoch) == 0 then
    return k, {'EPOCH_LOST'}
  end
  return k, nil
end

-- scope_config is published_config for a live scope: a deleted one answers
-- {"NO_SCOPE"} too, so it takes no new session, hold or deploy.
local function scope_config(k, ...)
  local cfg, refused = published_config(k, ...)
  if cfg and redis.call('HEXISTS', k.config, 'deleted') == 1 then
    return nil, {'NO_SCOPE'}
  end
  return cfg, refused
end
