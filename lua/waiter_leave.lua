-- waiter_leave.lua: a waiter that gave up (or whose route failed) leaves the queue; a
-- slot handed to it in the meantime goes on to the next waiter, or is freed.
-- KEYS[1]  {s}:config     HASH   published scope config
-- KEYS[2]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[3]  {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[4]  {s}:slots      HASH   pod id -> sessions + claims
-- KEYS[5]  {s}:idle       ZSET   pod id -> idle since (ms)
-- KEYS[6]  {s}:claims     ZSET   claim id -> deadline (ms)
-- KEYS[7]  {s}:claimpod   HASH   claim id -> pod id | "!reason"
-- KEYS[8]  {s}:waiters    ZSET   waiter id -> deadline (ms)
-- KEYS[9]  {s}:queue      ZSET   waiter id -> arrival number
-- KEYS[10] {s}:wake       the scope's wake-up channel
-- KEYS[11] {s}:due        STRING when the scope's next sweep work falls due (ms)
-- KEYS[12] {s}:served     HASH   pod id -> slots handed out over its life (max_sessions_per_pod)
-- KEYS[13] {s}:demand     HASH   slot takes and frees, decayed (warm_policy "demand")
-- ARGV[1] waiter id  ARGV[2] now (ms)  ARGV[3] grant deadline (ms)  ARGV[4] publish command
-- Returns 1 when it was a waiter, else 0.
-- Notes due work (note_due in _lib.lua): the answer is then {"DUE", due, answer} when a
-- note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[2])
local was = redis.call('ZREM', k.waiters, ARGV[1])
redis.call('ZREM', k.queue, ARGV[1])
local q = handoff(k, now, ARGV[3], ARGV[4])
release_claim(k, ARGV[1], now, true, q)
return was
