-- lib/expire.lua: the leftovers of crashed callers and leaders.
-- uses: slots deploy

-- expire_pool drops the expired claims, then the expired deploy leases (sending their
-- followers to try again) and room entries: the leftovers of crashed callers and
-- leaders.
local function expire_pool(k, now, note_deadline, q)
  expire_claims(k, now, q)
  expire_deploys(k, now, note_deadline)
end
