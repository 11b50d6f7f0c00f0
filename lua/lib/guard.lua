-- lib/guard.lua: the caller's deadline, checked first by every script that changes
-- state on a caller's behalf (lua.go marks them guarded and prepends this after the
-- includes a script uses; it is not a script of its own, nor an include to declare).
-- The caller appends its deadline to ARGV: wall-clock ms, its context's deadline or the
-- moment its Redis client stops waiting for the answer, whichever comes first; 0 for
-- none. The guard takes it off ARGV again, so a script sees the ARGV its header names,
-- and refuses the call when Redis runs it after that deadline: the caller has given up
-- and answered an error (STORE_UNAVAILABLE), and must not find its work done later, as
-- when Redis was paused and resumed with the call still queued.
-- Why this reads the server's clock (TIME) when every other rule takes "now" from
-- ARGV: those rules compare deadlines that callers wrote with a caller's now, so tests
-- drive time and no two clocks are compared. This question is when Redis runs the
-- call, which only Redis's clock can tell. It compares a replica's wall clock with
-- Redis's, so it allows them to differ by deadline_skew_ms.
-- Returns {"DEADLINE"} when it refuses; otherwise the script runs.
do
  local deadline_skew_ms = 100
  local deadline = tonumber(table.remove(ARGV))
  if deadline > 0 then
    local t = redis.call('TIME')
    if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > deadline + deadline_skew_ms then
      return {'DEADLINE'}
    end
  end
end
