-- util.lua: what the per-seed script tests share: run a script in its own
-- qkv process with PNGs going to a fresh folder, and read back what it
-- printed and returned.
local U = {}

local exe = arg and arg[-1] or "build/qkv"
local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- run(script) -> {stdout = text printed, results = returned table (tensors
-- come back as {__tensor = nested float64 lists, shape = ...}), out = the
-- folder with its PNGs, pngs = list of file names}
function U.run(script)
  local p = io.popen("mktemp -d")
  local dir = p:read("l")
  p:close()
  local cmd = string.format("cd %s && QKV_OUT=%s NO_COLOR=1 %s tests/scripts/harness.lua %s 2>&1",
                            quote(os.getenv("PWD") or "."), quote(dir), quote(exe), quote(script))
  p = io.popen(cmd)
  local text = p:read("a")
  local ok, _, code = p:close()
  assert(ok, script .. " failed (exit " .. tostring(code) .. "):\n" .. text)
  local stdout, lit = text:match("^(.*)\n%-%-%- results %-%-%-\n(.*)$")
  assert(stdout, script .. ": no results marker in its output:\n" .. text)
  local results = assert(load(lit))()
  local pngs = {}
  p = io.popen("ls " .. quote(dir))
  for f in p:lines() do pngs[#pngs + 1] = f end
  p:close()
  return {stdout = stdout, results = results, out = dir, pngs = pngs}
end

-- remove a run's PNG folder
function U.clean(r)
  os.execute("rm -rf " .. quote(r.out))
end

-- the nested lists of a returned tensor
function U.values(t) return assert(t and t.__tensor, "not a returned tensor") end

-- max |a - b| over nested lists of numbers
function U.maxdiff(a, b)
  if type(a) == "number" then return math.abs(a - b) end
  assert(#a == #b, "lengths differ: " .. #a .. " vs " .. #b)
  local m = 0
  for i = 1, #a do m = math.max(m, U.maxdiff(a[i], b[i])) end
  return m
end

-- the numbers in a line of text, in order
function U.numbers(line)
  local r = {}
  for n in line:gmatch("%-?%d+%.?%d*[eE]?[-+]?%d*") do r[#r + 1] = tonumber(n) end
  return r
end

return U
