-- shell.lua: what the suites that run the qkv executable share: quoting
-- for /bin/sh, running a command for its output and status, reading a file.
local S = {}

function S.quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- runs a shell command; returns its output (stdout and stderr) and status
function S.sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

-- a whole file's text, or nil when it cannot be opened
function S.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

return S
