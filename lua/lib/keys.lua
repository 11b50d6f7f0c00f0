-- lib/keys.lua: a script's KEYS by name; prepended to every script, after KEY_NAMES
-- (lua.go: the names of the script's KEYS, its scope keys in the fixed order of
-- scopeKeyTable in keys.go, then its extra keys). Not a script of its own.

-- scope_keys is the table of a script's KEYS by name (KEY_NAMES): k.pods is the
-- scope's pods key, k.route_answer an extra key of session_route.lua.
local function scope_keys(keys)
  local k = {}
  for i, name in ipairs(KEY_NAMES) do
    k[name] = keys[i]
  end
  return k
end
