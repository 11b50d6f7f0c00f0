-- follower_leave.lua: a follower that gives up leaves the room; a claim it already got
-- is given back (the pod goes idle if that was its last slot).
-- KEYS[1] {s}:followers  ZSET "<deploy>|<claim>" -> deadline (ms)
-- KEYS[2] {s}:claims     ZSET claim id -> deadline (ms)
-- KEYS[3] {s}:claimpod   HASH claim id -> pod id | "!reason"
-- KEYS[4] {s}:pods       ZSET pod id -> registered at (ms)
-- KEYS[5] {s}:slots      HASH pod id -> sessions + claims
-- KEYS[6] {s}:idle       ZSET pod id -> idle since (ms)
-- ARGV[1] room member  ARGV[2] claim id  ARGV[3] now (ms)
-- Returns 1 when the follower was still in the room, else 0.
local was = redis.call('ZREM', KEYS[1], ARGV[1])
release_claim(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[2], tonumber(ARGV[3]), true)
return was
