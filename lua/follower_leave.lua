-- follower_leave.lua: a follower that gives up leaves the room; a claim it already got
-- is given back (to the oldest waiter, or freed: the pod idle if it was its last slot).
-- KEYS[1]  {s}:followers  ZSET "<deploy>|<claim>" -> deadline (ms)
-- KEYS[2]  {s}:claims     ZSET claim id -> deadline (ms)
-- KEYS[3]  {s}:claimpod   HASH claim id -> pod id | "!reason"
-- KEYS[4]  {s}:pods       ZSET pod id -> registered at (ms)
-- KEYS[5]  {s}:slots      HASH pod id -> sessions + claims
-- KEYS[6]  {s}:idle       ZSET pod id -> idle since (ms)
-- KEYS[7]  {s}:config     HASH published scope config
-- KEYS[8]  {s}:podver     HASH pod id -> deploy_ver
-- KEYS[9]  {s}:waiters    ZSET waiter id -> deadline (ms)
-- KEYS[10] {s}:queue      ZSET waiter id -> arrival number
-- KEYS[11] {s}:wake       the scope's wake-up channel
-- ARGV[1] room member  ARGV[2] claim id  ARGV[3] now (ms)  ARGV[4] grant deadline (ms)
-- ARGV[5] publish command
-- Returns 1 when the follower was still in the room, else 0.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
local now = tonumber(ARGV[3])
local was = redis.call('ZREM', KEYS[1], ARGV[1])
local q = handoff(KEYS[7], KEYS[8], KEYS[2], KEYS[3], KEYS[9], KEYS[10], KEYS[11], now, ARGV[4], ARGV[5])
release_claim(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[2], now, true, q)
return was
