-- test_math_reduce_matmul.lua: reductions (sum, mean, var, std, max, min,
-- argmax, argmin, cumsum), matmul and the scaled products, cat and stack,
-- each checked against a float64 plain-loop reference written here (on
-- tolist() data), on random shapes and data from a fixed-seed Lua RNG.
-- Elementwise ops, comparisons and promotion are in
-- test_math_elementwise.lua; what both use is tests/helpers/math_ref.lua.
local lu = require "luaunit"
local H = dofile("tests/helpers/math_ref.lua")

math.randomseed(20240611)
local inf, nan, TOL = H.inf, H.nan, H.TOL
local numel, sstr, isnan, map, iota, rshape = H.numel, H.sstr, H.isnan, H.map, H.iota, H.rshape
local mk, vals, bshape, ref_binary = H.mk, H.vals, H.bshape, H.ref_binary
local assertClose, assertExact, assertShape = H.assertClose, H.assertExact, H.assertShape

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

-- var and std over max(0, n - correction) are the float64 moments rounded
-- once into the dtype (a half, as in all its reductions, through
-- float32): the kernel divides by n - correction, where rescaling the
-- unbiased result, already rounded, by (n - 1) / (n - c) rounded too was
-- 1-2 units in the last place off in a third of the rows of 3. Rows of 3
-- (lines), columns of 3 (tiles), and one line of 70000 (pieces across
-- threads); float64 to its last bits, within 1e-14
function TestReductions:testCorrectionRoundsOnce()
  local function moment(c, std)
    return function(l)
      local m, s = lmean(l), 0
      for _, v in ipairs(l) do s = s + (v - m) ^ 2 end
      local v = s / math.max(0, #l - c)
      return std and math.sqrt(v) or v
    end
  end
  for _, dt in ipairs{"float32", "bfloat16", "float16", "float64"} do
    local function check(got, ref, what)
      if dt == "float64" then return assertClose(vals(got), ref, 1e-14, what) end
      local r = qkv.tensor(ref, "float64")
      assertExact(vals(got), vals(dt == "float32" and r:float() or r:float():to(dt)), what)
    end
    for _, case in ipairs{{{2000, 3}, 2}, {{3, 2000}, 1}, {{70000}, 1}} do
      local shape, d = case[1], case[2]
      local x = mk(shape, dt)
      local X = vals(x:double())
      for _, c in ipairs{0, 0.5, 1.5} do
        for _, op in ipairs{"var", "std"} do
          local what = ("%s %s %s(%d, correction %s)"):format(dt, sstr(shape), op, d, c)
          check(x[op](x, {dim = d, correction = c}), (ref_reduce(shape, X, d, moment(c, op == "std"))), what)
          if #shape == 1 then check(x[op](x, {correction = c}), {moment(c, op == "std")(X)}, what .. " all") end
        end
      end
    end
  end
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
  for _, n in ipairs{4, 12, 1} do        -- 4x4x4 loops, 12x4x12 BLAS, 1x64x1 gemv
    local Q, K = mk({n, 4}, "float32"), mk({n, 4}, "float32")
    if n == 1 then Q, K = mk({1, 64}, "float32"), mk({40, 64}, "float32") end
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

-- one row against a matrix past the small loops runs as OpenBLAS's gemv
-- (vm/cpu/matmul.c): b as stored and transposed (a Linear's W^T), a's row
-- strided (a column of a matrix, read with its step), a batch of rows, both
-- dtypes, and one big enough that the threads split its columns
function TestMatmul:testOneRow()
  for _, dt in ipairs{"float32", "float64"} do
    for _, s in ipairs{{64, 40}, {40, 150}, {300, 129}} do
      local k, n = s[1], s[2]
      local what = ("1x%dx%d %s"):format(k, n, dt)
      check_mm(mk({1, k}, dt), mk({k, n}, dt), what)
      check_mm(mk({1, k}, dt), mk({n, k}, dt):t(), "b transposed " .. what)
      check_mm(mk({k, 3}, dt):narrow(2, 2, 1):t(), mk({k, n}, dt), "a strided " .. what)
      check_mm(mk({k, 3}, dt):narrow(2, 3, 1):t(), mk({n, k}, dt):t(), "both " .. what)
      check_mm(mk({3, 1, k}, dt), mk({3, k, n}, dt), "batched " .. what)
      check_mm(mk({k}, dt), mk({n, k}, dt):t(), "1-D " .. what)
    end
  end
  check_mm(mk({1, 1024}, "float32"), mk({1100, 1024}, "float32"):t(), "1x1024x1100 threaded")
  -- inf and NaN in the row reach the columns they touch, as gemm's do
  local x, W = mk({1, 64}, "float32"), mk({40, 64}, "float32")
  x[1][3] = math.huge
  W[5][3] = 0
  local y = qkv.matmul(x, W:t())
  lu.assertTrue(y[1][5] ~= y[1][5], "inf * 0 is NaN")
  lu.assertEquals(y:ne(y):sum():item(), 1)
  lu.assertEquals(y:abs():eq(math.huge):sum():item(), 39)
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
  -- 0-d tensors have no dim to join along (PyTorch: an error); the
  -- default dim wrote each into the one element, the last one winning
  for _, list in ipairs{{qkv.tensor(1), qkv.tensor(2)}, {qkv.tensor(7)},
                        {qkv.tensor{1, 2}, qkv.tensor(3)}} do
    local ok, err = pcall(qkv.cat, list)
    lu.assertFalse(ok)
    lu.assertStrContains(err, "cannot be concatenated")
  end
  lu.assertStrContains(select(2, pcall(qkv.cat, {qkv.tensor{1}, qkv.tensor(3)})), "cat: tensor 2 is 0-d")
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

os.exit(lu.LuaUnit.run(), true)
