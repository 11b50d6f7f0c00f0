-- total_taken.lua: the tenants the total cap granted pods since the last take
-- (total_grant.lua), taken out of the granted SET together, for their balance pass.
-- KEYS: | extra: granted
-- ARGV none
-- Returns the tenants taken.
local k = scope_keys(KEYS)
local taken = redis.call('SMEMBERS', k.granted)
redis.call('DEL', k.granted)
return taken
