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

-- runs `exe <args>` (each argument quoted); returns the output (stdout
-- and stderr), the exit status and the last line
function S.exe(exe, ...)
  local words = {}
  for i, a in ipairs{...} do words[i] = S.quote(a) end
  local p = io.popen(S.quote(exe) .. " " .. table.concat(words, " ") .. " 2>&1")
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code, out:match("([^\n]*)\n?$")
end

-- the files `qkv test` ran, in order, from its "== path" lines
function S.ran(out)
  local list = {}
  for path in out:gmatch("== ([^\n]*)") do list[#list + 1] = path end
  return list
end

-- a new empty folder
function S.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. S.quote(d)))
  return d
end

function S.write(path, text)
  local h = assert(io.open(path, "wb"))
  h:write(text)
  h:close()
end

-- a whole file's text, or nil when it cannot be opened
function S.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- whether the CPU lists the tile unit's bfloat16 products (AMX) and
-- AVX-512's bfloat16 conversions: where qkv's tile kernels run, so that a
-- child under QKV_CPU=avx512 takes another path
function S.has_amx()
  local flags = S.read("/proc/cpuinfo") or ""
  return flags:find("amx_bf16", 1, true) ~= nil and flags:find("avx512_bf16", 1, true) ~= nil
end

return S
