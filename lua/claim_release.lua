-- claim_release.lua: give back a claim that will not be bound to a session.
-- KEYS[1] {s}:claims    ZSET claim id -> deadline (ms)
-- KEYS[2] {s}:claimpod  HASH claim id -> pod id | "!reason"
-- KEYS[3] {s}:pods      ZSET pod id -> registered at (ms)
-- KEYS[4] {s}:slots     HASH pod id -> sessions + claims
-- KEYS[5] {s}:idle      ZSET pod id -> idle since (ms)
-- ARGV[1] claim id  ARGV[2] now (ms)
-- ARGV[3] "1": a pod left with no slot goes idle; "0": it stays handed out (RM acquire)
-- Returns {pod or "", slots left or -1}
local pod, n = release_claim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1')
return {pod, tostring(n)}
