-- fakes.lua: functions that break the fuzzer's rules on purpose, given to
-- it with --extra by tests/bindings/test_fuzz.lua to check that it reports them
-- (and does not report the one that keeps the rules).
local qkv = qkv or require "qkv"
local kept = {}

return {
  -- an error that does not say whose it is
  {name = "fake.unnamed", fn = function() error("something went wrong", 0) end},
  -- an error that is not a string
  {name = "fake.table", fn = function() error({code = 1}) end},
  -- a result that is not a well-formed tensor: one closed before it returns
  {name = "fake.malformed", fn = function()
    local x = qkv.ones(2)
    getmetatable(x).__close(x)
    return x
  end},
  -- keeps every tensor it makes: live tensor memory grows over the run
  {name = "fake.hoard", fn = function() kept[#kept + 1] = qkv.zeros(1 << 19) end},
  -- never returns when x is an empty tensor: its loop steps by x:numel()
  -- (the watchdog must kill it; a Lua hook is not what stops it)
  {name = "fake.hang", params = {{name = "x"}}, fn = function(x)
    local ok, n = pcall(function() return x:numel() end)
    local i = 0
    while ok and i < 1 do i = i + n end
  end},
  -- keeps the rules: its errors name it, its results are tensors
  {name = "fake.good", fn = function(x)
    if x == nil then error("good: x is nil", 0) end
    return qkv.ones(1), {qkv.zeros(2, 0)}
  end},
  -- a writer that takes a path with a NUL (C would write to the part
  -- before it): the hostile paths must make it a finding
  {name = "fake.save", params = {{name = "path"}, {name = "x"}}, paths = true, fn = function(path)
    if type(path) ~= "string" then error("save: path must be a string", 0) end
  end},
  -- a size that is clamped rather than refused (NaN, 2^63, 1e300 make 2)
  {name = "fake.size", params = {{name = "n"}}, fn = function(n)
    if type(n) ~= "number" then error("size: n must be a number", 0) end
    return qkv.zeros(math.tointeger(n) and math.max(0, math.min(n, 3)) or 2)
  end},
}
