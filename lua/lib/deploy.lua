-- lib/deploy.lua: deploys that end without a pod (failed or lost, their followers
-- told why), the deploy time estimate's start times, and the refill backoff.
-- uses: claimpod due index

-- fail_followers empties the room of one deploy and leaves each follower a note with
-- the reason, kept until deadline so a polling follower learns at once. A deploy that
-- failed (the image, the timeout, the pod died) fails its followers: a retry would fail
-- alike. One that was lost (lost true: its leader died or lost its lease, or Redis was
-- too slow for its register) sends them to try again: the next acquire may lead a
-- deploy of its own.
local function fail_followers(k, member, reason, deadline, lost)
  local prefix = member .. '|'
  local note = '!' .. reason
  if lost then
    note = '!' .. LOST .. reason
  end
  local lo, hi = room_range(member)
  local n = 0
  for _, f in ipairs(redis.call('ZRANGEBYLEX', k.rooms, lo, hi)) do
    local c = string.sub(f, #prefix + 1)
    redis.call('ZREM', k.followers, f)
    redis.call('ZREM', k.rooms, f)
    redis.call('ZADD', k.claims, deadline, c)
    note_due(deadline)
    claim_set(k, c, note)
    n = n + 1
  end
  room_index(k, member)
  return n
end

-- expire_deploys drops deploy leases whose leader stopped extending them (it died);
-- their deploys are lost, not failed, so their followers try again. It also drops room
-- entries past their own deadline, and the start times of the deploys it drops.
local function expire_deploys(k, now, note_deadline)
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', k.deploying, '-inf', now)) do
    redis.call('ZREM', k.deploying, d)
    redis.call('HDEL', k.dstats, 'start:' .. d)
    fail_followers(k, d, 'the deploy lease expired: its leader is gone', note_deadline, true)
  end
  for _, f in ipairs(redis.call('ZRANGEBYSCORE', k.followers, '-inf', now)) do
    room_leave(k, f)
  end
end

-- deploy_started notes when a new deploy lease started, for the deploy time estimate
-- (every script that drops a deploy in flight drops its start time too).
local function deploy_started(k, member, now)
  redis.call('HSET', k.dstats, 'start:' .. member, now)
  room_index(k, member)
end

-- Refill backoff (SPEC §11.3). deploy_abort.lua counts the failed deploys of the
-- current deploy_ver in k.backoff and sets until to the failure's time + base *
-- 2^(failures - 1), at most the cap. Before until no deploy starts (a route or a hold
-- that would lead one, the warm-pool refill); from then on one at a time: a deploy
-- starts only while none is in flight, and its failure moves until on, so at most one
-- deploy per backoff period tries again. A warm pod and a place in the room of a
-- deploy in flight are taken as ever. A registered pod of the current deploy_ver
-- (pod_register.lua) and a new deploy_ver (scope_publish.lua) delete the key.

-- backoff_refusal is the answer to a deploy the scope's backoff holds back, with the
-- number of deploys in flight, nil when a deploy may start:
-- {"backoff", failures, until (ms), last error, deploys in flight}.
local function backoff_refusal(k, now, deploys)
  local b = redis.call('HMGET', k.backoff, 'failures', 'until', 'error')
  if not b[1] or (now >= tonumber(b[2]) and deploys == 0) then
    return nil
  end
  return {'backoff', b[1], b[2], b[3] or '', tostring(deploys)}
end
