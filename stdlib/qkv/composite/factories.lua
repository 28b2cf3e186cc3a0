-- composite/factories.lua: the factories PyTorch has and qkv's C ops
-- do not: zeros_like ... empty_like, x:new_zeros ..., randint, randperm,
-- linspace, logspace, manual_seed, each made from qkv.zeros, qkv.full, qkv.rand
-- and the elementwise ops (qkv.composite installs them; see there).

local qkv = require "qkv"
local S = require "qkv.composite.args"

local fail, tensor_arg, int_arg, FLOATS = S.fail, S.tensor_arg, S.int_arg, S.FLOATS
local factory_opts, shape_arg, sizes, number_arg = S.factory_opts, S.shape_arg, S.sizes, S.number_arg

-- a fill value as qkv.full takes it
local function fill_arg(v)
  if type(v) ~= "number" and type(v) ~= "boolean" then
    fail("fill_value must be a number or a boolean, got %s", type(v))
  end
end

-- qkv.zeros_like(x [, opts]) and its kin: maker on x's shape, with x's
-- dtype and device unless opts say otherwise; random ones are floats
local function like(fname, maker, floats)
  return function(x, opts)
    tensor_arg(x, "x")
    local dtype, device = factory_opts(fname, opts, x.dtype, x.device)
    if floats and not FLOATS[dtype] then
      fail("random tensors are floats, and x is %s; give {dtype = \"float32\"}", dtype)
    end
    return maker(sizes(x), dtype, device)
  end
end
local function full_like(x, v, opts)
  tensor_arg(x, "x")
  local dtype, device = factory_opts("full_like", opts, x.dtype, x.device)
  fill_arg(v)
  return qkv.full(sizes(x), v, dtype, device)
end
-- x:new_zeros(size [, opts]) and its kin: x's dtype and device; size is a
-- list (which may hold the options, as qkv.zeros's shape), or (but for
-- new_full) sizes as arguments, x:new_zeros(2, 3)
local function new_factory(fname, fill)
  return function(x, shape, ...)
    tensor_arg(x, "x")
    local v, opts = nil, ...
    local extra = select("#", ...)
    while extra > 0 and select(extra, ...) == nil do extra = extra - 1 end
    if fill then
      v, opts = ...
      fill_arg(v)
    end
    if (fill or type(shape) ~= "number") and extra > (fill and 2 or 1) then
      fail("takes %s and options, got %d more argument%s", fill and "size, fill_value" or "size",
           extra - (fill and 2 or 1), extra - (fill and 2 or 1) == 1 and "" or "s")
    end
    if not fill and type(shape) == "number" then
      local rest = table.pack(...)
      shape = {shape}
      for i = 1, rest.n do
        if type(rest[i]) ~= "number" then
          if i < rest.n then fail("size %d must be an integer, got %s", i + 1, type(rest[i])) end
          break
        end
        shape[#shape + 1] = rest[i]
      end
      opts = type(rest[rest.n]) ~= "number" and rest[rest.n] or nil
      if #shape > 8 then fail("size has %d sizes, at most 8", #shape) end
    end
    local s, held = shape_arg(shape, "size", true)
    local dtype, device = factory_opts(fname, opts, x.dtype, x.device, held)
    if fill then return qkv.full(s, v, dtype, device) end
    if fname == "new_ones" then return qkv.ones(s, dtype, device) end
    return qkv.zeros(s, dtype, device)
  end
end

-- qkv.randint([low,] high, shape [, opts]): integers in [low, high); the
-- shape may hold the options, and its sizes as size = (PyTorch's keyword)
local function randint(a, b, c, d)
  local low, high, shape, opts
  if type(b) == "number" then low, high, shape, opts = a, b, c, d
  else low, high, shape, opts = 0, a, b, c end
  low, high = int_arg(low, "low"), int_arg(high, "high")
  if shape == nil then fail("size is missing (a list of sizes, e.g. {2, 3})") end
  local s, held = shape_arg(shape, "size", true)
  local dtype, device = factory_opts("randint", opts, "int64", qkv.default_device(), held)
  if low >= high then fail("low %d must be less than high %d", low, high) end
  local span = high - low
  if span <= 0 or span > (1 << 53) then            -- (<= 0: it wrapped around)
    fail("high - low must be at most 2^53, got [%d, %d)", low, high)
  end
  if dtype ~= "int64" and dtype ~= "float64" then
    local top = ({int32 = 2147483647, float32 = 1 << 24, float16 = 2048, bfloat16 = 256,
                  bool = 1})[dtype]
    if low < -top - (dtype == "int32" and 1 or 0) or high - 1 > top then
      fail("[%d, %d) does not fit in %s", low, high, dtype)
    end
  end
  -- uniform float64 in [0, 1) (53 bits), times the span, truncated
  local u = qkv.rand(s, "float64", device)
  local k = (u * span):clamp(0, span - 1):long() + low
  return dtype == "int64" and k or k:to(dtype)
end

-- qkv.randperm(n [, opts]): 1..n (1-based, as every index in qkv) in a
-- random order, int64 unless opts say otherwise; the order that sorts n
-- float64 uniforms of qkv.rand, drawn on the CPU so that qkv.seed gives
-- the same permutation on every device (the sort is stable, so two equal
-- draws still give a permutation)
local PERM_TOP = {int64 = math.maxinteger, int32 = 2147483647, float64 = 1 << 53,
                  float32 = 1 << 24, float16 = 2048, bfloat16 = 256}
local function randperm(n, opts)
  n = int_arg(n, "n")
  if n < 0 then fail("n must be non-negative, got %d", n) end
  local dtype, device = factory_opts("randperm", opts, "int64", qkv.default_device())
  if not PERM_TOP[dtype] then fail("dtype must be a number dtype, got %s", dtype) end
  if n > PERM_TOP[dtype] then fail("%s cannot hold 1 to %d exactly", dtype, n) end
  if n == 0 then return qkv.zeros({0}, dtype, device) end
  local _, order = qkv.rand({n}, "float64", "cpu"):sort(1)
  if dtype ~= "int64" then order = order:to(dtype) end
  return device == "cpu" and order or order:to(device)
end

-- the n points from a to b in float64, as PyTorch places them: from a for
-- the first half, from b for the rest
local function points(a, b, n, device)
  if n == 1 then return qkv.full({1}, a, "float64", device) end
  local i = qkv.arange(n, "float64", device)
  local step = (b - a) / (n - 1)
  return qkv.where(i:lt(n // 2), i * step + a, b - (n - 1 - i) * step)
end

local function steps_arg(n)
  n = int_arg(n, "steps")
  if n < 0 then fail("steps must be non-negative, got %d", n) end
  return n
end

-- qkv.linspace(start, end, steps [, opts])
local function linspace(a, b, n, opts)
  a, b = number_arg(a, "start"), number_arg(b, "end")
  n = steps_arg(n)
  local dtype, device = factory_opts("linspace", opts, "float32", qkv.default_device())
  if n == 0 then return qkv.zeros({0}, dtype, device) end
  return points(a, b, n, device):to(dtype)
end

-- qkv.logspace(start, end, steps [, base [, opts]])
local function logspace(a, b, n, base, opts)
  a, b = number_arg(a, "start"), number_arg(b, "end")
  n = steps_arg(n)
  if type(base) == "table" and opts == nil then base, opts = nil, base end
  base = base == nil and 10 or number_arg(base, "base")
  local dtype, device = factory_opts("logspace", opts, "float32", qkv.default_device())
  if n == 0 then return qkv.zeros({0}, dtype, device) end
  return (base ^ points(a, b, n, device)):to(dtype)
end

local function manual_seed(n)
  return qkv.seed(int_arg(n, "seed"))
end

return {like = like, full_like = full_like, new_factory = new_factory, randint = randint,
        randperm = randperm, linspace = linspace, logspace = logspace, manual_seed = manual_seed}
