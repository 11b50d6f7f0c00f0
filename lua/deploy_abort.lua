-- deploy_abort.lua: a deploy that ended without a pod gives up its lease. Its followers
-- do not take the work over; each gets a note with the reason: a failed deploy fails
-- them fast, a lost one (its lease lost, or its register kept missing Redis) sends them
-- to try again. Neither counts toward the scope's deploy time estimate.
-- KEYS[1] {s}:deploying  ZSET deploy member -> lease deadline (ms)
-- KEYS[2] {s}:followers  ZSET "<deploy>|<claim>" -> deadline (ms)
-- KEYS[3] {s}:claims     ZSET claim id -> deadline (ms)
-- KEYS[4] {s}:claimpod   HASH claim id -> pod id | "!reason" | "!lost:reason"
-- KEYS[5] {s}:dstats     HASH deploy time estimate and start times of deploys in flight
-- ARGV[1] deploy member  ARGV[2] reason  ARGV[3] note deadline (ms)
-- ARGV[4] "1" when the deploy was lost, "0" when it failed
-- Returns the number of followers told.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[5], 'start:' .. ARGV[1])
note_fill()
return fail_followers(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1')
