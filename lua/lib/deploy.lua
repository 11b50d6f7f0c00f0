-- lib/deploy.lua: deploys that end without a pod (failed or lost, their followers
-- told why) and the deploy time estimate's start times (the refill backoff they
-- count toward: lib/refill.lua).
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
