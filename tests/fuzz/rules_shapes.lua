-- rules_shapes.lua: the draw of tests/fuzz/rules.lua about the keys of
-- shape and options tables (shapes): PyTorch's keywords in them must be
-- understood, any other key refused.
--
--   a factory's shape table with dtype, device or size (qkv.zeros{2, 3,
--   dtype = "float64"}, qkv.zeros{size = {2, 3}}, x:new_zeros{2, dtype =
--   "int64"}, qkv.randint(0, 5, {size = {3}})) or its options after the
--   sizes (qkv.zeros(2, 3, {dtype = "float64"})); qkv.tensor's outer list
--   with dtype or device (qkv.tensor{{1, 2}, dtype = "int64"}), whose inner
--   lists take no key; a view's (x:view{size =},
--   x:reshape{shape =}, x:expand{size =}, x:permute{dims =}); a method's
--   options (x:flip{dims =}, x:norm(p, {dim =, keepdim =}), x:scatter(dim,
--   index, src, {reduce =}), x:roll{shifts =, dims =}, x:sort(dim,
--   {descending =}), x:topk(k, {largest =}), x:sum{dim =, keepdim =, dtype
--   =}, x:clamp{min =, max =}, x:tril{diagonal =}, x:to{dtype =})
--
-- With known keys alone, a success must be what they ask: the factory's
-- shape, dtype and device, the same values as the positional call (x:flip(1),
-- x:norm(2, 1, true)); an error must name one of them. With a key added
-- that is one of them misspelt (dtpye) or a name of no keyword (bogus,
-- out, layout), the call must raise, naming it.
--
--   R.setup(qkv)
--   R.shapes_applies(e), R.shapes(e, self, args, n) -> self, n, marks, hooks

local V = require "values"
local P = require "params"

local R = {}

local qkv
local random = math.random
local pick, chance = V.pick, V.chance

local ALL = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"}
local FLOAT = {"float32", "float64"}
local INT = {"int64", "int32", "float32", "float64"}
-- names of no keyword the tables take, besides the misspellings
local UNKNOWN = {"bogus", "out", "layout", "pin_memory", "generator", "memory_format", "dtypes"}

-- a key one letter off one of keys, and not one of them
local function misspelt(keys)
  local known = {}
  for _, k in ipairs(keys) do known[k] = true end
  for _ = 1, 8 do
    local key = pick(keys)
    local i, r = random(#key), random(3)
    local k
    if r == 1 and #key > 1 then k = key:sub(1, i - 1) .. key:sub(i + 1)
    elseif r == 2 then k = key:sub(1, i) .. key:sub(i)
    elseif #key > 1 then
      i = math.min(i, #key - 1)
      k = key:sub(1, i - 1) .. key:sub(i + 1, i + 1) .. key:sub(i, i) .. key:sub(i + 2)
    end
    if k and k ~= "" and not known[k] then return k end
  end
  return pick(UNKNOWN)
end

local function sizes(lo)
  local s = {}
  for i = 1, random(lo or 0, 3) do s[i] = random(0, 4) end
  return s
end

local function shape_of(x)
  local s = {}
  for i = 1, x.ndim do s[i] = x.shape[i] end
  return s
end

local function text(s) return "(" .. table.concat(s, ", ") .. ")" end

local function same_list(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b or (a ~= a and b ~= b) end
  if #a ~= #b then return false end
  for i = 1, #a do if not same_list(a[i], b[i]) then return false end end
  return true
end

-- what differs between tensors got and want (shape, dtype, values)
local function differs(got, want)
  if not qkv.is_tensor(got) then return "gave a " .. type(got) .. ", not a tensor" end
  if got.dtype ~= want.dtype then return "gave " .. got.dtype .. ", the positional call " .. want.dtype end
  if not same_list(shape_of(got), shape_of(want)) then
    return "gave " .. text(shape_of(got)) .. ", the positional call " .. text(shape_of(want))
  end
  if not same_list(got:tolist(), want:tolist()) then return "gave other values than the positional call" end
end

local function ints(k, lo, hi)
  local l = {}
  for i = 1, k do l[i] = random(lo, hi) end
  return l
end

---------------------------------------------------------------- factories

-- fn name -> {dtypes it takes, its default dtype (nil: self's), what
-- comes before the shape, what after}
local FACTORY = {
  ["qkv.zeros"] = {ALL, "float32"}, ["qkv.ones"] = {ALL, "float32"},
  ["qkv.rand"] = {FLOAT, "float32"}, ["qkv.randn"] = {FLOAT, "float32"},
  ["qkv.full"] = {ALL, nil, nil, {1}}, ["qkv.randint"] = {INT, "int64", {0, 5}},
  ["Tensor:new_zeros"] = {ALL}, ["Tensor:new_ones"] = {ALL}, ["Tensor:new_empty"] = {ALL},
  ["Tensor:new_full"] = {ALL, nil, nil, {1}},
}
-- full's default dtype is float32 (its value a float)
FACTORY["qkv.full"][2] = "float32"

local function draw_factory(e, self, args, spec)
  local dtypes, default, before, after = spec[1], spec[2], spec[3] or {}, spec[4] or {}
  if e.kind == "tensor" then self = V.tensor(pick{"float32", "float64", "int64"}, {2}, "contiguous") end
  local s = sizes()
  local t, keys, n = {}, {}, 0
  local dtype = chance(0.6) and pick(dtypes) or nil
  local device = chance(0.3) and "cpu" or nil
  local form = random(3)       -- 1: items, 2: size =, 3: the sizes, then {dtype =, device =}
  if form == 3 and (e.kind == "tensor" or e.name == "qkv.randint" or e.name == "qkv.full") then form = 1 end
  for _, v in ipairs(before) do n = n + 1; args[n] = v end
  if form == 1 then for i, v in ipairs(s) do t[i] = v end
  elseif form == 2 then t.size = s; keys[#keys + 1] = "size" end
  if form == 3 then
    for _, v in ipairs(s) do n = n + 1; args[n] = v end
  end
  if dtype then t.dtype = dtype; keys[#keys + 1] = "dtype" end
  if device then t.device = device; keys[#keys + 1] = "device" end
  if form ~= 3 then
    n = n + 1; args[n] = t
    for _, v in ipairs(after) do n = n + 1; args[n] = v end
  else
    n = n + 1; args[n] = t
  end
  local want_dtype = dtype or default or self.dtype
  return self, n, t, keys, {"dtype", "device", "size"}, function(x)
    if not qkv.is_tensor(x) then return "gave a " .. type(x) end
    if not same_list(shape_of(x), s) then return "gave " .. text(shape_of(x)) .. ", not " .. text(s) end
    if x.dtype ~= want_dtype then return "gave " .. x.dtype .. ", not " .. want_dtype end
    if x.device ~= (device or "cpu") then return "gave a tensor on " .. x.device end
  end
end

-- qkv.tensor{..., dtype =, device =}: the outer list takes them, as
-- torch.tensor(data, dtype=) does; an inner list takes its items alone
local function draw_tensor(e, self, args)
  local rows, cols = random(0, 3), random(1, 3)
  local data = {}
  for i = 1, rows do data[i] = ints(cols, -4, 4) end
  if rows == 0 then data = ints(cols, -4, 4) end
  local want = {}
  for i, v in ipairs(data) do want[i] = type(v) == "table" and {table.unpack(v)} or v end
  local dtype = chance(0.6) and pick{"float64", "int64", "int32", "float16", "float32"} or nil
  local device = chance(0.3) and "cpu" or nil
  local t, keys = data, {}
  if dtype then t.dtype = dtype; keys[#keys + 1] = "dtype" end
  if device then t.device = device; keys[#keys + 1] = "device" end
  args[1] = t
  return self, 1, t, keys, {"dtype", "device"}, function(x)
    if not qkv.is_tensor(x) then return "gave a " .. type(x) end
    if x.dtype ~= (dtype or "float32") then return "gave " .. x.dtype .. ", not " .. (dtype or "float32") end
    if not same_list(x:tolist(), want) then return "gave other values than its items" end
  end
end

---------------------------------------------------------------- views

-- fn name -> the key of its shape table
local VIEW = {["Tensor:view"] = "size", ["Tensor:reshape"] = "shape", ["Tensor:expand"] = "size",
              ["Tensor:permute"] = "dims"}

local function permutation(k)
  local p = {}
  for i = 1, k do p[i] = i end
  for i = k, 2, -1 do local j = random(i); p[i], p[j] = p[j], p[i] end
  return p
end

local function draw_view(e, self, args, key)
  local dt = pick{"float32", "float64", "int64"}
  local target, ref
  if e.method == "permute" then
    local s = sizes(1)
    self = V.tensor(dt, s, "contiguous")
    target = permutation(#s)
    ref = function() return self:permute(table.unpack(target)) end
  elseif e.method == "expand" then
    local k = random(1, 3)
    self = V.tensor(dt, {1, k}, "contiguous")
    target = {random(0, 3), k}
    ref = function() return self:expand(target[1], target[2]) end
  else
    target = sizes(1)
    local count = 1
    for _, v in ipairs(target) do count = count * v end
    self = V.tensor(dt, {count}, "contiguous")
    ref = function() return self[e.method](self, table.unpack(target)) end
  end
  local t = {[key] = target}
  args[1] = t
  return self, 1, t, {key}, {key}, function(x)
    local ok, want = pcall(ref)
    return ok and differs(x, want) or nil
  end
end

---------------------------------------------------------------- options

-- fn name -> draw(self) -> x, arguments before the table, the table of
-- known keys, its keys, and the positional call that must give the same
local KEYWORD = {
  flip = function()
    local x = V.tensor("float32", sizes(1), "contiguous")
    local dims = permutation(x.ndim)
    for _ = 1, random(0, #dims - 1) do table.remove(dims) end
    return x, {}, {dims = dims}, {"dims"}, function() return x:flip(table.unpack(dims)) end
  end,
  norm = function()
    local x = V.tensor("float32", {random(1, 3), random(1, 3)}, "contiguous")
    local p, dim, keep = pick{1, 2, math.huge}, random(1, 2), chance(0.5)
    local t, keys = {dim = dim, keepdim = keep}, {"dim", "keepdim"}
    if chance(0.3) then
      return x, {}, {p = p, dim = dim, keepdim = keep}, {"p", "dim", "keepdim"},
             function() return x:norm(p, dim, keep) end
    end
    return x, {p}, t, keys, function() return x:norm(p, dim, keep) end
  end,
  scatter = function()
    local k = random(1, 4)
    local x = qkv.tensor(ints(random(1, 4), -5, 5))
    local index = qkv.tensor(ints(k, 1, x.shape[1]), "int64")
    local src = qkv.tensor(ints(k, -5, 5))
    local reduce = pick{"add", "multiply"}
    return x, {1, index, src}, {reduce = reduce}, {"reduce"}, function()
      local out, idx, s = x:tolist(), index:tolist(), src:tolist()
      for i, j in ipairs(idx) do
        out[j] = reduce == "add" and out[j] + s[i] or out[j] * s[i]
      end
      return qkv.tensor(out)
    end
  end,
  roll = function()
    local x = V.tensor("float32", sizes(1), "contiguous")
    local shifts, dims = random(-3, 3), random(x.ndim)
    return x, {}, {shifts = shifts, dims = dims}, {"shifts", "dims"}, function() return x:roll(shifts, dims) end
  end,
  sort = function()
    local x = qkv.tensor(ints(random(1, 5), -3, 3))
    local desc = chance(0.5)
    return x, {1}, {descending = desc}, {"descending"}, function() return x:sort(1, desc) end
  end,
  topk = function()
    local x = qkv.tensor(ints(random(1, 5), -9, 9))
    local k, largest = random(1, x.shape[1]), chance(0.5)
    return x, {k}, {largest = largest}, {"largest"}, function() return x:topk(k, 1, largest) end
  end,
  sum = function()
    local x = V.tensor("float32", {random(1, 3), random(1, 3)}, "contiguous")
    local dim, keep, dt = random(1, 2), chance(0.5), pick{"float64", "float32"}
    return x, {}, {dim = dim, keepdim = keep, dtype = dt}, {"dim", "keepdim", "dtype"},
           function() return x:to(dt):sum(dim, keep) end
  end,
  clamp = function()
    local x = qkv.tensor(ints(random(1, 5), -5, 5))
    local lo, hi = random(-3, 0), random(0, 3)
    return x, {}, {min = lo, max = hi}, {"min", "max"}, function() return x:clamp(lo, hi) end
  end,
  tril = function()
    local x = V.tensor("float32", {random(1, 4), random(1, 4)}, "contiguous")
    local d = random(-2, 2)
    return x, {}, {diagonal = d}, {"diagonal"}, function() return x:tril(d) end
  end,
  to = function()
    -- (finite: NaN and inf have no int64, which the convert rule draws)
    local x = qkv.randn(sizes())
    local dt = pick{"float64", "int64", "float16"}
    return x, {}, {dtype = dt}, {"dtype"}, function() return x:to(dt) end
  end,
}

local function keyword_of(e)
  local name = e.name:match("^Tensor:(%w+)$") or e.name:match("^qkv%.(%w+)$")
  if name and (e.kind == "tensor" or name == "flip" or name == "norm" or name == "scatter") then
    return KEYWORD[name] and name
  end
end

local function draw_keyword(e, self, args, name)
  local x, before, t, keys, ref = KEYWORD[name]()
  local n = 0
  if e.kind ~= "tensor" then n = 1; args[1] = x end
  for _, v in ipairs(before) do n = n + 1; args[n] = v end
  n = n + 1; args[n] = t
  return e.kind == "tensor" and x or self, n, t, keys, keys, function(...)
    local got = table.pack(...)
    local want = table.pack(pcall(ref))
    if not want[1] then return nil end
    for i = 2, want.n do
      if qkv.is_tensor(want[i]) then
        local why = differs(got[i - 1], want[i])
        if why then return "result " .. (i - 1) .. " " .. why end
      end
    end
  end
end

---------------------------------------------------------------- the rule

function R.shapes_applies(e)
  return FACTORY[e.name] ~= nil or VIEW[e.name] ~= nil or e.name == "qkv.tensor" or keyword_of(e) ~= nil
end

-- the text of a table, as written
local function written(t)
  if type(t) == "string" then return '"' .. t .. '"' end
  if type(t) ~= "table" then return tostring(t) end
  local parts = {}
  for i, v in ipairs(t) do parts[i] = written(v) end
  local keys = {}
  for k in pairs(t) do if type(k) == "string" then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. " = " .. written(t[k]) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

function R.shapes(e, self, args)
  local t, keys, all, check, n
  if FACTORY[e.name] then self, n, t, keys, all, check = draw_factory(e, self, args, FACTORY[e.name])
  elseif VIEW[e.name] then self, n, t, keys, all, check = draw_view(e, self, args, VIEW[e.name])
  elseif e.name == "qkv.tensor" then self, n, t, keys, all, check = draw_tensor(e, self, args)
  else self, n, t, keys, all, check = draw_keyword(e, self, args, keyword_of(e)) end
  local bad
  if chance(0.5) then
    bad = chance(0.75) and misspelt(all) or pick(UNKNOWN)
    -- qkv.tensor's inner lists take no key at all, not even dtype
    local inner = e.name == "qkv.tensor" and type(t[1]) == "table" and chance(0.5) and t[1]
    if inner and chance(0.5) then bad = "dtype" end
    local v = chance(0.5) and t[all[1]] or pick{1, "float64", true}
    if v == nil then v = 1 end
    ;(inner or t)[bad] = v
  end
  local what = written(t)
  if bad then
    local quoted = "'" .. bad .. "'"
    return self, n, {[0] = "the unknown key " .. quoted .. " in " .. what}, {
      post_error = function(err)
        if type(err) == "string" and not err:find(quoted, 1, true) then
          return "an error for the unknown key " .. quoted .. " in " .. what .. " does not name it: " .. err
        end
      end}
  end
  return self, n, {}, {
    post = function(...)
      local why = check(...)
      return why and what .. " " .. why
    end,
    post_error = function(err)
      if type(err) ~= "string" then return nil end
      for _, k in ipairs(keys) do
        if err:find("%f[%w_]" .. k .. "%f[^%w_]") then return nil end
      end
      return what .. ": the keys it takes raised an error that names none of them: " .. err
    end}
end

function R.setup(q) qkv = q end

return R
