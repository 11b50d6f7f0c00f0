-- lib/claimpod.lua: what a claim's claimpod entry says: the pod it holds a slot of,
-- or a note ("!reason") for a follower whose deploy ended without a slot for it.

-- holds_pod tells a claimpod value that names a pod from a failure note.
local function holds_pod(v)
  return v and v ~= '' and string.sub(v, 1, 1) ~= '!'
end

-- LOST marks the note of a lost deploy: "!" .. LOST .. reason.
local LOST = 'lost:'

-- NO_SLOT is the note (claimpod) of a follower that its deploy's pod had no slot for:
-- pod_concurrency was lowered while it deployed, below what its room had let in. The
-- follower acquires again (follower_wait.lua answers "retry").
local NO_SLOT = '!no slot left for it on the pod: pod_concurrency was lowered while it deployed'
