-- values.lua: the API fuzzer's argument generators (tests/fuzz/fuzz_api.lua).
--
-- Every draw comes from math.random, which the driver seeds from (seed,
-- call number) before each call, so one call can be replayed alone.
--
--   V.setup(qkv, tmp)      the pools; tmp is the fuzzer's own temp folder
--   V.files()              the files the readers read (in tmp)
--   V.any([depth])         any value: nil, booleans, numbers, strings,
--                          tables, tensors, functions, coroutines, ...
--   V.tensor([dtype, shape, layout])  a random tensor, maybe a
--                          non-contiguous view, a closed one or on "cuda"
--   V.describe(v)          a short text for the crash file and findings
-- tests/fuzz/hostile.lua adds its values to V.any's draw (V.hostile) and
-- describes its proxies (V.describe_hook).
-- Valid-looking values are tests/fuzz/params.lua's, which fills in
-- V.OPTIONS (generators by option name) and V.make_module.
--
-- Paths: a string may reach a file option or qkv.save, so the string pool
-- holds only names inside tmp (relative ones land there: the fuzzer runs
-- with tmp as its working directory), "/nonexistent/dir/x" and "", and
-- random bytes never contain '/'.

local V = {}

local qkv, TMP
local random = math.random
local INTS, FLOATS, STRINGS, DTYPES

local function pick(list) return list[random(#list)] end
local function chance(p) return random() < p end
V.pick, V.chance = pick, chance

-- index into a list of {weight, value}
local function weighted(list)
  local total = 0
  for _, w in ipairs(list) do total = total + w[1] end
  local r = random() * total
  for _, w in ipairs(list) do
    r = r - w[1]
    if r <= 0 then return w[2] end
  end
  return list[#list][2]
end

---------------------------------------------------------------- numbers

local function small_int() return random(-4, 8) end

local function any_int()
  if chance(0.6) then return pick{0, 1, 2, 3, -1, 1, 2} end
  if chance(0.5) then return small_int() end
  return pick(INTS)
end

local function any_float()
  if chance(0.3) then return random() * 4 - 2 end
  return pick(FLOATS)
end
V.any_float = any_float

---------------------------------------------------------------- strings

local function random_bytes()
  local n, b = random(0, 12), {}
  for i = 1, n do
    local c = random(0, 255)
    if c == 47 then c = 95 end          -- never a '/'
    b[i] = string.char(c)
  end
  return table.concat(b)
end

local function any_string()
  if chance(0.15) then return random_bytes() end
  return pick(STRINGS)
end

---------------------------------------------------------------- tensors

-- ndim 0..8, mostly 1..3; sizes 0..7, numel at most `cap`
function V.shape(cap)
  cap = cap or (chance(0.9) and 64 or 4096)
  local nd = weighted{{1, 0}, {4, 1}, {4, 2}, {3, 3}, {2, 4}, {1, 5}, {1, 6},
                      {0.5, 7}, {0.5, 8}}
  local s = {}
  for i = 1, nd do
    s[i] = chance(0.07) and 0 or (chance(0.8) and random(1, 4) or random(1, 16))
  end
  local function numel()
    local n = 1
    for _, v in ipairs(s) do n = n * v end
    return n
  end
  while numel() > cap do
    local k = 1
    for i = 2, nd do if s[i] > s[k] then k = i end end
    s[k] = s[k] // 2
  end
  return s
end

local SPECIAL = {0 / 0, math.huge, -math.huge, -0.0, 1e30, -1e30, 1e-40, 5e-324,
                 1e308, 0.5, 0}

local function values(dtype, n)
  local v, specials = {}, chance(0.3)
  for i = 1, n do
    if dtype == "bool" then v[i] = chance(0.5)
    elseif dtype == "int64" then
      v[i] = (specials and chance(0.1)) and pick(INTS) or random(-5, 5)
    elseif dtype == "int32" then
      v[i] = (specials and chance(0.1)) and pick{2147483647, -2147483648, 0, -1}
             or random(-5, 5)
    else
      v[i] = (specials and chance(0.2)) and pick(SPECIAL) or (random() * 4 - 2)
    end
  end
  return v
end

local function numel_of(s)
  local n = 1
  for _, v in ipairs(s) do n = n * v end
  return n
end

local function contiguous_tensor(dtype, shape)
  if #shape == 0 then return qkv.tensor(values(dtype, 1)[1], dtype) end
  local n = numel_of(shape)
  if n > 256 and dtype ~= "bool" and dtype ~= "int64" and dtype ~= "int32" then
    local x = qkv.randn(shape, dtype == "float64" and "float64" or "float32")
    return x.dtype == dtype and x or x:to(dtype)
  end
  return qkv.tensor(values(dtype, n), dtype):view(shape)
end

local function copy(s)
  local c = {}
  for i, v in ipairs(s) do c[i] = v end
  return c
end

-- a view of `shape` that is not contiguous: made from a larger or permuted
-- tensor so that the result has exactly the shape asked for
local LAYOUTS = {
  transpose = function(dtype, s)
    if #s < 2 then return nil end
    local i, j = random(#s), random(#s)
    if i == j then j = i % #s + 1 end
    local b = copy(s)
    b[i], b[j] = s[j], s[i]
    return contiguous_tensor(dtype, b):transpose(i, j)
  end,
  permute = function(dtype, s)
    if #s < 2 then return nil end
    local p = {}
    for i = 1, #s do p[i] = i end
    for i = #s, 2, -1 do local j = random(i); p[i], p[j] = p[j], p[i] end
    local b = {}
    for i = 1, #s do b[p[i]] = s[i] end
    return contiguous_tensor(dtype, b):permute(p)
  end,
  narrow = function(dtype, s)
    if #s < 1 then return nil end
    local k, extra = random(#s), random(1, 2)
    local b = copy(s)
    b[k] = s[k] + extra
    return contiguous_tensor(dtype, b):narrow(k, random(1, extra + 1), s[k])
  end,
  select = function(dtype, s)
    if #s >= 8 then return nil end
    local k, b = random(#s + 1), copy(s)
    table.insert(b, k, random(2, 3))
    return contiguous_tensor(dtype, b):select(k, random(-2, 2) % 2 + 1)
  end,
  expand = function(dtype, s)
    local b, any = copy(s), false
    for i = 1, #s do
      if s[i] > 1 and chance(0.6) then b[i], any = 1, true end
    end
    if not any then return nil end
    return contiguous_tensor(dtype, b):expand(s)
  end,
}
local LAYOUT_NAMES = {"transpose", "permute", "narrow", "select", "expand"}
V.LAYOUT_NAMES = LAYOUT_NAMES

-- a tensor of dtype and shape (random when nil); layout "contiguous", a
-- name of LAYOUTS, or nil for a random one (a third are views)
function V.tensor(dtype, shape, layout)
  dtype = dtype or pick(DTYPES)
  shape = shape or V.shape()
  if layout == nil then
    layout = chance(0.35) and pick(LAYOUT_NAMES) or "contiguous"
  end
  local x = layout ~= "contiguous" and LAYOUTS[layout](dtype, shape)
  return x or contiguous_tensor(dtype, shape)
end

-- odd tensors: closed, on another device (no CUDA build: x:cuda() raises),
-- 8-D, empty, 0-d
local function odd_tensor()
  local r = random(5)
  if r == 1 then
    local x = V.tensor()
    getmetatable(x).__close(x)
    return x
  elseif r == 2 then
    local x = V.tensor()
    local ok, y = pcall(x.cuda, x)
    return ok and y or x
  elseif r == 3 then
    local s = {}
    for i = 1, 8 do s[i] = random(1, 2) end
    return V.tensor(nil, s)
  elseif r == 4 then
    local s = V.shape()
    s[#s + 1] = 0
    if #s > 8 then table.remove(s, 1) end
    return V.tensor(nil, s)
  end
  return V.tensor(nil, {})
end

---------------------------------------------------------------- tables

local function deep_table(levels)
  local t = {1}
  for _ = 2, levels do t = {t} end
  return t
end

-- known option names (V.OPTION_NAMES) with values that make sense for
-- them (V.OPTIONS) or any, and unknown names
function V.option_table(depth)
  depth = depth or 1
  local t = {}
  for _ = 1, random(0, 4) do
    local k = chance(0.85) and pick(V.OPTION_NAMES) or any_string()
    if chance(0.6) and V.OPTIONS[k] then t[k] = V.OPTIONS[k]()
    else t[k] = V.any(depth + 1) end
  end
  return t
end
local option_table = V.option_table

local function any_table(depth)
  local r = random(14)
  if r == 1 then return {} end
  if r == 2 then                              -- sizes
    local t = {}
    for i = 1, random(0, 9) do t[i] = chance(0.8) and random(0, 4) or any_int() end
    return t
  end
  if r == 3 then return {{1, 2, 3}, {4, 5, 6}} end
  if r == 4 then return pick{{{1, 2}, {3}}, {1, {2}}, {{1}, 2}, {{}, {1}}, {{true}, {1}}} end
  if r == 5 then return deep_table(random(7, 11)) end
  if r == 6 then return pick{{1, nil, 3}, {[1] = 1, [3] = 3}, {n = 3}, {1, 2, x = 3},
                             {[0] = 1}, {[-1] = 2, 1}, {[1.5] = 1}} end
  if r == 7 then                              -- tensors
    local t, dt, s = {}, pick(DTYPES), V.shape(16)
    for i = 1, random(0, 4) do t[i] = chance(0.7) and V.tensor(dt, s) or V.tensor() end
    return t
  end
  if r == 8 then return {"a", "b", "c"} end
  if r == 9 or r == 10 then return option_table(depth) end
  if r == 11 then return {0 / 0, math.huge, -math.huge, 1e308} end
  if r == 12 then return {true, false} end
  if r == 13 then return {{V.tensor(), option_table(depth)}} end
  local t = {}
  if depth < 2 then
    for i = 1, random(0, 4) do t[i] = V.any(depth + 1) end
  end
  return t
end

---------------------------------------------------------------- any value

local EXTRA = {}       -- function, coroutine, file, module, qkv: made in setup

function V.any(depth)
  depth = depth or 0
  local kind = weighted{{6, "nil"}, {5, "boolean"}, {14, "int"}, {10, "float"},
                        {12, "string"}, {depth < 2 and 14 or 2, "table"},
                        {30, "tensor"}, {3, "odd"}, {5, "extra"},
                        {V.hostile and 4 or 0, "hostile"}}
  if kind == "nil" then return nil end
  if kind == "boolean" then return chance(0.5) end
  if kind == "int" then return any_int() end
  if kind == "float" then return any_float() end
  if kind == "string" then return any_string() end
  if kind == "table" then return any_table(depth) end
  if kind == "tensor" then return V.tensor() end
  if kind == "odd" then return odd_tensor() end
  if kind == "hostile" then return V.hostile(depth) end
  return pick(EXTRA)()
end

---------------------------------------------------------------- describe

function V.describe(v, depth)
  depth = depth or 0
  local hook = V.describe_hook and V.describe_hook(v)
  if hook then return hook end
  local ty = type(v)
  if ty == "string" then
    if #v > 40 then return string.format("%q..(%d bytes)", v:sub(1, 40), #v) end
    return (string.format("%q", v):gsub("\n", "n"))
  end
  if ty == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    return string.format("%.17g", v)
  end
  if qkv.is_tensor(v) then
    local ok, s = pcall(function()
      local st = {}
      for i = 1, v:dim() do st[i] = v:stride(i) end
      return string.format("tensor %s %s strides (%s)%s", v.dtype, tostring(v.shape),
                           table.concat(st, ", "), v.device ~= "cpu" and " " .. v.device or "")
    end)
    return ok and s or "tensor <closed>"
  end
  if ty == "table" then
    if depth >= 2 then return "{...}" end
    local parts, n = {}, 0
    for k, x in next, v do              -- not pairs: a __pairs may do anything
      n = n + 1
      if n > 6 then parts[#parts + 1] = "..."; break end
      local key = math.type(k) == "integer" and "" or (tostring(k) .. "=")
      parts[#parts + 1] = key .. V.describe(x, depth + 1)
    end
    local mt = getmetatable(v)
    local name = type(mt) == "table" and rawget(mt, "__name")
    return (name and name .. " " or "") .. "{" .. table.concat(parts, ", ") .. "}"
  end
  return ty == "nil" and "nil" or (ty == "boolean" and tostring(v) or ty)
end

---------------------------------------------------------------- setup

-- files for the readers, the same in every run (the writers write other
-- names): whole ones, cut short, with a byte changed, and empty
local function write(path, bytes)
  local f = assert(io.open(TMP .. "/" .. path, "wb"))
  f:write(bytes)
  f:close()
end

local function read(path)
  local f = io.open(TMP .. "/" .. path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function V.files()
  qkv.seed(1)
  local x = qkv.randn(3, 4)
  if qkv.save then qkv.save(TMP .. "/in.npy", x) end
  if qkv.savez then qkv.savez(TMP .. "/in.npz", {a = x, b = qkv.arange(5, "int64")}) end
  pcall(qkv.plot.heatmap, x, {file = TMP .. "/in.png"})
  pcall(qkv.save_safetensors, TMP .. "/in.safetensors", {a = x, b = qkv.arange(5, "int64")})
  write("empty.npy", "")
  for _, ext in ipairs{"npy", "npz", "png", "safetensors"} do
    local whole = read("in." .. ext)
    if whole then
      write("cut." .. ext, whole:sub(1, #whole // 2))
      local k = #whole // 3
      write("flip." .. ext, whole:sub(1, k) .. string.char((whole:byte(k + 1) + 1) % 256) ..
                            whole:sub(k + 2))
    end
  end
end

function V.setup(q, tmp)
  qkv, TMP = q, tmp
  DTYPES = {}
  for k, v in pairs(qkv) do
    if type(k) == "string" and v == k then DTYPES[#DTYPES + 1] = k end
  end
  table.sort(DTYPES)
  INTS = {0, 1, 2, 3, -1, -2, 1 << 31, -(1 << 31), 1 << 53, 1 << 62,
          math.maxinteger, math.mininteger, 255, 65536}
  FLOATS = {0 / 0, math.huge, -math.huge, -0.0, 0.0, 0.5, -0.5, 1e308, -1e308,
            5e-324, 1e-310, 2.0, 3.0, -1.0, 2^63, 1e-8, 2.5}
  STRINGS = {"", "cpu", "cuda", "gpu", "float16", "bfloat16", "int32", "FLOAT32",
             string.rep("a", 5000), "%", "%d+", "[", "(.-)", "%s%s%s%n", "%.2f",
             "%I", "\0", "nan", "inf", "2", "-1", "0x10", " 3 ", "1e2",
             "linear", "mlp", "identity", "viridis", "nope", "#ff0000", "#zz",
             "x", "shape", "dtype", "__index", "forward",
             "a.npy", "b.png", "c.npz", "fig.png", "sub/x.png", "x.npy",
             tmp .. "/f.npy", tmp .. "/g.png", tmp .. "/nodir/x.npy", tmp,
             "/nonexistent/dir/x"}
  for _, d in ipairs(DTYPES) do STRINGS[#STRINGS + 1] = d end
  V.DTYPES, V.TMP = DTYPES, tmp
  local co = coroutine.create(function() end)
  EXTRA = {
    function() return function() return 1 end end,
    function() return co end,
    function() return io.stdout end,
    function() return V.make_module() end,
    function() return qkv end,
    function() return qkv.nn end,
    -- a finite list and odd fields behind __index (a function answering
    -- every key would be an endless list to ipairs)
    function() return setmetatable({}, {__index = {1, 2, 3, shape = {1}, dtype = "float32",
                                                   state_dict = 1, forward = 1}}) end,
  }
end

return V
