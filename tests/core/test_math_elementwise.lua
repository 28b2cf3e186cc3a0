-- test_math_elementwise.lua: elementwise ops, comparisons, masked_fill,
-- type promotion, broadcasting and special values, each checked against a
-- float64 plain-loop reference written here (on tolist() data), on random
-- shapes and data from a fixed-seed Lua RNG; float32's tanh and log
-- against float64 over dense grids. Reductions, matmul, cat and stack are
-- in test_math_reduce_matmul.lua; what both use is tests/helpers/math_ref.lua.
local lu = require "luaunit"
local H = dofile("tests/helpers/math_ref.lua")

math.randomseed(20240611)
local inf, nan, TOL = H.inf, H.nan, H.TOL
local sstr, isnan, isfin, map, f32, rshape = H.sstr, H.isnan, H.isfin, H.map, H.f32, H.rshape
local flatten, mk, vals, ref_binary, bpair = H.flatten, H.mk, H.vals, H.ref_binary, H.bpair
local fail, assertClose, assertExact, assertShape = H.fail, H.assertClose, H.assertExact, H.assertShape

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
  -- a 0-d tensor beside one with dims: a number's part (PyTorch's
  -- result_type), lifting the category but not the size within it
  local z64, z32, zi = qkv.tensor(0.5, "float64"), qkv.tensor(0.5), qkv.tensor(2, "int64")
  local h = qkv.tensor({1, 2, 3}, "bfloat16")
  chk(h * z32, "bfloat16", {0.5, 1, 1.5}, "bfloat16 * 0-d float32")
  chk(z32 * h, "bfloat16", {0.5, 1, 1.5}, "0-d float32 * bfloat16")
  chk(f + z64, "float32", {2, 2.5, 3.5}, "float32 + 0-d float64")
  chk(i + z64, "float64", {1.5, 2.5, 3.5}, "int64 + 0-d float64: the category lifts")
  chk(qkv.tensor({1, 2}, "int32") + zi, "int32", {3, 4}, "int32 + 0-d int64")
  chk(b + qkv.tensor(3, "int32"), "int32", {4, 3, 4}, "bool + 0-d int32")
  chk(z64 + z32, "float64", {1}, "two 0-d promote as tensors")
  chk(qkv.where(b, h, z32), "bfloat16", {1, 0.5, 3}, "where bfloat16, 0-d float32")
  chk(qkv.maximum(h, z32), "bfloat16", {1, 2, 3}, "maximum bfloat16, 0-d float32")
  chk(h:lt(z64), "bool", {false, false, false}, "bfloat16 < 0-d float64")
  local g = qkv.tensor{1, 2, 3}
  g:add_(z64)                                 -- float32 += 0-d float64: allowed, as PyTorch's
  chk(g, "float32", {1.5, 2.5, 3.5}, "float32 add_ 0-d float64")
  chk(f:clamp(z64, nil), "float32", {1.5, 2, 3}, "clamp float32 by a 0-d float64")
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
