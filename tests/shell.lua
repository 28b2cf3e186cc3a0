-- shell.lua: what the suites that run the qkv executable share: quoting
-- for /bin/sh and running a command for its output and status.
local S = {}

function S.quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- runs a shell command; returns its output (stdout and stderr) and status
function S.sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

return S
