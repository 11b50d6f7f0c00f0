-- lib/index.lua: the indexes a choice reads instead of scanning the scope (the keys
-- free, freeprev, warm, warmprev, busy, surplus, podsess, podclaims, rooms and open of
-- keys.go). Each is a function of the scope's other keys and its config (deploy_ver,
-- prewarm_ver, pod_concurrency, max_pods, max_sessions_per_pod); a script that changes
-- a pod's podver, slots, idle entry or registration calls pod_index for that pod before
-- it changes another, one that changes a binding, a claimpod entry or a room goes
-- through the helpers below, and a change of those config fields rebuilds them
-- (index_rebuild, room_rebuild). Every read of them is O(log P).
-- uses: claimpod

-- ix caches the config fields the indexes follow for the script's run.
local ix = {}

local function ix_config(k)
  if not ix.cfg then
    local c = redis.call('HMGET', k.config, 'deploy_ver', 'prewarm_ver', 'pod_concurrency', 'max_pods', 'max_served')
    ix.cfg = {ver = c[1], pv = c[2], pc = tonumber(c[3] or '0'), max = tonumber(c[4]), served = tonumber(c[5] or '0')}
  end
  return ix.cfg
end

-- ix_reload forgets the cached config after the script changed it.
local function ix_reload()
  ix.cfg = nil
end

-- before tells whether entry (s1, m1) of a ZSET comes before (s2, m2): by score, then
-- by member byte by byte, as Redis orders them.
local function before(s1, m1, s2, m2)
  if s1 ~= s2 then
    return s1 < s2
  end
  for i = 1, math.min(#m1, #m2) do
    local x, y = string.byte(m1, i), string.byte(m2, i)
    if x ~= y then
      return x < y
    end
  end
  return #m1 < #m2
end

local function zset_if(cond, key, score, member)
  if cond then
    redis.call('ZADD', key, score, member)
  else
    redis.call('ZREM', key, member)
  end
end

-- free_index puts pod in free when it is of the current deploy_ver (cur), has a free
-- slot (n taken) and is not surplus (none: no pod is), and takes it out otherwise;
-- reg is when it registered. Without them it reads them.
local function free_index(k, pod, reg, cur, n, none)
  local c = ix_config(k)
  if reg == nil then
    reg = redis.call('ZSCORE', k.pods, pod)
    cur = reg and c.ver and redis.call('HGET', k.podver, pod) == c.ver
    n = tonumber(redis.call('HGET', k.slots, pod) or '0')
  end
  zset_if(cur and n < c.pc and (none or not redis.call('ZSCORE', k.surplus, pod)), k.free, reg, pod)
end

-- surplus_sync makes surplus the first min(s, |warm|) entries of warm (score 0) and
-- the last min(s - |warm|, |busy|) of busy (score 1), s being the current version's
-- pods beyond max_pods (the choice lib/surplus.lua describes). Each part is kept a
-- prefix of its set: pod, the one pod changed since the last sync (nil: none), is put
-- back at its place first, then each part grows or shrinks at its end, by one entry
-- after a change of one pod. Returns true when no pod is surplus.
local function surplus_sync(k, pod)
  local c = ix_config(k)
  local none = redis.call('ZCARD', k.surplus) == 0
  -- within max_pods in all, none is
  if none and (not c.max or redis.call('ZCARD', k.pods) <= c.max) then
    return true
  end
  local w, b = redis.call('ZCARD', k.warm), redis.call('ZCARD', k.busy)
  local s = c.max and w + b - c.max or 0
  if none and s <= 0 then
    return true
  end
  local parts = {{k.warm, 'ZRANK', 'ZRANGE'}, {k.busy, 'ZREVRANK', 'ZREVRANGE'}}
  local held = {redis.call('ZCOUNT', k.surplus, 0, 0), redis.call('ZCOUNT', k.surplus, 1, 1)}
  if pod then
    local part = redis.call('ZSCORE', k.surplus, pod)
    if part then
      redis.call('ZREM', k.surplus, pod)
      held[tonumber(part) + 1] = held[tonumber(part) + 1] - 1
    end
    for i, p in ipairs(parts) do
      local r = held[i] > 0 and redis.call(p[2], p[1], pod)
      if r and r < held[i] then
        redis.call('ZADD', k.surplus, i - 1, pod)
        held[i] = held[i] + 1
      end
    end
  end
  local want = {math.max(0, math.min(s, w)), math.max(0, math.min(s - w, b))}
  for i, p in ipairs(parts) do
    while held[i] < want[i] do
      local q = redis.call(p[3], p[1], held[i], held[i])[1]
      redis.call('ZADD', k.surplus, i - 1, q)
      free_index(k, q)
      held[i] = held[i] + 1
    end
    while held[i] > want[i] do
      held[i] = held[i] - 1
      local q = redis.call(p[3], p[1], held[i], held[i])[1]
      redis.call('ZREM', k.surplus, q)
      free_index(k, q)
    end
  end
  return held[1] + held[2] == 0
end

-- pod_index brings every pod index up to date with pod's podver, slots, idle entry and
-- registration (none: it is taken out of all).
local function pod_index(k, pod)
  local c = ix_config(k)
  local reg = redis.call('ZSCORE', k.pods, pod)
  local v = reg and redis.call('HGET', k.podver, pod)
  local cur, prev = v and v == c.ver, v and c.pv and v == c.pv
  local since = redis.call('ZSCORE', k.idle, pod)
  local n = tonumber(redis.call('HGET', k.slots, pod) or '0')
  -- without a prewarm_ver freeprev and warmprev are empty (pod_register.lua and
  -- index_rebuild delete them with it)
  if c.pv then
    zset_if(prev and n < c.pc, k.freeprev, reg, pod)
    zset_if(prev and since, k.warmprev, since, pod)
  end
  zset_if(cur and since, k.warm, since, pod)
  zset_if(cur and not since, k.busy, reg, pod)
  free_index(k, pod, reg or false, cur, n, surplus_sync(k, pod))
end

-- index_rebuild builds the pod indexes from the scope's pods (a change of the config
-- fields they follow, a repair), O(P log P).
local function index_rebuild(k)
  ix_reload()
  redis.call('DEL', k.free, k.freeprev, k.warm, k.warmprev, k.busy, k.surplus)
  local c = ix_config(k)
  local pods = redis.call('ZRANGE', k.pods, 0, -1, 'WITHSCORES')
  for i = 1, #pods, 2 do
    local pod, reg = pods[i], pods[i + 1]
    local v = redis.call('HGET', k.podver, pod)
    local since = redis.call('ZSCORE', k.idle, pod)
    if v and v == c.ver then
      zset_if(true, since and k.warm or k.busy, since or reg, pod)
    elseif v and c.pv and v == c.pv then
      if since then
        redis.call('ZADD', k.warmprev, since, pod)
      end
      if tonumber(redis.call('HGET', k.slots, pod) or '0') < c.pc then
        redis.call('ZADD', k.freeprev, reg, pod)
      end
    end
  end
  surplus_sync(k, nil)
  for i = 1, #pods, 2 do
    free_index(k, pods[i])
  end
end

-- first_free is the first pod in the order of pods that takes a new slot (of the
-- current version, or of prev, the version a prewarm still serves), nil when none.
local function first_free(k, prev)
  local a = redis.call('ZRANGE', k.free, 0, 0, 'WITHSCORES')
  if prev and prev == ix_config(k).pv then
    local b = redis.call('ZRANGE', k.freeprev, 0, 0, 'WITHSCORES')
    if b[1] and (not a[1] or before(tonumber(b[2]), b[1], tonumber(a[2]), a[1])) then
      return b[1]
    end
  end
  return a[1]
end

-- last_warm is the most recently idled pod that takes a new slot (of the current
-- version and not surplus, or of prev), nil when none.
local function last_warm(k, prev)
  local best, at
  if redis.call('ZCARD', k.warm) > redis.call('ZCOUNT', k.surplus, 0, 0) then
    local t = redis.call('ZREVRANGE', k.warm, 0, 0, 'WITHSCORES')
    best, at = t[1], tonumber(t[2])
  end
  if prev and prev == ix_config(k).pv then
    local t = redis.call('ZREVRANGE', k.warmprev, 0, 0, 'WITHSCORES')
    if t[1] and (not best or before(at, best, tonumber(t[2]), t[1])) then
      best = t[1]
    end
  end
  return best
end

-- is_surplus tells whether pod is one of the current version's pods beyond max_pods.
local function is_surplus(k, pod)
  return redis.call('ZSCORE', k.surplus, pod) ~= false
end

-- Bindings and claims, by pod: "<pod> <id>" in podsess and podclaims (pod ids have no
-- space), so that one pod's entries are the lex range by_pod gives.
local function by_pod(pod)
  return '[' .. pod .. ' ', '(' .. pod .. '!'
end

-- pod_entries are the ids of one pod's entries in an index by pod (podsess, podclaims).
local function pod_entries(key, pod)
  local lo, hi = by_pod(pod)
  local out = {}
  for _, e in ipairs(redis.call('ZRANGEBYLEX', key, lo, hi)) do
    out[#out + 1] = string.sub(e, #pod + 2)
  end
  return out
end

-- session_bind binds sid to pod (sessions and podsess).
local function session_bind(k, sid, pod)
  local old = redis.call('HGET', k.sessions, sid)
  if old then
    redis.call('ZREM', k.podsess, old .. ' ' .. sid)
  end
  redis.call('HSET', k.sessions, sid, pod)
  redis.call('ZADD', k.podsess, 0, pod .. ' ' .. sid)
end

-- session_unbind drops sid's binding and returns its pod (false for none).
local function session_unbind(k, sid)
  local pod = redis.call('HGET', k.sessions, sid)
  if pod then
    redis.call('HDEL', k.sessions, sid)
    redis.call('ZREM', k.podsess, pod .. ' ' .. sid)
  end
  return pod
end

-- claim_set sets claim c's claimpod entry to v (a pod, or a note), and claim_del
-- drops it; both keep podclaims.
local function claim_del(k, c)
  local old = redis.call('HGET', k.claimpod, c)
  if old then
    redis.call('HDEL', k.claimpod, c)
    if holds_pod(old) then
      redis.call('ZREM', k.podclaims, old .. ' ' .. c)
    end
  end
  return old
end

local function claim_set(k, c, v)
  claim_del(k, c)
  redis.call('HSET', k.claimpod, c, v)
  if holds_pod(v) then
    redis.call('ZADD', k.podclaims, 0, v .. ' ' .. c)
  end
end

-- Rooms. A room member is "<deploy member>|<claim id>"; rooms holds each member of
-- followers under score 0, so one deploy's room is the lex range room_range gives.
local function room_range(d)
  return '[' .. d .. '|', '(' .. d .. '}'
end

-- room_cap is how many followers the room of deploy d takes: pod_concurrency - 1 (the
-- leader's session has the first slot), the whole pod for a warm-pool deploy ("<n>w"),
-- within max_sessions_per_pod.
local function room_cap(k, d)
  local c = ix_config(k)
  local cap = c.pc - 1
  if string.sub(d, -1) == 'w' then
    cap = c.pc
  end
  if c.served > 0 then
    cap = math.min(cap, c.served - (c.pc - cap))
  end
  return cap
end

-- room_index puts deploy d in open while it is in flight and its room takes another
-- follower, and takes it out otherwise.
local function room_index(k, d)
  local live = redis.call('ZSCORE', k.deploying, d)
  local lo, hi = room_range(d)
  zset_if(live and redis.call('ZLEXCOUNT', k.rooms, lo, hi) < room_cap(k, d), k.open,
    tonumber(string.match(d, '^%d+') or '0'), d)
end

-- room_rebuild puts every deploy in flight in open or not (a change of the config
-- fields its rooms' sizes follow), O(deploys).
local function room_rebuild(k)
  ix_reload()
  redis.call('DEL', k.open)
  for _, d in ipairs(redis.call('ZRANGE', k.deploying, 0, -1)) do
    room_index(k, d)
  end
end

-- room_deploy is the deploy member of a room member, nil when it names none.
local function room_deploy(member)
  return string.match(member, '^([^|]*)|')
end

-- room_join puts member in its room until deadline; room_leave takes it out and
-- returns 1 when it was there, else 0.
local function room_join(k, member, deadline)
  redis.call('ZADD', k.followers, deadline, member)
  redis.call('ZADD', k.rooms, 0, member)
  room_index(k, room_deploy(member))
end

local function room_leave(k, member)
  local was = redis.call('ZREM', k.followers, member)
  redis.call('ZREM', k.rooms, member)
  local d = room_deploy(member)
  if d then
    room_index(k, d)
  end
  return was
end

-- room_members are the members of deploy d's room in the order of followers (by
-- deadline, then member).
local function room_members(k, d)
  local lo, hi = room_range(d)
  local out, at = {}, {}
  for _, f in ipairs(redis.call('ZRANGEBYLEX', k.rooms, lo, hi)) do
    out[#out + 1] = f
    at[f] = tonumber(redis.call('ZSCORE', k.followers, f))
  end
  table.sort(out, function(a, b) return before(at[a], a, at[b], b) end)
  return out
end
