-- follower_wait.lua: where a follower stands: its pod arrived, its deploy failed, its
-- deploy was lost (a retry may succeed), its pod had no slot left for it (NO_SLOT: it
-- acquires again), or it keeps waiting. A follower whose leader's lease expired leaves
-- the room: that deploy is lost.
-- KEYS: config podinfo deploying followers claimpod rooms open
-- uses: claimpod index
-- ARGV[1] deploy member  ARGV[2] room member  ARGV[3] claim id  ARGV[4] now (ms)
-- Returns {"ready", pod, pod JSON} | {"failed", reason} | {"lost", reason} | {"retry"}
--   | {"wait"}
local k = scope_keys(KEYS)
local pod = redis.call('HGET', k.claimpod, ARGV[3])
if pod then
  if pod == NO_SLOT then
    return {'retry'}
  end
  if string.sub(pod, 1, 1 + #LOST) == '!' .. LOST then
    return {'lost', string.sub(pod, 2 + #LOST)}
  end
  if string.sub(pod, 1, 1) == '!' then
    return {'failed', string.sub(pod, 2)}
  end
  return {'ready', pod, redis.call('HGET', k.podinfo, pod) or ''}
end
local now = tonumber(ARGV[4])
local lease = redis.call('ZSCORE', k.deploying, ARGV[1])
if not lease or tonumber(lease) <= now then
  room_leave(k, ARGV[2])
  return {'lost', 'the deploy lease expired: its leader is gone'}
end
local room = redis.call('ZSCORE', k.followers, ARGV[2])
if not room or tonumber(room) <= now then
  room_leave(k, ARGV[2])
  return {'failed', 'timed out waiting for the deploy'}
end
return {'wait'}
