-- composite/math.lua: norm, outer and allclose, made of qkv's
-- reductions and elementwise ops, so differentiable through them
-- (qkv.composite installs them; see there).

local qkv = require "qkv"
local S = require "qkv.composite.args"
local autograd_on = S.autograd_on

local fail, shape_of, tensor_arg, bool_arg = S.fail, S.shape_of, S.tensor_arg, S.bool_arg
local dims_arg, FLOATS, sizes, number_arg = S.dims_arg, S.FLOATS, S.sizes, S.number_arg

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
-- rather than 0 * inf; there 0 ^ (1 / p) is 0, or inf for p < 0
local function root(t, p)
  local z = t:eq(0)
  local safe = qkv.where(z, 1, t)
  return qkv.where(z, p < 0 and math.huge or 0, p == 2 and safe:sqrt() or safe ^ (1 / p))
end

-- |x| ^ p for p < 1, with a zero gradient where x is 0 (PyTorch's), where
-- p |x| ^ (p - 1) is inf there and the gradient NaN
local function small_power(a, p)
  local z = a:eq(0)
  return qkv.where(z, p > 0 and 0 or math.huge, qkv.where(z, 1, a) ^ p)
end

-- the largest (op "max") or smallest ("min") |t| over dims: its gradient
-- is split evenly among the elements that reach it (among the NaNs where
-- it is NaN), times their sign, as PyTorch's norm's, where max along a
-- dim would send it all to the first
local function extreme(t, op, dims, keep)
  local A = autograd_on(t)
  if not A then return reduce(t:abs(), op, dims, keep) end
  local a = A.no_grad(t.abs, t)
  local r = A.no_grad(reduce, a, op, dims, true)
  local out = r                               -- r without the kept dims
  if not keep then
    local shape = {}
    for i = 1, t:dim() do
      local gone = dims == nil
      for _, d in ipairs(dims or {}) do gone = gone or d == i end
      if not gone then shape[#shape + 1] = t:size(i) end
    end
    out = r:reshape(shape)
  end
  return A.record("NormBackward", out, {t}, function(g)
    local hit = a:eq(r):logical_or(a:ne(a))
    local n = reduce(hit:to(t.dtype), "sum", dims, true)
    local sign = qkv.where(t:gt(0), 1, qkv.where(t:lt(0), -1, 0)):to(t.dtype)
    return qkv.where(hit, g:reshape(r.shape) / n, 0) * sign
  end, {t})
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
  if p < 0 or p == math.huge then   -- no identity: an empty dim is an error, as PyTorch's
    local empty = x:numel() == 0 and dims == nil
    for _, d in ipairs(dims or {}) do empty = empty or (x:dim() > 0 and x:size(d) == 0) end
    if empty then
      fail("cannot compute the %s norm over an empty dim of x %s (it has no identity)",
           p == math.huge and "inf" or p == -math.huge and "-inf" or string.format("%g", p), shape_of(x))
    end
  end
  local t = (x.dtype == "float16" or x.dtype == "bfloat16") and x:float() or x
  local r
  if p == math.huge then r = extreme(t, "max", dims, keep)
  elseif p == -math.huge then r = extreme(t, "min", dims, keep)
  elseif p == 0 then r = reduce(t:ne(0):to(t.dtype), "sum", dims, keep)
  elseif p == 1 then r = reduce(t:abs(), "sum", dims, keep)
  elseif p == 2 then r = root(reduce(t * t, "sum", dims, keep), 2)
  elseif p < 1 then r = root(reduce(small_power(t:abs(), p), "sum", dims, keep), p)
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

return {norm = norm, outer = outer, allclose = allclose}
