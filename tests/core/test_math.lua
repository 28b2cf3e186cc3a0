-- test_math.lua: elementwise ops, comparisons, reductions, matmul, cat,
-- stack, masked_fill, type promotion and broadcasting, each checked against
-- a float64 plain-loop reference written here (on tolist() data), on
-- random shapes and data from a fixed-seed Lua RNG.
local lu = require "luaunit"

math.randomseed(20240611)
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

local BIN = {
  -- {reference, has an operator (the same function applied to tensors), kinds}
  add = {function(a, b) return a + b end, true}, sub = {function(a, b) return a - b end, true},
  mul = {function(a, b) return a * b end, true},
  div = {function(a, b) return a / b end, true, "any", "nz"},
  pow = {function(a, b) return a ^ b end, true, "pos", "any"},
  maximum = {function(a, b) return math.max(a, b) end}, minimum = {function(a, b) return math.min(a, b) end},
}
local OPNAMES = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}

TestElementwise = {}
function TestElementwise:testBinaryBroadcast()
  for _, dt in ipairs{"float32", "float64"} do
    for _, name in ipairs(OPNAMES) do
      local op = BIN[name]
      for _ = 1, 6 do
        local sa, sb = bpair(math.random(0, 4))
        local a, A = mk(sa, dt, op[3]); local b, B = mk(sb, dt, op[4])
        local ref, out = ref_binary(sa, A, sb, B, op[1])
        local what = string.format("%s %s %s %s", name, dt, sstr(sa), sstr(sb))
        for _, r in ipairs{a[name](a, b), qkv[name](a, b), op[2] and op[1](a, b)} do
          lu.assertEquals(r.dtype, dt, what)
          assertShape(r, out, what)
          assertClose(vals(r), ref, TOL[dt], what)
        end
      end
    end
  end
end

function TestElementwise:testScalarOperands()
  for _, dt in ipairs{"float32", "float64"} do
    local x, X = mk({3, 4}, dt, "pos")
    local cases = {
      {x + 2.5, function(v) return v + 2.5 end}, {2.5 - x, function(v) return 2.5 - v end},
      {x * -3, function(v) return v * -3 end}, {1 / x, function(v) return 1 / v end},
      {2 ^ x, function(v) return 2 ^ v end}, {x ^ 2, function(v) return v * v end},
      {x:sub(1), function(v) return v - 1 end}, {qkv.maximum(x, 1.5), function(v) return math.max(v, 1.5) end},
      {qkv.minimum(1.5, x), function(v) return math.min(v, 1.5) end}, {x / 4, function(v) return v / 4 end},
    }
    for i, c in ipairs(cases) do
      lu.assertEquals(c[1].dtype, dt)
      local ref = map(X, function(v) return c[2](v) end)
      assertClose(vals(c[1]), ref, TOL[dt], dt .. " scalar case " .. i)
    end
  end
end

local UN = {
  exp = {math.exp, "any"}, log = {math.log, "pos"}, sqrt = {math.sqrt, "pos"},
  abs = {math.abs, "any"}, neg = {function(v) return -v end, "any"},
  tanh = {function(v) local e = math.exp(2 * v) return (e - 1) / (e + 1) end, "any"},
}

function TestElementwise:testUnary()
  for _, dt in ipairs{"float32", "float64"} do
    for _, name in ipairs{"exp", "log", "sqrt", "abs", "neg", "tanh"} do
      local s = rshape(math.random(0, 3))
      local x, X = mk(s, dt, UN[name][2])
      local ref = map(X, function(v) return UN[name][1](v) end)
      for _, r in ipairs{x[name](x), qkv[name](x)} do
        lu.assertEquals(r.dtype, dt)
        assertShape(r, s)
        assertClose(vals(r), ref, TOL[dt], name .. " " .. dt .. " " .. sstr(s))
      end
    end
    local x, X = mk({5}, dt)
    assertClose(vals(-x), map(X, UN.neg[1]), TOL[dt], "unary minus")
  end
end

function TestElementwise:testIntegerInputs()
  local x, X = mk({4, 3}, "int64", "any")
  local e, a, n = x:exp(), x:abs(), x:neg()
  lu.assertEquals({e.dtype, a.dtype, n.dtype}, {"float32", "int64", "int64"})
  assertClose(vals(e), map(X, math.exp), 1e-5, "exp int64")
  assertExact(vals(a), map(X, math.abs), "abs int64")
  assertExact(vals(n), map(X, UN.neg[1]), "neg int64")
  local y, Y = mk({4, 3}, "int64", "any")
  local ref = ref_binary({4, 3}, X, {4, 3}, Y, function(p, q) return p * q - p end)
  assertExact(vals(x * y - x), ref, "int64 arithmetic")
  lu.assertEquals(math.type(vals(x * y)[1]), "integer")
end

function TestElementwise:testLarge()
  local a, A = mk({300, 200}, "float32")
  local b, B = mk({200}, "float32", "nz")
  for _, name in ipairs{"add", "mul", "div", "maximum"} do
    assertClose(vals(a[name](a, b)), ref_binary({300, 200}, A, {200}, B, BIN[name][1]),
      1e-5, "large " .. name)
  end
  assertClose(vals(a:exp()), map(A, math.exp), 1e-5, "large exp")
  lu.assertEquals(vals(a:t() + 1)[2], f32(A[201] + 1))   -- non-contiguous, large
  local d = mk({200, 300}, "float64")
  assertClose(vals(d:t() * a), ref_binary({300, 200}, flatten(d:t():tolist()), {300, 200}, A,
    function(p, q) return p * q end), 1e-12, "large mixed float64 * float32 transposed")
end

-- log(e^a + e^b) in float64: the larger plus log1p of e^-|a - b| (its
-- series where log(1 + t) would lose t)
local function logaddexp64(a, b)
  if a ~= a or b ~= b then return nan end
  if a == b then return a + math.log(2) end
  local m, t = math.max(a, b), math.exp(-math.abs(a - b))
  return m + (t < 1e-4 and t - t * t / 2 + t * t * t / 3 or math.log(1 + t))
end

function TestElementwise:testLogaddexp()
  for _, dt in ipairs{"float32", "float64"} do
    for _ = 1, 6 do
      local sa, sb = bpair(math.random(0, 3))
      local a = mk(sa, dt) * 30
      local b = mk(sb, dt) * 30
      local ref, out = ref_binary(sa, vals(a), sb, vals(b), logaddexp64)
      local what = ("logaddexp %s %s %s"):format(dt, sstr(sa), sstr(sb))
      for _, r in ipairs{a:logaddexp(b), qkv.logaddexp(a, b)} do
        lu.assertEquals(r.dtype, dt, what)
        assertShape(r, out, what)
        assertClose(vals(r), ref, TOL[dt], what)
      end
    end
    -- where e^a + e^b overflows, underflows, or loses the smaller term;
    -- infinities of one sign, of two, and NaN
    local a = qkv.tensor({1000, -1000, 0, 88, 1, inf, -inf, inf, nan, 3}, dt)
    local b = qkv.tensor({0, -1000, -40, 89, 1, inf, -inf, -inf, 1, nan}, dt)
    local want = {}
    for i, v in ipairs(vals(a)) do want[i] = logaddexp64(v, vals(b)[i]) end
    assertClose(vals(qkv.logaddexp(a, b)), want, TOL[dt], "logaddexp special " .. dt)
    lu.assertTrue(vals(qkv.logaddexp(a, b))[3] > 0, "e^-40 kept " .. dt)
  end
  -- a number on either side; integers and bools give float32
  local x = qkv.tensor{-2, 0, 5}
  assertClose(vals(qkv.logaddexp(x, 2)), map({-2, 0, 5}, function(v) return logaddexp64(v, 2) end), 1e-6, "x, 2")
  assertClose(vals(qkv.logaddexp(2, x)), map({-2, 0, 5}, function(v) return logaddexp64(2, v) end), 1e-6, "2, x")
  local i = qkv.tensor({1, 2}, "int64")
  lu.assertEquals(qkv.logaddexp(i, i).dtype, "float32")
  lu.assertEquals(qkv.logaddexp(i:gt(1), i:gt(1)).dtype, "float32")
  assertClose(vals(qkv.logaddexp(i, i)), {1 + math.log(2), 2 + math.log(2)}, 1e-6, "int64")
end

TestComparisons = {}
local CMP = {
  eq = function(a, b) return a == b end, ne = function(a, b) return a ~= b end,
  lt = function(a, b) return a < b end, le = function(a, b) return a <= b end,
  gt = function(a, b) return a > b end, ge = function(a, b) return a >= b end,
}

function TestComparisons:testAll()
  for _, dt in ipairs{"float32", "float64", "int64"} do
    for _, name in ipairs{"eq", "ne", "lt", "le", "gt", "ge"} do
      for _ = 1, 3 do
        local sa, sb = bpair(math.random(0, 4))
        local a, A = mk(sa, dt, "int"); local b, B = mk(sb, dt, "int")
        local ref, out = ref_binary(sa, A, sb, B, CMP[name])
        for _, r in ipairs{a[name](a, b), qkv[name](a, b)} do
          lu.assertEquals(r.dtype, "bool")
          assertShape(r, out)
          assertExact(vals(r), ref, name .. " " .. dt)
        end
      end
    end
  end
  local x, X = mk({50, 700}, "float32")               -- large, with a number
  local ref = map(X, function(v) return v > 0.25 end)
  assertExact(vals(x:gt(0.25)), ref, "large gt")
  lu.assertFalse(rawequal(x, x:clone()) or x == x:clone())    -- == is identity
  assertExact(vals(qkv.tensor{nan, 1}:eq(qkv.tensor{nan, 1})), {false, true}, "nan eq")
  assertExact(vals(qkv.tensor{nan, 1}:ne(nan)), {true, true}, "nan ne")
end

-- reduce dim d of (shape, data): f(list) -> value(s)
local function ref_reduce(shape, data, d, f)
  local len, r1, r2 = shape[d], {}, {}
  local outer, inner = numel({table.unpack(shape, 1, d - 1)}), numel({table.unpack(shape, d + 1)})
  for o = 0, outer - 1 do for n = 0, inner - 1 do
    local l = {}
    for i = 0, len - 1 do l[i + 1] = data[o * len * inner + i * inner + n + 1] end
    local v, w = f(l)
    r1[o * inner + n + 1] = v; r2[o * inner + n + 1] = w
  end end
  return r1, r2
end

local function lsum(l) local s = 0 for _, v in ipairs(l) do s = s + v end return s end
local function lmean(l) return lsum(l) / #l end
local function lvar(l) local m = lmean(l) return lsum(map(l, function(v) return (v - m) ^ 2 end)) / (#l - 1) end
local function lpick(better)
  return function(l)
    local bi = 1
    for i = 2, #l do
      if isnan(l[bi]) then break end
      if isnan(l[i]) or better(l[i], l[bi]) then bi = i end
    end
    return l[bi], bi
  end
end
local RED = {
  sum = lsum, mean = lmean, var = lvar, std = function(l) return math.sqrt(lvar(l)) end,
  max = lpick(function(a, b) return a > b end), min = lpick(function(a, b) return a < b end),
}
RED.argmax = function(l) local _, i = RED.max(l) return i end
RED.argmin = function(l) local _, i = RED.min(l) return i end
local REDNAMES = {"sum", "mean", "var", "std", "max", "min", "argmax", "argmin"}

TestReductions = {}
local function check_reductions(shape, dt, what)
  local x, X = mk(shape, dt)
  for _, name in ipairs(REDNAMES) do
    local isarg = name:sub(1, 3) == "arg"
    local rdt = isarg and "int64" or dt
    local all = x[name](x)
    lu.assertEquals(all.ndim, 0, name)
    lu.assertEquals(all.dtype, rdt, name)
    local r = RED[name](X)
    if isarg then lu.assertEquals(all:item(), r, what .. " " .. name .. " all")
    else assertClose({all:item()}, {r}, TOL[dt], what .. " " .. name .. " all") end
    for d = 1, #shape do
      local ref, ridx = ref_reduce(shape, X, d, RED[name])
      for _, keep in ipairs{false, true} do
        local w = string.format("%s %s dim %d keep %s", what, name, d, keep)
        local v, idx = x[name](x, d, keep)
        local s = {}
        for i = 1, #shape do if i ~= d or keep then s[#s + 1] = i == d and 1 or shape[i] end end
        assertShape(v, s, w)
        if isarg then assertExact(vals(v), ref, w)
        else assertClose(vals(v), ref, TOL[dt], w) end
        if name == "max" or name == "min" then
          lu.assertEquals(idx.dtype, "int64", w)
          assertShape(idx, s, w)
          assertExact(vals(idx), ridx, w .. " indices")
        end
      end
      local nd = d - #shape - 1                        -- negative dim
      assertClose(vals(qkv[name](x, nd)), ref, TOL[dt], what .. " " .. name .. " dim " .. nd)
    end
  end
end

-- cumsum against running sums in float64 written here, along every dim
local function cumsum_ref(x, d)
  local shape, data = x.shape, x:double():reshape(-1):tolist()
  local inner = 1
  for i = d + 1, #shape do inner = inner * shape[i] end
  local n, out = shape[d], {}
  for k = 1, #data do
    local i = (k - 1) // inner % n
    out[k] = data[k] + (i > 0 and out[k - inner] or 0)
  end
  return qkv.tensor(out, "float64"):reshape(table.unpack(shape))
end

function TestReductions:testCumsum()
  for _, dt in ipairs{"float32", "float64"} do
    for _ = 1, 6 do
      local s = rshape(math.random(1, 3))
      local x = qkv.randn(s):to(dt)
      for d = 1, #s do
        local got, want = x:cumsum(d), cumsum_ref(x, d)
        lu.assertEquals(got.dtype, dt)
        lu.assertEquals(got.shape, s)
        local err = (got:double() - want):abs():max():item()
        lu.assertTrue(err <= TOL[dt] * (1 + want:abs():max():item()), dt .. " cumsum " .. d)
        qkv.test.assertTensorEqual(qkv.cumsum(x, d - #s - 1), got)   -- negative dims
      end
    end
  end
  -- float32 sums in float64: 1e8 + 1 - 1e8 is 1, not float32's 0
  lu.assertEquals(qkv.tensor({1e8, 1, -1e8}, "float32"):cumsum(1):tolist(), {1e8, 1e8, 1})  -- 1e8 + 1 rounds to 1e8 in float32, the running sum does not
  -- integers and bool give int64, exactly
  local i = qkv.tensor({{1, 2}, {3, 4}}, "int32"):cumsum(1)
  lu.assertEquals(i.dtype, "int64")
  lu.assertEquals(i:tolist(), {{1, 2}, {4, 6}})
  lu.assertEquals(qkv.tensor{true, false, true}:cumsum(1):tolist(), {1, 1, 2})
  lu.assertEquals(qkv.tensor({2 ^ 62, 2 ^ 62}, "int64"):cumsum(1):tolist(), {2 ^ 62, math.mininteger})
  -- a 0-d tensor and empty dims
  lu.assertEquals(qkv.tensor(5):cumsum(1):item(), 5)
  lu.assertEquals(qkv.zeros(0, 3):cumsum(1).shape, {0, 3})
  -- float16 computes in float32 and stays float16
  lu.assertEquals(qkv.tensor({1, 2}, "float16"):cumsum(1):tolist(), {1, 3})
  lu.assertEquals(qkv.tensor({1, 2}, "float16"):cumsum(1).dtype, "float16")
  -- errors name the function, the argument and the shape
  local ok, err = pcall(qkv.cumsum, qkv.ones(2, 3), 3)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "cumsum")
  lu.assertStrContains(err, "dim")
  ok, err = pcall(qkv.cumsum, qkv.ones(2))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "cumsum")
  ok, err = pcall(qkv.cumsum, "x", 1)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "cumsum")
end

function TestReductions:testRandomShapes()
  for _, dt in ipairs{"float32", "float64"} do
    for _ = 1, 4 do
      local s = rshape(math.random(1, 4), 2, 5)
      check_reductions(s, dt, dt .. " " .. sstr(s))
    end
  end
end

function TestReductions:testLarge()
  check_reductions({300, 120}, "float32", "large (300, 120)")
  check_reductions({40, 30, 35}, "float64", "large (40, 30, 35)")
  local x = qkv.ones(200000) * 0.1          -- float32 0.1 each
  local ref = 200000 * (string.unpack("f", string.pack("f", 0.1)))
  assertClose({x:sum():item()}, {ref}, 1e-5, "sum of 200000 x 0.1")
end

function TestReductions:testEightDims()
  check_reductions({2, 1, 3, 2, 1, 2, 3, 2}, "float64", "8-D")
end

function TestReductions:testIntegerAndBool()
  local x, X = mk({4, 5}, "int64")
  lu.assertEquals(x:sum().dtype, "int64")
  lu.assertEquals(x:sum():item(), lsum(X))
  lu.assertEquals(math.type(x:sum():item()), "integer")
  assertExact(vals(x:max(2)), (ref_reduce({4, 5}, X, 2, RED.max)), "int64 max")
  lu.assertEquals(x:max().dtype, "int64")
  lu.assertEquals(x:mean().dtype, "float32")
  assertClose({x:mean():item()}, {lmean(X)}, 1e-5, "int64 mean")
  local b = qkv.tensor{{true, false, true}, {true, true, true}}
  lu.assertEquals(b:sum().dtype, "int64")
  lu.assertEquals(b:sum():item(), 5)
  assertExact(vals(b:sum(1)), {2, 1, 2}, "bool sum dim")
end

function TestReductions:testVarOfOne()
  lu.assertTrue(isnan(qkv.tensor{3}:var():item()))
  lu.assertTrue(isnan(qkv.tensor({3}, "float64"):std():item()))
  local v = qkv.tensor{{1, 2, 3}}:var(1)
  assertShape(v, {3})
  for _, e in ipairs(vals(v)) do lu.assertTrue(isnan(e)) end
  assertClose(vals(qkv.tensor{{1, 2, 4}}:var(2)), {7 / 3}, 1e-6, "var n=3")
end

function TestReductions:testNanInf()
  assertExact({qkv.tensor{1, nan, 3}:max():item(), qkv.tensor{1, nan, 3}:min():item(),
    qkv.tensor({nan, 1}, "float64"):max():item()}, {nan, nan, nan}, "max/min with NaN")
  assertExact(vals(qkv.tensor{{1, 5, nan}, {2, 7, 3}, {nan, -1, 0}}:max(2)), {nan, 7, nan}, "max(2)")
  assertExact(vals(qkv.tensor{{1, nan}, {2, 0}}:min(1)), {1, nan}, "min(1)")
  local big = mk({70000}, "float32")
  big[50001] = nan
  lu.assertTrue(isnan(big:max():item()), "large max with NaN")
  lu.assertTrue(isnan(big:min():item()), "large min with NaN")
  lu.assertTrue(isnan(big:sum():item()))
  lu.assertEquals(qkv.tensor{1, inf, 3}:max():item(), inf)
  lu.assertEquals(qkv.tensor{1, -inf, 3}:min():item(), -inf)
  lu.assertEquals(qkv.tensor{1, inf}:sum():item(), inf)
  lu.assertEquals(qkv.tensor{1, inf, 2}:argmax():item(), 2)
end

function TestReductions:testArgmaxFlat()
  local x, X = mk({3, 4, 5}, "float32")
  lu.assertEquals(x:argmax():item(), RED.argmax(X))
  lu.assertEquals(x:argmin():item(), RED.argmin(X))
  local t = x:transpose(1, 3)
  local T = vals(t)
  lu.assertEquals(t:argmax():item(), RED.argmax(T))
  lu.assertEquals(t:argmin():item(), RED.argmin(T))
end

-- reference batched matmul with broadcast batch dims; 1-D as in PyTorch
local function ref_matmul(sa, A, sb, B)
  local a1, b1 = #sa == 1, #sb == 1
  if a1 then sa = {1, sa[1]} end
  if b1 then sb = {sb[1], 1} end
  local m, k, n = sa[#sa - 1], sa[#sa], sb[#sb]
  local ba, bb = {table.unpack(sa, 1, #sa - 2)}, {table.unpack(sb, 1, #sb - 2)}
  local batch = bshape(ba, bb)
  local ia = ref_binary(ba, iota(numel(ba)), bb, iota(numel(bb)), function(p, q) return {p, q} end)
  local out = {}
  for bi, pair in ipairs(ia) do
    local oa, ob = pair[1] * m * k, pair[2] * k * n
    for i = 0, m - 1 do for j = 0, n - 1 do
      local s = 0
      for l = 0, k - 1 do s = s + A[oa + i * k + l + 1] * B[ob + l * n + j + 1] end
      out[(bi - 1) * m * n + i * n + j + 1] = s
    end end
  end
  local shape = {table.unpack(batch)}
  if not a1 then shape[#shape + 1] = m end
  if not b1 then shape[#shape + 1] = n end
  return out, shape
end

local function check_mm(a, b, what)
  local sa, sb = {table.unpack(a.shape)}, {table.unpack(b.shape)}
  local ref, shape = ref_matmul(sa, vals(a), sb, vals(b))
  for _, r in ipairs{a:matmul(b), qkv.matmul(a, b)} do
    lu.assertEquals(r.dtype, a.dtype, what)
    assertShape(r, shape, what)
    assertClose(vals(r), ref, TOL[a.dtype], what)
  end
end

TestMatmul = {}
function TestMatmul:testShapes()
  for _, dt in ipairs{"float32", "float64"} do
    local m, k, n = math.random(1, 9), math.random(1, 9), math.random(1, 9)
    check_mm(mk({m, k}, dt), mk({k, n}, dt), "2-D " .. dt)
    check_mm(mk({k}, dt), mk({k, n}, dt), "1-D @ 2-D " .. dt)
    check_mm(mk({m, k}, dt), mk({k}, dt), "2-D @ 1-D " .. dt)
    check_mm(mk({k}, dt), mk({k}, dt), "1-D @ 1-D " .. dt)
    check_mm(mk({3, m, k}, dt), mk({3, k, n}, dt), "batched " .. dt)
    check_mm(mk({2, 1, m, k}, dt), mk({3, k, n}, dt), "broadcast batch " .. dt)
    check_mm(mk({m, k}, dt), mk({2, 3, k, n}, dt), "2-D @ 4-D " .. dt)
    check_mm(mk({4, 1, k}, dt), mk({1, k, n}, dt), "m = 1 " .. dt)
    check_mm(mk({k}, dt), mk({2, k, n}, dt), "1-D @ 3-D " .. dt)
    check_mm(mk({2, m, k}, dt), mk({k}, dt), "3-D @ 1-D " .. dt)
    check_mm(mk({0, k}, dt), mk({k, n}, dt), "m = 0 " .. dt)
    check_mm(mk({m, 0}, dt), mk({0, n}, dt), "k = 0 " .. dt)
  end
  local r = qkv.tensor{1, 2, 3}:matmul(qkv.tensor{4, 5, 6})
  lu.assertEquals({r.ndim, r:item()}, {0, 32})
  check_mm(qkv.tensor{{1, 0, 1}, {0, 2, 0}}, qkv.tensor{{0.5, 0.5}, {0.6405, 0.3595}, {1, 0}}, "README")
end

function TestMatmul:testViews()
  for _, dt in ipairs{"float32", "float64"} do
    local m, k, n = math.random(2, 9), math.random(2, 9), math.random(2, 9)
    check_mm(mk({k, m}, dt):t(), mk({k, n}, dt), "a transposed " .. dt)
    check_mm(mk({m, k}, dt), mk({n, k}, dt):t(), "b transposed " .. dt)
    check_mm(mk({k, m}, dt):t(), mk({n, k}, dt):t(), "both transposed " .. dt)
    check_mm(mk({m, k + 3}, dt):narrow(2, 2, k), mk({k + 2, n}, dt):narrow(1, 3, k), "narrowed " .. dt)
    -- every other column: strides (2k, 2) fit no BLAS layout
    check_mm(mk({m, k, 2}, dt):select(3, 1), mk({k, n}, dt), "strided a " .. dt)
    check_mm(mk({m, k}, dt), mk({k, 2 * n}, dt):view(k, n, 2):select(3, 2), "strided b " .. dt)
    check_mm(mk({k, 3, m}, dt):permute(2, 3, 1), mk({3, n, k}, dt):transpose(2, 3), "permuted batch " .. dt)
    check_mm(mk({2, m, k}, dt), mk({k, n}, dt):unsqueeze(1):expand(2, k, n), "expanded b " .. dt)
    check_mm(mk({m, 2, 2, k}, dt):select(3, 2):transpose(1, 2), mk({k, n}, dt), "4-D select view " .. dt)
    -- a's batch and rows read as one block of rows against a shared b
    -- (vm/dispatch/ops.c folds them into one product), past the small loops too
    check_mm(mk({2, m, k + 3}, dt):narrow(3, 2, k), mk({k, n}, dt), "folded, padded rows " .. dt)
    check_mm(mk({2, 1, m, k}, dt), mk({1, k, n}, dt), "folded, size-1 dims " .. dt)
    check_mm(mk({3, 2, 20, 30}, dt), mk({30, 25}, dt):t():contiguous():t(), "folded, big " .. dt)
    check_mm(mk({20, 3, 30}, dt):transpose(1, 2), mk({30, 25}, dt), "not foldable, big " .. dt)
    -- size-1 dims have any stride, and a broadcast batch dim has stride 0
    check_mm(mk({m, k}, dt):expand(2, 1, m, k), mk({k, n}, dt), "broadcast a " .. dt)
    check_mm(mk({3, 5, k}, dt):narrow(2, 2, 1), mk({k, n}, dt), "one row a batch " .. dt)
    check_mm(mk({3, 1, 20, 30}, dt):transpose(1, 2), mk({30, 25}, dt), "size-1 dim moved " .. dt)
  end
end

-- small products run as plain loops (up to 512 multiply-adds when b's rows
-- are contiguous, 1024 otherwise), bigger ones through OpenBLAS
-- (vm/cpu/matmul.c): every layout on both sides of both lines, and the
-- loops' 16- and 4-column blocks and their remainders
function TestMatmul:testSmallAndBlasPaths()
  local sizes = {{8, 8, 8}, {8, 8, 9}, {4, 16, 16}, {4, 16, 17}, {2, 16, 16},
                 {2, 16, 17}, {17, 3, 5},
                 {1, 33, 7}, {3, 5, 21}, {5, 7, 3}}
  for _, dt in ipairs{"float32", "float64"} do
    for _, s in ipairs(sizes) do
      local m, k, n = s[1], s[2], s[3]
      local what = ("%dx%dx%d %s"):format(m, k, n, dt)
      check_mm(mk({m, k}, dt), mk({k, n}, dt), what)
      check_mm(mk({k, m}, dt):t(), mk({k, n}, dt), "a transposed " .. what)
      check_mm(mk({m, k}, dt), mk({n, k}, dt):t(), "b transposed " .. what)
      check_mm(mk({m, k, 2}, dt):select(3, 1), mk({k, 2 * n}, dt):view(k, n, 2):select(3, 2),
               "strided " .. what)
      check_mm(mk({3, m, k}, dt), mk({k, n}, dt):unsqueeze(1):expand(3, k, n), "batched " .. what)
    end
  end
end

-- scores(Q, K, {scale = s}) is the product then a multiply by s, for any
-- s: BLAS skips the product when alpha is 0, so 0 * inf must still be NaN
function TestMatmul:testScaledProducts()
  for _, n in ipairs{4, 12} do           -- 4x4x4 loops, 12x4x12 BLAS
    local Q, K = mk({n, 4}, "float32"), mk({n, 4}, "float32")
    Q[1][1] = math.huge
    for _, scale in ipairs{0.5, 0, -0.0, math.huge, -math.huge, 0 / 0, 1e-40} do
      local got = qkv.scores(Q, K, {scale = scale})
      local want = Q:matmul(K:t()) * scale
      qkv.test.assertTensorEqual(got, want)
    end
    local Z = qkv.scores(qkv.zeros(n, 0), qkv.zeros(n, 0), {scale = math.huge})
    lu.assertTrue(Z:ne(Z):sum():item() == n * n, "0 * inf in every score")
  end
end

function TestMatmul:testLarge()
  check_mm(mk({180, 200}, "float32"), mk({200, 190}, "float32"), "large float32")
  check_mm(mk({2, 90, 60}, "float64"), mk({60, 200}, "float64"), "large float64")
end

local function ref_cat(shapes, datas, d)
  local out, outer = {}, numel({table.unpack(shapes[1], 1, d - 1)})
  local inner = numel({table.unpack(shapes[1], d + 1)})
  for o = 0, outer - 1 do
    for t, s in ipairs(shapes) do
      local blk = s[d] * inner
      for i = 1, blk do out[#out + 1] = datas[t][o * blk + i] end
    end
  end
  return out
end

TestCatStack = {}
function TestCatStack:testCat()
  for _, nd in ipairs{1, 2, 3, 4} do
    for d = 1, nd do
      local base = rshape(nd, 1, 4)
      local ts, shapes, datas = {}, {}, {}
      for i = 1, math.random(1, 4) do
        local s = {table.unpack(base)}
        s[d] = math.random(0, 3)
        ts[i], datas[i] = mk(s, i == 2 and "float64" or "float32")
        shapes[i] = s
      end
      local r, es = qkv.cat(ts, d), {table.unpack(base)}
      es[d] = lsum(map(shapes, function(s) return s[d] end))
      assertShape(r, es, "cat dim " .. d)
      lu.assertEquals(r.dtype, #ts >= 2 and "float64" or "float32")
      assertExact(vals(r), ref_cat(shapes, datas, d), "cat " .. sstr(base) .. " dim " .. d)
      assertExact(vals(qkv.cat(ts, d - nd - 1)), vals(r), "cat negative dim")
    end
  end
  local a, b = qkv.tensor{{1, 2}}, qkv.tensor{{3, 4}, {5, 6}}
  assertExact(vals(qkv.cat{a, b}), {1, 2, 3, 4, 5, 6}, "cat default dim")
  local big, B = mk({200, 100})
  assertExact(vals(qkv.cat({big, big:t():t()}, 2)), ref_cat({{200, 100}, {200, 100}}, {B, B}, 2), "large cat")
  lu.assertEquals(qkv.cat({qkv.tensor({1}, "int64"), qkv.tensor{true}}).dtype, "int64")
end

function TestCatStack:testStack()
  for _, nd in ipairs{0, 1, 2, 3} do
    for d = 1, nd + 1 do
      local s = rshape(nd, 1, 4)
      local ts, datas, shapes = {}, {}, {}
      local us = {table.unpack(s)}; table.insert(us, d, 1)
      for i = 1, math.random(1, 4) do ts[i], datas[i] = mk(s); shapes[i] = us end
      local r = qkv.stack(ts, d)
      local es = {table.unpack(s)}; table.insert(es, d, #ts)
      assertShape(r, es, "stack dim " .. d)
      assertExact(vals(r), ref_cat(shapes, datas, d), "stack " .. sstr(s) .. " dim " .. d)
      assertExact(vals(qkv.stack(ts, d - nd - 2)), vals(r), "stack negative dim")
    end
  end
  assertExact(vals(qkv.stack{qkv.tensor{1, 2}, qkv.tensor{3, 4}}), {1, 2, 3, 4}, "stack default")
end

TestMaskedFill = {}
function TestMaskedFill:testBroadcastMasks()
  for _, ms in ipairs{{3, 4, 5}, {4, 5}, {1, 5}, {3, 1, 1}, {5}, {1}, {}, {3, 4, 1}} do
    for _, dt in ipairs{"float32", "float64", "int64"} do
      local x, X = mk({3, 4, 5}, dt)
      local m, M = mk(ms, "bool")
      for _, v in ipairs{-7, dt ~= "int64" and nan or 9, dt ~= "int64" and -inf or 0} do
        local r = x:masked_fill(m, v)
        lu.assertEquals(r.dtype, dt)
        local ref = ref_binary({3, 4, 5}, X, ms, M, function(p, q) if q then return v end return p end)
        assertExact(vals(r), ref, "masked_fill mask " .. sstr(ms) .. " " .. dt)
      end
      assertExact(vals(x), X, "masked_fill leaves x alone")
    end
  end
  local big, B = mk({300, 200})
  local r = big:masked_fill(big:gt(0), 0)
  local ref = map(B, function(v) return v > 0 and 0 or v end)
  assertExact(vals(r), ref, "large masked_fill")
  local t = qkv.tensor{{1, 2}, {3, 4}}:t()
  assertExact(vals(t:masked_fill(qkv.tensor{true, false}, 0)), {0, 3, 0, 4}, "transposed")
end

TestPromotion = {}
function TestPromotion:testRules()
  local i = qkv.tensor({1, 2, 3}, "int64")
  local b = qkv.tensor{true, false, true}
  local f = qkv.tensor{1.5, 2, 3}
  local d = qkv.tensor({0.25, 0.5, 1}, "float64")
  local function chk(r, dt, expected, what)
    lu.assertEquals(r.dtype, dt, what)
    assertExact(vals(r), expected, what)
  end
  chk(i + 2.5, "float32", {3.5, 4.5, 5.5}, "int64 + 2.5")
  chk(i + 2, "int64", {3, 4, 5}, "int64 + 2")
  chk(i * i, "int64", {1, 4, 9}, "int64 * int64")
  chk(b + b, "int64", {2, 0, 2}, "bool + bool")
  chk(b * 3, "int64", {3, 0, 3}, "bool * 3")
  chk(i / i, "float32", {1, 1, 1}, "int / int")
  chk(qkv.tensor({7, -7}, "int64") / 2, "float32", {3.5, -3.5}, "int / number")
  chk(f + d, "float64", {1.75, 2.5, 4}, "float32 + float64")
  chk(d - f, "float64", {-1.25, -1.5, -2}, "float64 - float32")
  chk(f + 2.5, "float32", {4, 4.5, 5.5}, "float32 + 2.5 stays")
  chk(f * i, "float32", {1.5, 4, 9}, "float32 * int64")
  chk(d * b, "float64", {0.25, 0, 1}, "float64 * bool")
  chk(i + b, "int64", {2, 2, 4}, "int64 + bool")
  chk(i:lt(f), "bool", {true, false, false}, "int64 < float32")
  chk(qkv.maximum(i, f), "float32", {1.5, 2, 3}, "maximum int64 float32")
  chk(i ^ 2, "int64", {1, 4, 9}, "int64 ^ 2")
  chk(i:sqrt(), "float32", {1, f32(math.sqrt(2)), f32(math.sqrt(3))}, "sqrt int64")
end

TestBroadcast = {}
function TestBroadcast:testZeroSize()
  for _, p in ipairs{{{0, 3}, {1, 3}}, {{2, 0}, {2, 1}}, {{0}, {1}}, {{3, 1, 4}, {0, 4}},
                     {{0, 4}, {}}, {{2, 0, 3}, {3}}} do
    local a, A = mk(p[1]); local b, B = mk(p[2])
    local ref, out = ref_binary(p[1], A, p[2], B, function(x, y) return x + y end)
    local r = a + b
    assertShape(r, out, "0-size " .. sstr(p[1]) .. " + " .. sstr(p[2]))
    lu.assertEquals(r:numel(), 0)
    assertShape(a:lt(b), out)
    lu.assertEquals(#vals(r), #ref)
  end
  lu.assertEquals(qkv.zeros(0, 3):sum():item(), 0)
  assertExact(vals(qkv.zeros(0, 3):sum(1)), {0, 0, 0}, "sum over an empty dim")
end

function TestBroadcast:testEightDims()
  for _ = 1, 5 do
    local sa, sb = bpair(8, 1, 3)
    for _, name in ipairs{"add", "mul", "maximum"} do
      local a, A = mk(sa, "float64"); local b, B = mk(sb, "float64")
      local ref, out = ref_binary(sa, A, sb, B, BIN[name][1])
      local r = a[name](a, b)
      assertShape(r, out, "8-D " .. name)
      assertClose(vals(r), ref, 1e-12, "8-D " .. name .. " " .. sstr(sa) .. " " .. sstr(sb))
    end
  end
  local x, X = mk({2, 2, 2, 2, 2, 2, 2, 2})
  local p = x:permute(8, 7, 6, 5, 4, 3, 2, 1)
  local ref = ref_binary({2, 2, 2, 2, 2, 2, 2, 2}, flatten(p:tolist()), {}, {1}, function(u, v) return u + v end)
  assertClose(vals(p + 1), ref, 1e-5, "8-D permuted")
end

TestSpecialValues = {}
function TestSpecialValues:testFunctions()
  local x = qkv.tensor{inf, -inf, 0, -1, nan}
  assertClose(vals(x:exp()), {inf, 0, 1, math.exp(-1), nan}, 1e-6, "exp")
  assertExact(vals(x:log()), {inf, nan, -inf, nan, nan}, "log")
  assertExact(vals(x:sqrt()), {inf, nan, 0, nan, nan}, "sqrt")
  assertExact(vals(x:abs()), {inf, inf, 0, 1, nan}, "abs")
  assertClose(vals(x:tanh()), {1, -1, 0, UN.tanh[1](-1), nan}, 1e-6, "tanh")
  assertExact(vals(qkv.tensor{1, -1, 0} / 0), {inf, -inf, nan}, "x / 0")
  assertExact(vals(qkv.tensor{inf} - inf), {nan}, "inf - inf")
  assertExact(vals(qkv.tensor({0}, "float64"):log()), {-inf}, "log 0 float64")
  local big = qkv.zeros(40000)
  big[40000] = -1
  local lb = vals(big:log())
  assertExact({lb[1], lb[39999], lb[40000]}, {-inf, -inf, nan}, "large log")
end

-- float32's tanh and log (vexp.h's, vectorised) against float64 over dense
-- grids: every binade from the subnormals up, steps of 1e-4 across tanh's
-- two formulas (the switch at 0.625) and its saturation near +-9, log's
-- split at sqrt(1/2) and sqrt(2), and the floats next to 1. The error is in
-- float32 ulps of the reference: here vexp.h's tanh reaches 1.23 and its
-- log 0.76, glibc's tanhf 1.97 and logf 0.80; a tanh without its small-x
-- polynomial is off by millions. 0, +-inf and NaN results must match
-- exactly (the sign of 0 too).
local function ulp32(v)
  local a = math.abs(f32(v))
  return string.unpack("<f", string.pack("<I4", string.unpack("<I4", string.pack("<f", a)) + 1)) - a
end

local function maxulp(xs, got, ref, what)
  local worst, at, rel = 0, nil, 0
  lu.assertEquals(#got, #ref, what)
  for i = 1, #ref do
    local g, r = got[i], ref[i]
    if not isfin(r) or r == 0 then
      if not (g == r and 1 / g == 1 / r or isnan(g) and isnan(r)) then fail(what .. " at " .. xs[i], i, g, r) end
    elseif not isfin(g) then
      fail(what .. " at " .. xs[i], i, g, r)
    else
      local e = math.abs(g - r) / ulp32(r)
      if e > worst then worst, at = e, xs[i] end
      if math.abs(r) >= 2 ^ -126 then rel = math.max(rel, math.abs(g - r) / math.abs(r)) end
    end
  end
  return worst, ("%s: %.3f ulp at x = %.9g (relative error up to %.3g)"):format(what, worst, at or 0, rel)
end

-- float64's tanh: the series where (e - 1) / (e + 1) would cancel
local function tanh64(v)
  if v ~= v then return v end
  if math.abs(v) < 1e-2 then
    local z = v * v
    return v * (1 + z * (-1 / 3 + z * (2 / 15 + z * (-17 / 315 + z * 62 / 2835))))
  end
  if math.abs(v) > 20 then return v > 0 and 1.0 or -1.0 end
  local e = math.exp(2 * v)
  return (e - 1) / (e + 1)
end

local function binades(lo, hi, steps, signs)
  local t = {}
  for k = lo, hi do
    for j = 0, steps - 1 do
      for _, s in ipairs(signs) do t[#t + 1] = s * 2 ^ k * (1 + j / steps) end
    end
  end
  return t
end

TestFloat32Functions = {}
function TestFloat32Functions:testTanhAgainstFloat64()
  local xs = binades(-149, 7, 16, {1, -1})
  for i = -100000, 100000 do xs[#xs + 1] = i * 1e-4 end
  for _, v in ipairs{0, -0.0, inf, -inf, nan, 1e-3, -1e-3, 1e-40, -1e-40, 0.625, -0.625, 3e38, -3e38} do
    xs[#xs + 1] = v
  end
  local x = qkv.tensor(xs)
  lu.assertEquals(x.dtype, "float32")
  local X, got = vals(x), vals(x:tanh())
  local err, msg = maxulp(X, got, map(X, tanh64), "tanh")
  lu.assertTrue(err <= 2, msg)
  -- +-1 exactly once tanh is within half an ulp of it, and odd to the bit
  local neg = vals((-x):tanh())
  for i, v in ipairs(X) do
    if math.abs(v) > 9.02 and got[i] ~= (v > 0 and 1 or -1) then fail("tanh saturates", i, got[i], v) end
    if not (neg[i] == -got[i] and 1 / neg[i] == -1 / got[i] or isnan(v)) then
      fail("tanh(-x) = -tanh(x) at " .. v, i, neg[i], -got[i])
    end
  end
  -- the strided row loop computes the same
  local m = x[{{1, 200000}}]:reshape(1000, 200)
  lu.assertTrue(qkv.eq(m:t():tanh(), m:tanh():t()):all():item(), "tanh of a transposed tensor")
end

function TestFloat32Functions:testLogAgainstFloat64()
  local xs = binades(-149, 127, 64, {1})
  for i = 0, 100000 do xs[#xs + 1] = 0.5 + i * 1.5e-5 end
  for j = 1, 1000 do xs[#xs + 1] = 1 + j * 2 ^ -23; xs[#xs + 1] = 1 - j * 2 ^ -24 end
  for _, v in ipairs{1, 0, -0.0, inf, -inf, nan, -1, -1e-40, 1e-40, 1e-45, 2 ^ -149, 3.4e38, 1e-3} do
    xs[#xs + 1] = v
  end
  local x = qkv.tensor(xs)
  local X, got = vals(x), vals(x:log())
  local ref = map(X, function(v) return v < 0 and nan or math.log(v) end)
  local err, msg = maxulp(X, got, ref, "log")
  lu.assertTrue(err <= 1.5, msg)
  assertExact(vals(qkv.tensor{1, 0, -0.0, inf, -inf, nan, -1, -1e-40}:log()),
              {0, -inf, -inf, inf, nan, nan, nan, nan}, "log's special values")
  lu.assertEquals(1 / qkv.tensor{1}:log():item(), inf, "log 1 = +0")
  local m = x[{{1, 17600}}]:reshape(176, 100)
  lu.assertTrue(qkv.eq(m:t():log(), m:log():t()):all():item(), "log of a transposed tensor")
end

function TestSpecialValues:testMaximumNan()
  assertExact(vals(qkv.maximum(qkv.tensor{nan, 1, 2}, qkv.tensor{1, nan, 1})), {nan, nan, 2}, "maximum")
  assertExact(vals(qkv.minimum(qkv.tensor{nan, 1, 2}, qkv.tensor{1, nan, 1})), {nan, nan, 1}, "minimum")
end

os.exit(lu.LuaUnit.run(), true)
