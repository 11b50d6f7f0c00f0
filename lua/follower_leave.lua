-- follower_leave.lua: a follower that gives up leaves the room; a claim it already got
-- is given back (to the oldest waiter, or freed: the pod idle if it was its last slot).
-- KEYS[1]  {s}:config     HASH published scope config
-- KEYS[2]  {s}:pods       ZSET pod id -> registered at (ms)
-- KEYS[3]  {s}:podver     HASH pod id -> deploy_ver
-- KEYS[4]  {s}:slots      HASH pod id -> sessions + claims
-- KEYS[5]  {s}:idle       ZSET pod id -> idle since (ms)
-- KEYS[6]  {s}:followers  ZSET "<deploy>|<claim>" -> deadline (ms)
-- KEYS[7]  {s}:claims     ZSET claim id -> deadline (ms)
-- KEYS[8]  {s}:claimpod   HASH claim id -> pod id | "!reason"
-- KEYS[9]  {s}:waiters    ZSET waiter id -> deadline (ms)
-- KEYS[10] {s}:queue      ZSET waiter id -> arrival number
-- KEYS[11] {s}:wake       the scope's wake-up channel
-- KEYS[12] {s}:due        STRING when the scope's next sweep work falls due (ms)
-- KEYS[13] {s}:served     HASH   pod id -> slots handed out over its life (max_sessions_per_pod)
-- KEYS[14] {s}:demand     HASH   slot takes and frees, decayed (warm_policy "demand")
-- ARGV[1] room member  ARGV[2] claim id  ARGV[3] now (ms)  ARGV[4] grant deadline (ms)
-- ARGV[5] publish command
-- Returns 1 when the follower was still in the room, else 0.
-- Notes due work (note_due in _lib.lua): the answer is then {"DUE", due, answer} when a
-- note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[3])
local was = redis.call('ZREM', k.followers, ARGV[1])
local q = handoff(k, now, ARGV[4], ARGV[5])
release_claim(k, ARGV[2], now, true, q)
return was
