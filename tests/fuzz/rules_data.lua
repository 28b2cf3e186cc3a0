-- rules_data.lua: the draws of tests/fuzz/rules.lua about values and
-- files: float -> integer conversions (convert), npz files whose bytes do
-- not match their CRC (crc), tensor names holding a NUL (nul), sizes and
-- indices that overflow int64 (sizes); and the files they read.
--
--   D.setup(qkv)
--   D.files(tmp)           writes the files (crc_*.npz, nul_*.safetensors,
--                          vocab.txt) into the fuzzer's folder
--   D.X_applies(e), D.X(e, self, args, n) -> self, n, marks, hooks
--                          for X = convert, nul, sizes; D.crc(e, self, args)
--   D.nonzero_overflows(shape)  the nonzero sizes multiply past int64

local V = require "values"

local D = {}

local qkv
local random = math.random
local pick, chance = V.pick, V.chance

local function text(v) return V.describe(v) end

---------------------------------------------------------------- convert

local RANGE = {int64 = {-2 ^ 63, 2 ^ 63}, int32 = {-2 ^ 31, 2 ^ 31}}    -- [lo, hi)
-- values no integer of the target holds, and values that are exact ones
-- at its limits (all as floats)
local OUTSIDE = {int64 = {2 ^ 63, -2 ^ 64, 1e19, -1e19, 1e300, -1e300, 2 ^ 64},
                 int32 = {2 ^ 31, -2 ^ 31 - 1, 3e9, -3e9, 2 ^ 40, 1e19, -1e300}}
local EDGE = {int64 = {-2 ^ 63, 2 ^ 62, -2 ^ 62, 2 ^ 63 - 1024, 1e18},
              int32 = {2 ^ 31 - 1, -2 ^ 31, 2147483646.5, -2147483647.5, 1e9}}
local SOURCE = {"float64", "float64", "float32", "float16", "bfloat16"}

local CONVERT = {["Tensor:to"] = true, ["Tensor:long"] = "int64", ["Tensor:int"] = "int32",
                 ["Tensor:copy_"] = true, ["qkv.tensor"] = true}

function D.convert_applies(e) return CONVERT[e.name] ~= nil end

-- v truncated toward 0, or nil when the target holds no such integer
local function trunc(v, target)
  if v ~= v then return nil end
  local t = v >= 0 and math.floor(v) or math.ceil(v)
  local r = RANGE[target]
  if not (t >= r[1] and t < r[2]) then return nil end
  return math.tointeger(t)
end

-- the list l (nested) truncated, or nil and the first value that is not
-- an integer of the target
local function truncated(l, target)
  if type(l) ~= "table" then
    local t = trunc(l, target)
    if t == nil then return nil, l end
    return t
  end
  local out = {}
  for i, v in ipairs(l) do
    local t, bad = truncated(v, target)
    if t == nil then return nil, bad end
    out[i] = t
  end
  return out
end

local function same(a, b)
  if type(a) == "table" and type(b) == "table" then
    if #a ~= #b then return false end
    for i = 1, #a do if not same(a[i], b[i]) then return false end end
    return true
  end
  return a == b
end

local function values(target)
  local v = {}
  for i = 1, random(1, 6) do
    v[i] = chance(0.7) and (random() * 200 - 100) or pick{0.5, -0.5, 2.7, -2.7, -0.0, 1e-300, 3.0}
  end
  if chance(0.6) then
    local bad = chance(0.4) and pick{0 / 0, math.huge, -math.huge} or pick(OUTSIDE[target])
    table.insert(v, random(#v + 1), bad)
  elseif chance(0.5) then
    table.insert(v, random(#v + 1), pick(EDGE[target]))
  end
  return v
end

-- a float tensor of the values (the dtype may round them: its own values
-- are what is judged), sometimes a transposed view
local function source(v)
  local ok, x = pcall(function()
    local y = qkv.tensor(v, "float64")
    local dt = pick(SOURCE)
    if dt ~= "float64" then y = y:to(dt) end
    if #v % 2 == 0 and chance(0.3) then y = y:view(2, #v // 2):t() end
    return y
  end)
  return ok and x or qkv.tensor(v, "float64")
end

function D.convert(e, self, args)
  local target = CONVERT[e.name]
  if target == true then
    target = pick{"int64", "int32"}
    if not rawget(qkv, target) then target = "int64" end
  end
  local v = values(target)
  local src, n, dst
  if e.name == "qkv.tensor" then
    args[1], args[2], n = v, target, 2
    src = v
  else
    src = source(v)
    if e.name == "Tensor:copy_" then
      dst = qkv.zeros(src.shape, target)
      self, args[1], n = dst, src, 1
    else
      self, n = src, 0
      if e.name == "Tensor:to" then args[1], n = target, 1 end
    end
    src = src:tolist()
  end
  local want, bad = truncated(src, target)
  if want == nil then return self, n, {[0] = "a float -> " .. target .. " conversion of " .. text(bad)} end
  return self, n, {}, {post = function(...)
    local result = dst or (...)
    local ok, dt, got = pcall(function() return result.dtype, result:tolist() end)
    if not ok then return "the result of a float -> " .. target .. " conversion is unreadable" end
    if dt ~= target then return "a float -> " .. target .. " conversion gave " .. tostring(dt) end
    if not same(got, want) then
      return "a float -> " .. target .. " conversion changed a value: " .. text(got) ..
             " for " .. text(src)
    end
  end}
end

---------------------------------------------------------------- crc, nul

D.CRC_FILES = {"crc_data.npz", "crc_last.npz", "crc_header.npz", "crc_field.npz"}
D.NUL_FILES = {"nul_escape.safetensors", "nul_only.safetensors", "nul_raw.safetensors",
               "nul_second.safetensors"}

function D.crc(_, self, args)
  args[1] = pick(D.CRC_FILES)
  return self, 1, {[1] = "an npz whose bytes do not match its CRC"}
end

local NUL = {["qkv.load_safetensors"] = true, ["qkv.save_safetensors"] = true}

function D.nul_applies(e) return NUL[e.name] ~= nil end

function D.nul(e, self, args)
  if e.name == "qkv.load_safetensors" then
    args[1] = pick(D.NUL_FILES)
    return self, 1, {[1] = "a tensor name in the header holds a NUL"}
  end
  local t = {[pick{"a\0b", "\0", "w\0"}] = V.tensor()}
  if chance(0.5) then t.ok = V.tensor() end
  args[1], args[2] = pick{"n.safetensors", "sub.safetensors"}, t
  return self, 2, {[2] = "a tensor name holds a NUL"}
end

---------------------------------------------------------------- sizes

local HUGE = {1 << 62, 1 << 61, 1 << 40, 1 << 32, 1 << 33, math.maxinteger, 3037000500}
-- indices no dim can reach
local FAR = {math.mininteger, math.maxinteger, math.mininteger + 1, -(1 << 62), 1 << 62}

local SIZES = {["Tensor:view"] = "view", ["Tensor:reshape"] = "view", ["Tensor:expand"] = "expand",
               ["qkv.zeros"] = "new", ["qkv.ones"] = "new", ["qkv.rand"] = "new",
               ["qkv.randn"] = "new", ["qkv.full"] = "full", ["qkv.heads"] = "heads",
               ["qkv.gather"] = "gather", ["Tensor:gather"] = "gather",
               ["qkv.index_select"] = "index_select", ["Tensor:index_select"] = "index_select",
               ["qkv.embedding"] = "embedding", ["Tensor:scatter_add_"] = "scatter_add_",
               ["Tensor:index_add_"] = "index_add_"}

function D.sizes_applies(e) return SIZES[e.name] ~= nil end

function D.nonzero_overflows(shape)
  local p = 1
  for _, s in ipairs(shape) do
    if math.type(s) == "integer" and s > 0 then
      if p > math.maxinteger // s then return true end
      p = p * s
    end
  end
  return false
end

-- 2 to 5 sizes, one huge at least; with a 0 unless they overflow, so that
-- what succeeds allocates nothing
local function huge_shape()
  local s = {}
  for i = 1, random(2, 5) do
    local r = random()
    s[i] = r < 0.3 and 0 or r < 0.7 and pick(HUGE) or random(1, 4)
  end
  s[random(#s)] = pick(HUGE)
  if not D.nonzero_overflows(s) then s[random(#s)] = 0 end
  return s
end

local function shape_text(s)
  local t = {}
  for i, v in ipairs(s) do t[i] = tostring(v) end
  return "(" .. table.concat(t, ", ") .. ")"
end

-- sizes as separate arguments from index `at`, or one table
local function put_sizes(args, at, s)
  if chance(0.5) then args[at] = s; return at end
  for i, v in ipairs(s) do args[at + i - 1] = v end
  return at + #s - 1
end

local function overflow_mark(s, i)
  if D.nonzero_overflows(s) then
    return {[i] = "sizes " .. shape_text(s) .. " whose nonzero product overflows int64"}
  end
  return {}
end

local function index_with_far(size, k)
  local l = {}
  for i = 1, k do l[i] = random(1, size) end
  local far = pick(FAR)
  l[random(k)] = far
  return qkv.tensor(l, "int64"), far
end

local SIZE_DRAWS = {
  view = function(e, self, args)
    local s = huge_shape()
    if chance(0.2) then
      for i, v in ipairs(s) do if v > 0 and v < 5 then s[i] = -1; break end end
    end
    local rest = {}
    for _, v in ipairs(s) do if v ~= -1 then rest[#rest + 1] = v end end
    self = qkv.zeros(pick{{0}, {2, 0}, {0, 3}})
    return self, put_sizes(args, 1, s), overflow_mark(rest, 1)
  end,
  expand = function(e, self, args)
    local s = huge_shape()
    local own = {}
    for i = 1, random(1, #s) do own[i] = 1 end
    if s[#s] == 0 then own[#own] = 0 end
    self = qkv.zeros(own)
    return self, put_sizes(args, 1, s), overflow_mark(s, 1)
  end,
  new = function(e, self, args)
    local s = huge_shape()
    local n = put_sizes(args, 1, s)
    if chance(0.3) then n = n + 1; args[n] = pick{"float32", "int64", "bool"} end
    return self, n, overflow_mark(s, 1)
  end,
  full = function(e, self, args)
    local s = huge_shape()
    args[1], args[2] = s, 1.5
    return self, 2, overflow_mark(s, 1)
  end,
  heads = function(e, self, args)
    local lead = {}
    for i = 1, random(0, 3) do lead[i] = chance(0.8) and random(1, 14) or 1 << 40 end
    local n = random(0, 2)
    local shape = {table.unpack(lead)}
    shape[#shape + 1], shape[#shape + 2] = n, 0
    local ok, x = pcall(qkv.zeros, shape)
    if not ok then shape, x = {2, 14, 14, 1, 0}, qkv.zeros(2, 14, 14, 1, 0) end
    local h = pick(HUGE)
    local out = {table.unpack(shape, 1, #shape - 2)}
    out[#out + 1], out[#out + 2] = h, shape[#shape - 1]
    args[1], args[2] = x, h
    return self, 2, overflow_mark(out, 2)
  end,
  gather = function(e, self, args)
    local size = random(1, 5)
    local x = V.tensor("float32", {size})
    local index, far = index_with_far(size, random(1, 4))
    local why = {[0] = "an index of " .. text(far)}
    if e.kind == "tensor" then
      args[1], args[2] = pick{1, -1}, index
      return x, 2, why
    end
    args[1], args[2], args[3] = x, pick{1, -1}, index
    return self, 3, why
  end,
  embedding = function(e, self, args)
    local size = random(1, 5)
    local ids, far = index_with_far(size, random(1, 4))
    args[1], args[2] = ids, V.tensor("float32", {size, random(1, 3)})
    return self, 2, {[1] = "an index of " .. text(far)}
  end,
  scatter_add_ = function(e, self, args)
    local size, k = random(1, 5), random(1, 4)
    local index, far = index_with_far(size, k)
    args[1], args[2], args[3] = pick{1, -1}, index, V.tensor("float32", {k})
    return qkv.zeros(size), 3, {[2] = "an index of " .. text(far)}
  end,
  index_add_ = function(e, self, args)
    local size, k, d = random(1, 5), random(1, 4), random(1, 3)
    local index, far = index_with_far(size, k)
    args[1], args[2], args[3] = pick{1, -2}, index, V.tensor("float32", {k, d})
    return qkv.zeros(size, d), 3, {[2] = "an index of " .. text(far)}
  end,
}
SIZE_DRAWS.index_select = SIZE_DRAWS.gather

function D.sizes(e, self, args)
  return SIZE_DRAWS[SIZES[e.name]](e, self, args)
end

---------------------------------------------------------------- files

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

local function flip(s, at) return s:sub(1, at - 1) .. string.char(s:byte(at) ~ 0x5a) .. s:sub(at + 1) end

-- every occurrence of the plain string a in s replaced by b
local function replace(s, a, b)
  local out, i = {}, 1
  while true do
    local j = s:find(a, i, true)
    if not j then break end
    out[#out + 1] = s:sub(i, j - 1) .. b
    i = j + #a
  end
  out[#out + 1] = s:sub(i)
  return table.concat(out)
end

-- the stored (not deflated) entries of a zip: {name, data offset, size, crc}
local function entries(z)
  local list, pos = {}, 1
  while string.unpack("<I4", z, pos) == 0x04034b50 do
    local crc, size, _, nlen, xlen = string.unpack("<I4I4I4I2I2", z, pos + 14)
    local name = z:sub(pos + 30, pos + 29 + nlen)
    list[#list + 1] = {name = name, at = pos + 30 + nlen + xlen, size = size, crc = crc}
    pos = pos + 30 + nlen + xlen + size
  end
  return list
end

local function npz_files(tmp)
  local path = tmp .. "/crc_source.npz"
  qkv.savez(path, {a = qkv.tensor{1.5, 2.5, 3.5}, b = qkv.arange(6, "int64"):view(2, 3)})
  local f = assert(io.open(path, "rb"))
  local z = f:read("a")
  f:close()
  os.remove(path)
  local list = entries(z)
  local a, b = list[1], list[#list]
  write(tmp .. "/crc_data.npz", flip(z, a.at + a.size - 1))         -- the last data byte
  write(tmp .. "/crc_last.npz", flip(z, b.at + b.size - 5))
  -- a's dtype in its .npy header: '<f4' becomes '<i4', as many bytes
  local descr = z:find("<f4", a.at, true)
  write(tmp .. "/crc_header.npz", z:sub(1, descr) .. "i" .. z:sub(descr + 2))
  -- the data whole and its CRC changed, in the local and central headers
  local crc = string.pack("<I4", a.crc)
  write(tmp .. "/crc_field.npz", replace(z, crc, string.pack("<I4", a.crc ~ 1)))
end

local function safetensors(header, data)
  return string.pack("<I8", #header) .. header .. data
end

local function safetensors_files(tmp)
  local one = '"dtype":"F32","shape":[2],"data_offsets":[%d,%d]'
  local data = string.pack("<ffff", 1, 2, 3, 4)
  local function entry(name, a, b) return '"' .. name .. '":{' .. one:format(a, b) .. '}' end
  write(tmp .. "/nul_escape.safetensors", safetensors("{" .. entry("a\\u0000b", 0, 8) .. "}", data:sub(1, 8)))
  write(tmp .. "/nul_only.safetensors", safetensors("{" .. entry("\\u0000", 0, 8) .. "}", data:sub(1, 8)))
  write(tmp .. "/nul_raw.safetensors", safetensors("{" .. entry("a\0b", 0, 8) .. "}", data:sub(1, 8)))
  write(tmp .. "/nul_second.safetensors",
        safetensors("{" .. entry("w", 0, 8) .. "," .. entry("w\\u0000", 8, 16) .. "}", data))
end

function D.files(tmp)
  npz_files(tmp)
  safetensors_files(tmp)
  write(tmp .. "/vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n##s\n")
end

function D.setup(q) qkv = q end

return D
