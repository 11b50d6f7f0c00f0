-- _lib.lua: helpers prepended to every script; not a script of its own.
-- Key roles used below (each passed in KEYS by the calling script):
--   epoch     STRING scope epoch (missing = Redis lost its data)
--   config    HASH  published scope config
--   pods      ZSET  pod id -> registered at (ms)
--   slots     HASH  pod id -> sessions + live claims on the pod
--   idle      ZSET  pod id -> idle since (ms); a pod is idle only with 0 slots
--   claims    ZSET  claim id -> deadline (ms)
--   claimpod  HASH  claim id -> pod id, or "!reason" when the deploy it waited for failed
--   deploying ZSET  deploy member ("<fence>" or "<fence>w") -> lease deadline (ms)
--   followers ZSET  "<deploy member>|<claim id>" -> deadline (ms)

-- scope_config reads fields of the scope's published config (config HASH), checking
-- first that the scope is known and that Redis still has its data (epoch STRING).
-- Returns the fields, or nil and the answer to give: {"NO_SCOPE"} | {"EPOCH_LOST"}.
local function scope_config(epoch, config, ...)
  local cfg = redis.call('HMGET', config, ...)
  if not cfg[1] then
    return nil, {'NO_SCOPE'}
  end
  if redis.call('EXISTS', epoch) == 0 then
    return nil, {'EPOCH_LOST'}
  end
  return cfg
end

-- free_slot gives back one slot of a registered pod; the pod goes idle when it was the
-- last one and idle_on_zero is true. Returns the slots left, or -1 for an unknown pod.
local function free_slot(pods, slots, idle, pod, now, idle_on_zero)
  if not redis.call('ZSCORE', pods, pod) then
    return -1
  end
  local n = redis.call('HINCRBY', slots, pod, -1)
  if n <= 0 then
    n = 0
    redis.call('HSET', slots, pod, 0)
    if idle_on_zero then
      redis.call('ZADD', idle, 'NX', now, pod)
    end
  end
  return n
end

-- holds_pod tells a claimpod value that names a pod from a failure note.
local function holds_pod(v)
  return v and v ~= '' and string.sub(v, 1, 1) ~= '!'
end

-- release_claim drops one claim and frees its slot. Returns the pod ('' if none) and
-- the slots left on it.
local function release_claim(claims, claimpod, pods, slots, idle, claim, now, idle_on_zero)
  local pod = redis.call('HGET', claimpod, claim)
  redis.call('ZREM', claims, claim)
  redis.call('HDEL', claimpod, claim)
  if holds_pod(pod) then
    return pod, free_slot(pods, slots, idle, pod, now, idle_on_zero)
  end
  return '', -1
end

-- expire_claims drops the claims whose holders never bound them by their deadline.
local function expire_claims(claims, claimpod, pods, slots, idle, now)
  local gone = redis.call('ZRANGEBYSCORE', claims, '-inf', now)
  for _, c in ipairs(gone) do
    release_claim(claims, claimpod, pods, slots, idle, c, now, true)
  end
end

-- fail_followers empties the room of one deploy and leaves each follower a note with
-- the reason, kept until deadline so a polling follower fails fast.
local function fail_followers(followers, claims, claimpod, member, reason, deadline)
  local prefix = member .. '|'
  local n = 0
  for _, f in ipairs(redis.call('ZRANGE', followers, 0, -1)) do
    if string.sub(f, 1, #prefix) == prefix then
      local c = string.sub(f, #prefix + 1)
      redis.call('ZREM', followers, f)
      redis.call('ZADD', claims, deadline, c)
      redis.call('HSET', claimpod, c, '!' .. reason)
      n = n + 1
    end
  end
  return n
end

-- expire_deploys drops deploy leases whose leader stopped extending them (it died) and
-- fails their followers; it also drops room entries past their own deadline.
local function expire_deploys(deploying, followers, claims, claimpod, now, note_deadline)
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', deploying, '-inf', now)) do
    redis.call('ZREM', deploying, d)
    fail_followers(followers, claims, claimpod, d, 'the deploy lease expired: its leader is gone', note_deadline)
  end
  redis.call('ZREMRANGEBYSCORE', followers, '-inf', now)
end

-- expire_pool drops the expired claims, then the expired deploy leases (failing their
-- followers) and room entries: the leftovers of crashed callers and leaders.
local function expire_pool(pods, slots, idle, deploying, followers, claims, claimpod, now, note_deadline)
  expire_claims(claims, claimpod, pods, slots, idle, now)
  expire_deploys(deploying, followers, claims, claimpod, now, note_deadline)
end

-- evict_session unbinds one session and frees its slot (the pod goes idle when it was
-- the last one). Returns the pod it was on.
local function evict_session(sessions, sexp, pods, slots, idle, sid, now)
  local pod = redis.call('HGET', sessions, sid)
  redis.call('HDEL', sessions, sid)
  redis.call('ZREM', sexp, sid)
  if pod then
    free_slot(pods, slots, idle, pod, now, true)
  end
  return pod
end
