-- harness.lua: runs one script as `qkv` would and then prints what the
-- script returned (a table of tensors, numbers and strings) after a marker,
-- as a Lua literal that the tests read back with load().
-- Usage: QKV_OUT=dir qkv tests/scripts/harness.lua scripts/x.lua
local path = assert(arg[1], "usage: harness.lua script.lua")
local results = dofile(path)

local function literal(v)
  if qkv.is_tensor(v) then v = {__tensor = v:to("float64"):tolist(), shape = v.shape, dtype = v.dtype} end
  local t = type(v)
  if t == "number" then return string.format("%.17g", v):gsub("inf", "math.huge"):gsub("nan", "0/0") end
  if t == "string" then return string.format("%q", v) end
  if t == "boolean" or t == "nil" then return tostring(v) end
  if t ~= "table" then return "nil" end
  local parts = {}
  for k, x in pairs(v) do
    local key = type(k) == "number" and "[" .. k .. "]" or "[" .. string.format("%q", tostring(k)) .. "]"
    parts[#parts + 1] = key .. " = " .. literal(x)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

io.write("\n--- results ---\n", "return ", literal(results or {}), "\n")
