-- deploy_abort.lua: a deploy that ended without a pod gives up its lease. Its followers
-- do not take the work over; each gets a note with the reason: a failed deploy fails
-- them fast, a lost one (its lease lost, or its register kept missing Redis) sends them
-- to try again. Neither counts toward the scope's deploy time estimate. A failed
-- deploy of the current deploy_ver counts toward the refill backoff (backoff_refusal
-- in lib/deploy.lua): failures + 1, and no deploy before now + base *
-- 2^(failures - 1), at most the cap. One message naming the deploy (DeployWaiter) on
-- the scope's wake channel wakes the followers it told.
-- KEYS: config deploying followers claims claimpod wake dstats due backoff podclaims
--       rooms open
-- uses: deploy due index
-- ARGV[1] deploy member  ARGV[2] reason  ARGV[3] note deadline (ms)
-- ARGV[4] "1" when the deploy was lost, "0" when it failed  ARGV[5] the deploy's deploy_ver
-- ARGV[6] now (ms)  ARGV[7] backoff base (ms)  ARGV[8] backoff cap (ms)
-- ARGV[9] publish command
-- Returns the number of followers told.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
redis.call('ZREM', k.deploying, ARGV[1])
room_index(k, ARGV[1])
redis.call('HDEL', k.dstats, 'start:' .. ARGV[1])
if ARGV[4] == '0' and redis.call('HGET', k.config, 'deploy_ver') == ARGV[5] then
  local n = redis.call('HINCRBY', k.backoff, 'failures', 1)
  local wait = math.min(tonumber(ARGV[7]) * 2 ^ (n - 1), tonumber(ARGV[8]))
  redis.call('HSET', k.backoff, 'until', math.floor(tonumber(ARGV[6]) + wait), 'error', ARGV[2])
end
note_fill()
local told = fail_followers(k, ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1')
if told > 0 then
  redis.call(ARGV[9], k.wake, 'deploy:' .. ARGV[1])
end
return told
