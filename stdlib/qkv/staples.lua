-- staples.lua: the PyTorch staples of issue 30, written as compositions
-- of qkv's own ops: shapes (flatten, unflatten, chunk, split), factories
-- (zeros_like ... empty_like, x:new_zeros ..., randint, linspace,
-- logspace, manual_seed), norm, outer, allclose, half and bfloat16 here;
-- scatter, argsort, flip, roll and repeat_interleave in qkv.staples_select.
-- They take PyTorch's arguments with dims 1-based (negative from the end)
-- and indices 1-based, and, being compositions of differentiable ops, are
-- differentiable (scatter records its own gradient).
--
-- Loaded on first use: bindings/lqkv.c lists the functions of qkv that
-- load it, and a method that the tensor's C methods lack loads it once
-- (bindings/ltensor.c) before it is an error. Loading puts the functions
-- into qkv and the methods into the tensors' method table.

local qkv = require "qkv"
local S = require "qkv.staples_args"
local SEL = require "qkv.staples_select"

local is_tensor = qkv.is_tensor
local M = {}
local MAXRET, fail, api, shape_of, keywords = S.MAXRET, S.fail, S.api, S.shape_of, S.keywords
local tensor_arg, int_arg, bool_arg, dim_arg = S.tensor_arg, S.int_arg, S.bool_arg, S.dim_arg
local int_list, dims_arg, FLOATS, factory_opts = S.int_list, S.dims_arg, S.FLOATS, S.factory_opts
local shape_arg, sizes, number_arg = S.shape_arg, S.sizes, S.number_arg

---------------------------------------------------------------- shapes

-- x:flatten([start_dim [, end_dim]]): dims start..end as one
local function flatten(x, start_dim, end_dim)
  tensor_arg(x, "x")
  local n = math.max(x:dim(), 1)            -- a 0-d x flattens as if 1-D
  local a = start_dim == nil and 1 or dim_arg(start_dim, "start_dim", x, n)
  local b = end_dim == nil and n or dim_arg(end_dim, "end_dim", x, n)
  if a > b then
    fail("start_dim %s comes after end_dim %s for x of shape %s", tostring(start_dim),
         tostring(end_dim), shape_of(x))
  end
  if x:dim() == 0 then return x:reshape(1) end
  if a == b then return x end
  local s, out, m = sizes(x), {}, 1
  for i = 1, a - 1 do out[#out + 1] = s[i] end
  for i = a, b do m = m * s[i] end
  out[#out + 1] = m
  for i = b + 1, #s do out[#out + 1] = s[i] end
  return x:reshape(table.unpack(out))
end

-- x:unflatten(dim, sizes): dim as several, one of them -1 to infer
local function unflatten(x, dim, sz)
  tensor_arg(x, "x")
  local d = dim_arg(dim, "dim", x)
  if type(sz) ~= "table" or is_tensor(sz) then
    fail("sizes must be a list of integers, got %s", type(sz))
  end
  local new = int_list(sz, "sizes", 8)
  if #new == 0 then fail("sizes is empty") end
  if x:dim() - 1 + #new > 8 then
    fail("x of shape %s with dim %d as %d dims has more than 8", shape_of(x), d, #new)
  end
  local n, known, infer = x:size(d), 1, nil
  for i, v in ipairs(new) do
    if v == -1 then
      if infer then fail("sizes has more than one -1") end
      infer = i
    elseif v < 0 then fail("sizes[%d] is %d", i, v)
    else known = known * v end
  end
  if infer then
    if known == 0 or n % known ~= 0 then
      fail("sizes {%s} cannot make dim %d of size %d", table.concat(new, ", "), d, n)
    end
    new[infer] = n // known
  elseif known ~= n then
    fail("sizes {%s} multiply to %d, but dim %d of x %s is %d", table.concat(new, ", "),
         known, d, shape_of(x), n)
  end
  local s, out = sizes(x), {}
  for i = 1, d - 1 do out[#out + 1] = s[i] end
  for _, v in ipairs(new) do out[#out + 1] = v end
  for i = d + 1, #s do out[#out + 1] = s[i] end
  return x:reshape(table.unpack(out))
end

-- the views of x along dim d of the given lengths, as values
local function pieces(x, d, lengths)
  if #lengths > MAXRET then
    fail("%d pieces are more than Lua can return (%d)", #lengths, MAXRET)
  end
  local out, at = {}, 1
  for i, len in ipairs(lengths) do
    out[i] = x:narrow(d, at, len)
    at = at + len
  end
  return table.unpack(out, 1, #lengths)
end

-- x:split(size_or_sizes [, dim]): pieces of size along dim (the last one
-- smaller), or of the sizes listed
local function split(x, size, dim)
  tensor_arg(x, "x")
  local d = dim_arg(dim == nil and 1 or dim, "dim", x)
  local n = x:size(d)
  if type(size) == "table" and not is_tensor(size) then
    local l, sum = int_list(size, "split_sizes", MAXRET), 0
    for i, v in ipairs(l) do
      if v < 0 then fail("split_sizes[%d] is %d", i, v) end
      sum = sum + v
    end
    if sum ~= n then
      fail("split_sizes {%s} add up to %d, but dim %d of x %s is %d",
           #l <= 16 and table.concat(l, ", ") or #l .. " sizes", sum, d, shape_of(x), n)
    end
    return pieces(x, d, l)
  end
  if type(size) ~= "number" then
    fail("split_size must be an integer or a list of integers, got %s", type(size))
  end
  size = int_arg(size, "split_size")
  if size < 0 or (size == 0 and n ~= 0) then
    fail("split_size must be positive, got %d (dim %d of x %s is %d)", size, d, shape_of(x), n)
  end
  if n == 0 then return x:narrow(d, 1, 0) end
  local count = (n + size - 1) // size
  if count > MAXRET then fail("%d pieces are more than Lua can return (%d)", count, MAXRET) end
  local l = {}
  for i = 1, count do l[i] = math.min(size, n - (i - 1) * size) end
  return pieces(x, d, l)
end

-- x:chunk(chunks [, dim]): at most chunks pieces of ceil(n / chunks)
local function chunk(x, chunks, dim)
  tensor_arg(x, "x")
  local d = dim_arg(dim == nil and 1 or dim, "dim", x)
  chunks = int_arg(chunks, "chunks")
  if chunks < 1 then fail("chunks must be positive, got %d", chunks) end
  local n = x:size(d)
  if n == 0 then                  -- PyTorch: chunks empty pieces
    if chunks > MAXRET then fail("%d pieces are more than Lua can return (%d)", chunks, MAXRET) end
    local l = {}
    for i = 1, chunks do l[i] = 0 end
    return pieces(x, d, l)
  end
  return split(x, (n + chunks - 1) // chunks, d)
end

---------------------------------------------------------------- factories

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

---------------------------------------------------------------- norm

-- t reduced by op ("sum", "max", "min") over dims (nil: all), the dims
-- kept as size 1 when keep
local function reduce(t, op, dims, keep)
  if dims == nil then
    local r = t[op](t)
    if keep and t:dim() > 0 then
      local ones = {}
      for i = 1, t:dim() do ones[i] = 1 end
      r = r:reshape(table.unpack(ones))
    end
    return r
  end
  local ds = {}
  for i, d in ipairs(dims) do ds[i] = d end
  table.sort(ds, function(p, q) return p > q end)
  for _, d in ipairs(ds) do t = (t[op](t, d, true)) end
  if not keep then
    for _, d in ipairs(ds) do t = t:squeeze(d) end
  end
  return t
end

-- t ^ (1 / p), with a zero gradient where t is 0 (PyTorch's subgradient)
-- rather than 0 * inf
local function root(t, p)
  local z = t:eq(0)
  local safe = qkv.where(z, 1, t)
  return qkv.where(z, 0, p == 2 and safe:sqrt() or safe ^ (1 / p))
end

-- x:norm([p [, dim [, keepdim [, dtype]]]]): the vector p-norm over dim
-- (a dim or a list of them; none, or an empty list, is all, as PyTorch's
-- dim=None and dim=[]), of x converted to dtype first when given
local function norm(x, p, dim, keepdim, dtype)
  tensor_arg(x, "x")
  if dtype ~= nil then
    if not FLOATS[dtype] then
      fail("dtype must be a floating-point dtype, got %s", tostring(dtype))
    end
    x = x:to(dtype)
  end
  if not FLOATS[x.dtype] then
    fail("x must be a float tensor, got %s (convert it with x:float())", x.dtype)
  end
  if p == nil or p == "fro" then p = 2
  elseif p == "nuc" then fail("p = 'nuc' (the nuclear norm) is not supported")
  elseif type(p) ~= "number" or p ~= p then
    fail("p must be a number, math.huge, -math.huge or 'fro', got %s",
         type(p) == "number" and "nan" or type(p) == "string" and "'" .. p .. "'" or type(p))
  end
  local dims = dim ~= nil and dims_arg(dim, "dim", x) or nil
  if dims and #dims == 0 then dims = nil end
  local keep = bool_arg(keepdim, "keepdim", false)
  local t = (x.dtype == "float16" or x.dtype == "bfloat16") and x:float() or x
  local r
  if p == math.huge then r = reduce(t:abs(), "max", dims, keep)
  elseif p == -math.huge then r = reduce(t:abs(), "min", dims, keep)
  elseif p == 0 then r = reduce(t:ne(0):to(t.dtype), "sum", dims, keep)
  elseif p == 1 then r = reduce(t:abs(), "sum", dims, keep)
  elseif p == 2 then r = root(reduce(t * t, "sum", dims, keep), 2)
  else r = root(reduce(t:abs() ^ p, "sum", dims, keep), p) end
  return r:to(x.dtype)
end

---------------------------------------------------------------- products, comparisons

-- qkv.outer(a, b): the (n, m) table of a[i] * b[j]
local function outer(a, b)
  tensor_arg(a, "a")
  tensor_arg(b, "b")
  if a:dim() ~= 1 or b:dim() ~= 1 then
    fail("a and b must be 1-D, got %s and %s", shape_of(a), shape_of(b))
  end
  return a:reshape(-1, 1) * b:reshape(1, -1)
end

-- the broadcast shape of a and b, or an error
local function broadcast(a, b)
  local sa, sb, out = sizes(a), sizes(b), {}
  local n = math.max(#sa, #sb)
  for i = 1, n do
    local p = sa[#sa - n + i] or 1
    local q = sb[#sb - n + i] or 1
    if p ~= q and p ~= 1 and q ~= 1 then
      fail("a %s and b %s do not broadcast", shape_of(a), shape_of(b))
    end
    out[i] = p == 1 and q or p
  end
  return out
end

-- qkv.allclose(a, b [, rtol [, atol [, equal_nan]]]): |a - b| <= atol +
-- rtol |b| everywhere, |a - b| finite (an infinity is close to itself only)
local function allclose(a, b, rtol, atol, equal_nan)
  tensor_arg(a, "a")
  tensor_arg(b, "b")
  if a.dtype ~= b.dtype then
    fail("a is %s but b is %s; convert one, e.g. b:to(\"%s\")", a.dtype, b.dtype, a.dtype)
  end
  if a.device ~= b.device then
    fail("a is on %s but b is on %s", a.device, b.device)
  end
  rtol = rtol == nil and 1e-5 or number_arg(rtol, "rtol")
  atol = atol == nil and 1e-8 or number_arg(atol, "atol")
  if not (rtol >= 0) then fail("rtol must be a non-negative number, got %s", tostring(rtol)) end
  if not (atol >= 0) then fail("atol must be a non-negative number, got %s", tostring(atol)) end
  local nan = bool_arg(equal_nan, "equal_nan", false)
  broadcast(a, b)
  local A, B = a:double(), b:double()
  local err = (A - B):abs()           -- an infinite error is close only when A == B
  local close = err:le(B:abs() * rtol + atol):logical_and(err:lt(math.huge)):logical_or(A:eq(B))
  if nan then close = close:logical_or(A:ne(A):logical_and(B:ne(B))) end
  return close:all():item()
end

---------------------------------------------------------------- install

-- PyTorch's keywords of the functions and methods that take them, the
-- positions' names from the second argument on, and of those, the ones
-- that take a list (staples_args.keywords)
local SPLIT = {"split_size_or_sections", "split_size"}
local KEYWORDS = {
  flatten = {"start_dim", "end_dim"}, unflatten = {"dim", "sizes", lists = {sizes = true}},
  chunk = {"chunks", "dim"}, split = {SPLIT, "dim", lists = {[SPLIT] = true}},
  norm = {"p", "dim", "keepdim", "dtype", lists = {dim = true}},
  scatter = {"dim", "index", {"src", "value"}, "reduce"},
  scatter_ = {"dim", "index", {"src", "value"}, "reduce"},
  argsort = {"dim", "descending", "stable"},
  flip = {"dims", lists = {dims = true}, varargs = true},     -- x:flip(1, 2) too
  roll = {"shifts", "dims", lists = {shifts = true, dims = true}},
  repeat_interleave = {"repeats", "dim", lists = {repeats = true}}, outer = {"vec2"},
  allclose = {"other", "rtol", "atol", "equal_nan"},
}

-- f as the public function name, taking its keywords
-- the most arguments of those that take no keywords (x:new_* count theirs)
local MAXARGS = {
  zeros_like = 2, ones_like = 2, empty_like = 2, rand_like = 2, randn_like = 2,
  full_like = 3, randint = 4, linspace = 4, logspace = 5, manual_seed = 1,
  half = 1, bfloat16 = 1,
}

-- f as the public function name, taking its keywords; an argument past
-- those it takes is an error, as the bindings' qkvL_args makes it
local function public(name, f)
  local names = KEYWORDS[name]
  local max = names and not names.varargs and 1 + #names or MAXARGS[name]
  return api(name, function(...)
    local args = table.pack(...)
    if names then args = table.pack(keywords(name, names, 2, ...)) end
    local n = args.n
    while n > 0 and args[n] == nil do n = n - 1 end
    if max and n > max then
      fail("takes %d argument%s, got %d (argument #%d is a %s)", max, max == 1 and "" or "s",
           n, max + 1, type(args[max + 1]))
    end
    return f(table.unpack(args, 1, n))
  end)
end

-- functions of qkv (and methods of the same name)
local FUNCTIONS = {
  flatten = flatten, unflatten = unflatten, chunk = chunk, split = split,
  norm = norm, scatter = SEL.scatter, argsort = SEL.argsort, flip = SEL.flip,
  roll = SEL.roll, repeat_interleave = SEL.repeat_interleave, outer = outer,
  allclose = allclose,
}
-- functions of qkv only
local FACTORIES = {
  zeros_like = like("zeros_like", qkv.zeros), ones_like = like("ones_like", qkv.ones),
  empty_like = like("empty_like", qkv.zeros),     -- no uninitialised memory: zeros
  full_like = full_like, rand_like = like("rand_like", qkv.rand, true),
  randn_like = like("randn_like", qkv.randn, true), randint = randint,
  linspace = linspace, logspace = logspace, manual_seed = manual_seed,
}
-- methods only
local METHODS = {
  scatter_ = SEL.scatter_,
  half = function(x) tensor_arg(x, "x"); return x:to("float16") end,
  bfloat16 = function(x) tensor_arg(x, "x"); return x:to("bfloat16") end,
  new_zeros = new_factory("new_zeros"), new_ones = new_factory("new_ones"),
  new_empty = new_factory("new_empty"), new_full = new_factory("new_full", true),
}

local methods = qkv._methods     -- the tensor methods (bindings/lqkv.c)
for name, f in pairs(FUNCTIONS) do
  M[name] = public(name, f)
  rawset(qkv, name, M[name])
  rawset(methods, name, M[name])
end
for name, f in pairs(FACTORIES) do
  M[name] = public(name, f)
  rawset(qkv, name, M[name])
end
for name, f in pairs(METHODS) do
  M[name] = public(name, f)
  rawset(methods, name, M[name])
end

return M
