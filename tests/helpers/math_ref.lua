-- math_ref.lua: what tests/core/test_math_elementwise.lua and
-- test_math_reduce_matmul.lua share: random shapes and tensors (from the
-- Lua RNG, which each suite seeds), their values as flat float64 lists,
-- the broadcast reference of a binary function, and the assertions
-- (close within a relative tolerance, exact, a shape).
--
--   local M = dofile("tests/helpers/math_ref.lua")
local lu = require "luaunit"

local inf, nan = math.huge, 0 / 0
local TOL = {float32 = 1e-5, float64 = 1e-12}

local function numel(s) local n = 1 for _, v in ipairs(s) do n = n * v end return n end
local function sstr(s) return "(" .. table.concat(s, ", ") .. ")" end
local function isnan(v) return v ~= v end
local function isfin(v) return v == v and v ~= inf and v ~= -inf end
local function map(X, f) local r = {} for k, v in ipairs(X) do r[k] = f(v) end return r end
local function iota(n) local t = {} for i = 1, n do t[i] = i - 1 end return t end
local function f32(v) return (string.unpack("f", string.pack("f", v))) end
local function rshape(nd, lo, hi)
  local s = {} for i = 1, nd do s[i] = math.random(lo or 1, hi or 5) end return s
end

-- a random value of a kind: "any" in [-2, 2), "pos" in [0.1, 3.1),
-- "nz" away from 0, "int" a small integer (ties for comparisons)
local function rval(kind)
  if kind == "pos" then return 0.1 + 3 * math.random() end
  if kind == "nz" then return (math.random(2) * 2 - 3) * (0.5 + 2 * math.random()) end
  if kind == "int" then return math.random(-2, 2) end
  return 4 * math.random() - 2
end

local function flatten(t, out)
  out = out or {}
  if type(t) ~= "table" then out[#out + 1] = t else for _, v in ipairs(t) do flatten(v, out) end end
  return out
end

local function nest(flat, shape, d, pos)
  d, pos = d or 1, pos or {1}
  if d > #shape then pos[1] = pos[1] + 1 return flat[pos[1] - 1] end
  local t = {} for i = 1, shape[d] do t[i] = nest(flat, shape, d + 1, pos) end return t
end

-- a random tensor (through qkv.tensor) and its values as qkv stored them
local function mk(shape, dtype, kind)
  dtype = dtype or "float32"
  if numel(shape) == 0 then return qkv.zeros(shape, dtype), {} end
  local flat = {}
  for i = 1, numel(shape) do
    local v = rval(kind)
    if dtype == "int64" then v = math.tointeger(math.floor(v * 3)) end
    if dtype == "bool" then v = v > 0 end
    flat[i] = v
  end
  local x = qkv.tensor(nest(flat, shape), dtype)
  return x, flatten(x:tolist())
end

local function vals(x) if x.ndim == 0 then return {x:item()} end return flatten(x:tolist()) end

-- row-major strides of `s` seen from the broadcast shape `out`
local function bstrides(out, s)
  local inst, acc, st = {}, 1, {}
  for i = #s, 1, -1 do inst[i] = acc; acc = acc * s[i] end
  for i = 1, #out do local j = i - (#out - #s); st[i] = (j >= 1 and s[j] ~= 1) and inst[j] or 0 end
  return st
end

local function bshape(a, b)
  local n, out = math.max(#a, #b), {}
  for i = 1, n do
    local x, y = a[i - n + #a] or 1, b[i - n + #b] or 1
    assert(x == y or x == 1 or y == 1, "test bug: shapes do not broadcast")
    out[i] = x == 1 and y or x
  end
  return out
end

-- out[k] = f(A[..], B[..]) over the broadcast of sa and sb
local function ref_binary(sa, A, sb, B, f)
  local out = bshape(sa, sb)
  local ta, tb, idx, res = bstrides(out, sa), bstrides(out, sb), {}, {}
  for d = 1, #out do idx[d] = 0 end
  for k = 1, numel(out) do
    local ia, ib = 1, 1
    for d = 1, #out do ia = ia + idx[d] * ta[d]; ib = ib + idx[d] * tb[d] end
    res[k] = f(A[ia], B[ib])
    for d = #out, 1, -1 do
      idx[d] = idx[d] + 1
      if idx[d] < out[d] then break end
      idx[d] = 0
    end
  end
  return res, out
end

-- a random pair of shapes that broadcast to a random shape of nd dims
local function bpair(nd, lo, hi)
  local out = rshape(nd, lo, hi)
  local function part()
    local s = {}
    for i = math.random(0, nd) + 1, nd do s[#s + 1] = math.random(3) == 1 and 1 or out[i] end
    return s
  end
  return part(), part()
end

local function fail(what, i, g, r)
  lu.fail(string.format("%s: element %d is %s, expected %s", what, i, tostring(g), tostring(r)))
end

-- floats: non-finite positions agree exactly, the rest ||got - ref|| / ||ref|| < tol
local function assertClose(got, ref, tol, what)
  what = what or ""
  lu.assertEquals(#got, #ref, what .. ": numel")
  local dn, rn = 0, 0
  for i = 1, #ref do
    local g, r = got[i], ref[i]
    if isfin(r) ~= isfin(g) or not isfin(r) and g ~= r and not (isnan(g) and isnan(r)) then
      fail(what, i, g, r)
    end
    if isfin(r) then dn = dn + (g - r) ^ 2; rn = rn + r ^ 2 end
  end
  local err = rn > 0 and math.sqrt(dn / rn) or math.sqrt(dn)
  if not (err < tol) then lu.fail(string.format("%s: relative error %.3g >= %g", what, err, tol)) end
end

local function assertExact(got, ref, what)
  lu.assertEquals(#got, #ref, (what or "") .. ": numel")
  for i = 1, #ref do
    if got[i] ~= ref[i] and not (isnan(got[i]) and isnan(ref[i])) then fail(what or "", i, got[i], ref[i]) end
  end
end

local function assertShape(x, s, what)
  lu.assertEquals(tostring(x.shape), (sstr(s):gsub("^%((%d+)%)$", "(%1,)")), what)
end

return {
  inf = inf, nan = nan, TOL = TOL, numel = numel, sstr = sstr, isnan = isnan, isfin = isfin,
  map = map, iota = iota, f32 = f32, rshape = rshape, rval = rval, flatten = flatten, nest = nest,
  mk = mk, vals = vals, bstrides = bstrides, bshape = bshape, ref_binary = ref_binary,
  bpair = bpair, fail = fail, assertClose = assertClose, assertExact = assertExact,
  assertShape = assertShape,
}
