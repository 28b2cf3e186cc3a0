-- npy_helpers.lua: what test_npy.lua and test_npz.lua share: a temporary
-- folder removed however the suite ends, reading and writing files, and
-- running a Python script with NumPy (skipping the test without one).
local lu = require "luaunit"
local S = dofile("tests/helpers/shell.lua")

local H = {sh = S.sh, quote = S.quote}

local here = debug.getinfo(1, "S").source:match("^@(.*)$") or "tests/helpers/npy_helpers.lua"
H.FIX = (here:match("^(.*)/[^/]*$") or ".") .. "/../fixtures/npy/"

-- a new temporary folder, and a value whose closing removes it: keep it in
-- a to-be-closed variable of the suite's main chunk
function H.tmpdir()
  local dir = (S.sh("mktemp -d"):gsub("%s+$", ""))
  assert(dir:match("^/"), "mktemp -d failed: " .. dir)
  return dir, setmetatable({}, {__close = function()
    os.execute("rm -rf " .. S.quote(dir))
  end})
end

function H.readfile(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

H.writefile = S.write

-- runs script with Debian's /usr/bin/python3, or the python3 on the PATH when
-- the first has no numpy; returns its output and status, or skips the test
function H.numpy(script, ...)
  local args = {}
  for i, a in ipairs{...} do args[i] = S.quote(a) end
  for _, py in ipairs{"/usr/bin/python3", "python3"} do
    local out, code = S.sh(py .. " -c " .. S.quote(script) .. " " .. table.concat(args, " "))
    if code ~= 127 and not out:find("No module named 'numpy'", 1, true) then
      return out, code
    end
  end
  lu.skip("python3 with numpy is not installed")
end

return H
