-- test_layers.lua: the layers' math (docs/tensors.md, "Layers"): sigmoid, relu, silu,
-- sin, cos, log_softmax, layer_norm, rms_norm and dropout against plain-Lua
-- float64 references, their edge cases (±inf, NaN, rows all -inf, a large
-- offset that float32 accumulation would lose) and bad arguments; then
-- qkv.nn.LayerNorm, RMSNorm, Dropout (train / eval), GELU's approximate,
-- Embedding and the attention modules with bias = true.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local fails = R.fails

math.randomseed(11)

local function rand(shape, dt, lo, hi)
  local d = {}
  for i = 1, R.numel(shape) do d[i] = (lo or -3) + ((hi or 3) - (lo or -3)) * math.random() end
  return qkv.tensor(R.nest(d, shape), dt or "float64")
end
local function flat(x) return x:contiguous():view(-1):tolist() end

-- |got - want| within rel * max(1, |want|), NaN matching NaN, inf inf
local function near(got, want, rel, what)
  lu.assertEquals(#got, #want, what)
  for i = 1, #want do
    local g, w = got[i], want[i]
    if w ~= w then lu.assertTrue(g ~= g, what .. " [" .. i .. "] NaN")
    elseif w == math.huge or w == -math.huge then lu.assertEquals(g, w, what .. " [" .. i .. "]")
    else lu.assertTrue(math.abs(g - w) <= rel * math.max(1, math.abs(w)),
                       string.format("%s [%d]: %.17g vs %.17g", what, i, g, w)) end
  end
end

---------------------------------------------------------------- elementwise
TestElementwise = {}

local SPECIAL = {-math.huge, -1e4, -30, -2, -0.5, 0, 0.25, 1, 3, 30, 1e4, math.huge, 0 / 0}
local REF = {
  sigmoid = function(x) return 1 / (1 + math.exp(-x)) end,
  relu = function(x) return (x > 0 or x ~= x) and x or 0 end,
  silu = function(x) return x / (1 + math.exp(-x)) end,
  sin = math.sin, cos = math.cos,
}

function TestElementwise:testAgainstReference()
  for name, f in pairs(REF) do
    for _, dt in ipairs{"float64", "float32"} do
      local x = rand({3, 5}, dt, -6, 6)
      local want = {}
      for i, v in ipairs(flat(x)) do want[i] = f(v) end
      near(flat(x[name](x)), want, dt == "float64" and 1e-14 or 2e-6, name .. " " .. dt)
      near(flat(qkv[name](x:t())), (function()
        local w = {}
        for i, v in ipairs(flat(x:t())) do w[i] = f(v) end
        return w
      end)(), dt == "float64" and 1e-14 or 2e-6, name .. " transposed")
      lu.assertEquals(x[name](x).dtype, dt)
    end
    if name ~= "sin" and name ~= "cos" then
      local s = qkv.tensor(SPECIAL, "float64")
      local want = {}
      for i, v in ipairs(SPECIAL) do want[i] = f(v) end
      if name == "silu" then want[1] = 0 / 0 end      -- -inf / inf
      near(flat(s[name](s)), want, 1e-14, name .. " specials")
    end
  end
  lu.assertEquals(qkv.tensor({-2, 3}, "int64"):relu():tolist(), {0, 3})
  lu.assertEquals(qkv.tensor({-2, 3}, "int64"):relu().dtype, "int64")
  lu.assertEquals(qkv.tensor({-2, 3}, "int64"):sigmoid().dtype, "float32")
  lu.assertEquals(qkv.zeros(0, 2):silu().shape, {0, 2})
end

---------------------------------------------------------------- log_softmax
TestLogSoftmax = {}

local function ref_lsm(row)
  local m = -math.huge
  for _, v in ipairs(row) do m = math.max(m, v) end
  local s = 0
  for _, v in ipairs(row) do s = s + math.exp(v - m) end
  local out = {}
  for i, v in ipairs(row) do out[i] = v - m - math.log(s) end
  return out
end

function TestLogSoftmax:testRowsAndDims()
  for _, dt in ipairs{"float64", "float32"} do
    local x = rand({3, 4, 5}, dt, -20, 20)
    local xs = x:tolist()
    local last = x:log_softmax()
    local d2 = qkv.log_softmax(x, 2)
    for a = 1, 3 do
      for b = 1, 4 do near(last[a][b]:tolist(), ref_lsm(xs[a][b]), dt == "float64" and 1e-13 or 2e-6, "last") end
      for c = 1, 5 do
        local col = {}
        for b = 1, 4 do col[b] = xs[a][b][c] end
        near(flat(d2[a]:select(2, c)), ref_lsm(col), dt == "float64" and 1e-13 or 2e-6, "dim 2")
      end
    end
    -- a transposed input, the dim last in the view
    qkv.test.assertClose(x:transpose(2, 3):log_softmax(), x:transpose(2, 3):contiguous():log_softmax())
    qkv.test.assertClose(x:transpose(2, 3):log_softmax(2), last:transpose(2, 3))
    qkv.test.assertClose(x:transpose(2, 3):log_softmax(3), d2:transpose(2, 3))
  end
end

function TestLogSoftmax:testEdges()
  local x = qkv.tensor({{1e30, 0, -1e30}, {-math.huge, -math.huge, -math.huge},
                        {0 / 0, 1, 2}, {-math.huge, 0, 0}}, "float64")
  local out = x:log_softmax():tolist()
  near(out[1], {0, -1e30, -2e30}, 1e-15, "huge")
  near(out[2], {-math.huge, -math.huge, -math.huge}, 0, "all -inf: the log of softmax's zeros")
  near(out[3], {0 / 0, 0 / 0, 0 / 0}, 0, "NaN row")
  near(out[4], {-math.huge, -math.log(2), -math.log(2)}, 1e-15, "masked key")
  qkv.test.assertClose(x[1]:log_softmax():exp(), x[1]:softmax())
  lu.assertEquals(qkv.zeros(2, 0):log_softmax().shape, {2, 0})
  lu.assertEquals(qkv.tensor({1, 2}, "int64"):log_softmax().dtype, "float32")
  fails("dim", qkv.log_softmax, qkv.ones(2), 3)
end

-- large logits: (x - max) - log(sum), never x - (max + log(sum)), which
-- rounds back to max (1e8 in float32, 1e12 in float64) and gave a row of
-- 0 where it is -log 2: cross_entropy 0. Each dtype against float64, on
-- the vector path (rows of 8 and more) and the scalar tail, and on each
-- ISA cap in a child
local function big_logits()
  local ln2 = math.log(2)
  for _, dt in ipairs{"float32", "float16", "bfloat16"} do
    for _, n in ipairs{2, 8, 19} do
      local x = qkv.full({2, n}, dt == "float32" and 1e8 or 6e4, dt)
      local out = x:log_softmax():double()
      local want = -math.log(n)
      lu.assertTrue((out - want):abs():max():item() <= 1e-2 * math.abs(want) + 1e-7,
                    ("%s n %d: %s"):format(dt, n, tostring(out[1][1])))
    end
  end
  local x = qkv.tensor({{1e12, 1e12 - 20}, {1e4, 1e4}}, "float64")
  local out = x:log_softmax():tolist()
  -- (log of a sum near 1: within an ulp of 1, as PyTorch's -2.06115369e-09)
  lu.assertTrue(math.abs(out[1][1] - -2.0611536224385579e-09) <= 2.3e-16, tostring(out[1][1]))
  lu.assertTrue(math.abs(out[2][1] + ln2) <= 1e-15, tostring(out[2][1]))
  local ce = qkv.nn.cross_entropy(qkv.tensor({{1e8, 1e8}}), qkv.tensor({1}, "int64")):item()
  lu.assertTrue(math.abs(ce - ln2) < 1e-6, "cross_entropy " .. ce)
  local f = qkv.full({3, 24}, 1e4, "float32"):log_softmax()
  lu.assertTrue((f + math.log(24)):abs():max():item() < 1e-6, "float32 1e4: " .. tostring(f[1][1]))
end

function TestLogSoftmax:testLargeLogits()
  big_logits()
  dofile("tests/helpers/isa_children.lua")(lu, "tests/stdlib/test_layers.lua", "testLargeLogits")
end

---------------------------------------------------------------- layer_norm
TestLayerNorm = {}

-- a row's mean and 1 / sqrt(biased variance + eps)
local function moments(row, eps)
  local n, mean, var = #row, 0, 0
  for _, v in ipairs(row) do mean = mean + v end
  mean = mean / n
  for _, v in ipairs(row) do var = var + (v - mean) ^ 2 end
  return mean, 1 / math.sqrt(var / n + eps)
end

local function ref_ln(row, w, b, eps)
  local mean, inv = moments(row, eps)
  local out = {}
  for i, v in ipairs(row) do out[i] = (v - mean) * inv * (w and w[i] or 1) + (b and b[i] or 0) end
  return out
end

function TestLayerNorm:testAgainstReference()
  for _, dt in ipairs{"float64", "float32"} do
    local x = rand({2, 3, 4}, dt)
    local w, b = rand({3, 4}, dt), rand({3, 4}, dt)
    local cases = {
      {4, nil, nil, 1e-5}, {{4}, rand({4}, dt), rand({4}, dt), 1e-5},
      {{3, 4}, w, b, 1e-3}, {{3, 4}, w, nil, 0},
    }
    for k, c in ipairs(cases) do
      local out = qkv.layer_norm(x, c[1], c[2], c[3], c[4])
      local n = type(c[1]) == "table" and R.numel(c[1]) or c[1]
      local xf, of = flat(x), flat(out)
      local wf, bf = c[2] and flat(c[2]), c[3] and flat(c[3])
      for r = 0, #xf // n - 1 do
        local row, got = {}, {}
        for i = 1, n do row[i], got[i] = xf[r * n + i], of[r * n + i] end
        near(got, ref_ln(row, wf, bf, c[4]), dt == "float64" and 1e-12 or 3e-6, "case " .. k .. " " .. dt)
      end
    end
    qkv.test.assertClose(qkv.layer_norm(x:transpose(1, 2), 4), qkv.layer_norm(x:transpose(1, 2):contiguous(), 4))
  end
end

-- layer_norm's backward (qkv._layer_norm_backward, autograd's rule) for
-- one row in plain Lua, float64: gx, and the row's terms of gw and gb
local function ref_ln_back(row, g, w, eps)
  local n, mean, inv = #row, moments(row, eps)
  local xh, gy, s1, s2 = {}, {}, 0, 0
  for i = 1, n do
    xh[i], gy[i] = (row[i] - mean) * inv, g[i] * (w and w[i] or 1)
    s1, s2 = s1 + gy[i], s2 + gy[i] * xh[i]
  end
  local gx, gw = {}, {}
  for i = 1, n do
    gx[i] = inv * (gy[i] - s1 / n - xh[i] * s2 / n)
    gw[i] = g[i] * xh[i]
  end
  return gx, gw
end

-- every row length around the 16-lane vectors (the AVX-512 rows' tails),
-- with and without w, float64 and float32, and enough rows (3000) that the
-- sums over rows go through many blocks and both threads
function TestLayerNorm:testBackwardAgainstReference()
  for _, dt in ipairs{"float64", "float32"} do
    for _, c in ipairs{{1, 5}, {5, 7}, {16, 3}, {17, 4}, {33, 2}, {64, 3000}} do
      local n, rows = c[1], c[2]
      local x, g = rand({rows, n}, dt), rand({rows, n}, dt)
      for _, w in ipairs{rand({n}, dt), false} do
        local gx, gw, gb = qkv._layer_norm_backward(x, g, n, w or nil, 1e-5, true, true)
        lu.assertEquals(gx.dtype, dt)
        local xf, gf, wf = flat(x), flat(g), w and flat(w)
        local gxf, want_w, want_b = flat(gx), {}, {}
        for i = 1, n do want_w[i], want_b[i] = 0, 0 end
        for r = 0, rows - 1, rows > 100 and 97 or 1 do       -- a sample of the many
          local row, gr, got = {}, {}, {}
          for i = 1, n do row[i], gr[i], got[i] = xf[r * n + i], gf[r * n + i], gxf[r * n + i] end
          local wx = ref_ln_back(row, gr, wf, 1e-5)
          near(got, wx, dt == "float64" and 1e-10 or 2e-5, ("gx n %d %s"):format(n, dt))
        end
        for r = 0, rows - 1 do
          local row, gr = {}, {}
          for i = 1, n do row[i], gr[i] = xf[r * n + i], gf[r * n + i] end
          local _, tw = ref_ln_back(row, gr, nil, 1e-5)
          for i = 1, n do want_w[i], want_b[i] = want_w[i] + tw[i], want_b[i] + gr[i] end
        end
        local tol = (dt == "float64" and 1e-12 or 2e-6) * rows
        near(flat(gw), want_w, tol, ("gw n %d %s"):format(n, dt))
        near(flat(gb), want_b, tol, ("gb n %d %s"):format(n, dt))
      end
    end
  end
  -- nothing asked: no sums; a 3-D x whose rows are its last two dims
  local x, g = rand({2, 3, 4}), rand({2, 3, 4})
  local gx, gw, gb = qkv._layer_norm_backward(x, g, 12)
  lu.assertNil(gw)
  lu.assertNil(gb)
  local want = ref_ln_back(flat(x[1]), flat(g[1]), nil, 1e-5)
  near(flat(gx[1]), want, 1e-12, "rows of 12")
  -- no rows: gw and gb are sums of nothing
  local _, zw, zb = qkv._layer_norm_backward(qkv.zeros(0, 3), qkv.zeros(0, 3), 3, nil, 1e-5, true, true)
  lu.assertEquals(flat(zw), {0, 0, 0})
  lu.assertEquals(flat(zb), {0, 0, 0})
end

-- gradients in bfloat16 go through float32 and come back in bfloat16
function TestLayerNorm:testBackwardHalf()
  local xb = rand({4, 8}, "float32"):to("bfloat16"):requires_grad_()
  local wb = rand({8}, "float32"):to("bfloat16"):requires_grad_()
  qkv.layer_norm(xb, 8, wb):sum():backward()
  lu.assertEquals(xb.grad.dtype, "bfloat16")
  lu.assertEquals(wb.grad.dtype, "bfloat16")
  local gx, gw = qkv._layer_norm_backward(xb:detach():float(), qkv.ones(4, 8), 8,
                                          wb:detach():float(), 1e-5, true)
  lu.assertEquals(flat(xb.grad), flat(gx:to("bfloat16")))
  lu.assertEquals(flat(wb.grad), flat(gw:to("bfloat16")))
end

function TestLayerNorm:testBackwardErrors()
  local x = qkv.ones(2, 6)
  fails("_layer_norm_backward: n = 4 is not the size of x (2, 6)'s last dims",
        qkv._layer_norm_backward, x, x, 4)
  fails("_layer_norm_backward: n = 0 is not the size", qkv._layer_norm_backward, x, x, 0)
  fails("_layer_norm_backward: w (5,) must hold n = 6 elements of x's dtype and device",
        qkv._layer_norm_backward, x, x, 6, qkv.ones(5))
  fails("_layer_norm_backward: w (6,) must hold", qkv._layer_norm_backward, x, x, 6,
        qkv.ones(6, "float64"))
  fails("_layer_norm_backward: x (2, 6) and g (2, 3) must be float32 or float64 of one shape",
        qkv._layer_norm_backward, x, qkv.ones(2, 3), 6)
  fails("_layer_norm_backward: eps must be >= 0", qkv._layer_norm_backward, x, x, 6, nil, -1)
end

-- float32 with a large common offset: the mean and variance accumulate in
-- double, so the small spread survives
function TestLayerNorm:testLargeOffsetFloat32()
  local d = {}
  for i = 1, 1024 do d[i] = 1e4 + (i % 7) * 0.01 end
  local x = qkv.tensor({d})
  local got = flat(qkv.layer_norm(x, 1024))
  local want = ref_ln(flat(x), nil, nil, 1e-5)
  near(got, want, 1e-4, "offset 1e4")
end

function TestLayerNorm:testErrors()
  local x = qkv.ones(2, 3)
  fails("layer_norm: normalized_shape (2,) is not the last dims of x (2, 3)", qkv.layer_norm, x, 2)
  fails("layer_norm: normalized_shape (2, 3, 1) is not the last dims of x (2, 3)", qkv.layer_norm, x, {2, 3, 1})
  fails("layer_norm: w is (2,) but normalized_shape is (3,)", qkv.layer_norm, x, 3, qkv.ones(2))
  fails("layer_norm: b is (3, 1) but normalized_shape is (3,)", qkv.layer_norm, x, 3, nil, qkv.ones(3, 1))
  fails("layer_norm: x must be float32 or float64, got int64", qkv.layer_norm, qkv.tensor({1}, "int64"), 1)
  fails("layer_norm: normalized_shape must be a size or a table of sizes, got string", qkv.layer_norm, x, "3")
  fails("layer_norm: normalized_shape item 1 is not an integer", qkv.layer_norm, x, {1.5})
  fails("layer_norm: eps must be >= 0", qkv.layer_norm, x, 3, nil, nil, -1)
  -- read raw: the table's metamethods are not run
  local proxy = setmetatable({3}, {__index = function() error("ran") end, __len = function() error("ran") end})
  qkv.test.assertClose(qkv.layer_norm(x, proxy), qkv.layer_norm(x, 3))
end

---------------------------------------------------------------- rms_norm
TestRMSNorm = {}

-- x / sqrt(mean(x^2) + eps) * w, in float64
local function ref_rms(row, w, eps)
  local s = 0
  for _, v in ipairs(row) do s = s + v * v end
  local inv, out = 1 / math.sqrt(s / #row + eps), {}
  for i, v in ipairs(row) do out[i] = v * inv * (w and w[i] or 1) end
  return out
end

-- eps nil is the machine epsilon of the computed dtype (float32's for the
-- halves, as PyTorch's kernel); the halves' tolerance is their rounding
local EPS = {float64 = 2 ^ -52, float32 = 2 ^ -23, float16 = 2 ^ -23, bfloat16 = 2 ^ -23}
local TOL = {float64 = 1e-12, float32 = 3e-6, float16 = 2e-3, bfloat16 = 1.6e-2}

function TestRMSNorm:testAgainstReference()
  for _, dt in ipairs{"float64", "float32", "float16", "bfloat16"} do
    local x = rand({2, 3, 4}, dt)
    local w = rand({3, 4}, dt)
    local cases = {
      {4, nil, nil}, {{4}, rand({4}, dt), nil}, {{3, 4}, w, 1e-3}, {{3, 4}, nil, 0.5},
      {{3, 4}, w, nil}, {4, rand({4}, dt), 0},
    }
    for k, c in ipairs(cases) do
      local out = qkv.rms_norm(x, c[1], c[2], c[3])
      lu.assertEquals(out.dtype, dt)
      local n = type(c[1]) == "table" and R.numel(c[1]) or c[1]
      local xf, of = flat(x:double()), flat(out:double())
      local wf = c[2] and flat(c[2]:double())
      for r = 0, #xf // n - 1 do
        local row, got = {}, {}
        for i = 1, n do row[i], got[i] = xf[r * n + i], of[r * n + i] end
        near(got, ref_rms(row, wf, c[3] or EPS[dt]), TOL[dt], "case " .. k .. " " .. dt)
      end
    end
    qkv.test.assertClose(qkv.rms_norm(x:transpose(1, 2), 4), qkv.rms_norm(x:transpose(1, 2):contiguous(), 4))
  end
end

-- eps matters where mean(x^2) is small: the default is the dtype's epsilon
function TestRMSNorm:testDefaultEps()
  for _, dt in ipairs{"float64", "float32"} do
    local x = qkv.tensor({{1e-8, -2e-8}}, dt)
    near(flat(qkv.rms_norm(x, 2)), ref_rms({1e-8, -2e-8}, nil, EPS[dt]), TOL[dt], dt)
    near(flat(qkv.rms_norm(x, 2, nil, 1e-10)), ref_rms({1e-8, -2e-8}, nil, 1e-10), TOL[dt], dt)
  end
  qkv.test.assertClose(qkv.rms_norm(qkv.ones(2, 3), 3, {eps = 1e-3}), qkv.rms_norm(qkv.ones(2, 3), 3, nil, 1e-3))
  lu.assertEquals(qkv.rms_norm(qkv.zeros(0, 3), 3):size(), {0, 3})
end

-- the backward against the float64 derivative of the reference
function TestRMSNorm:testBackward()
  local x, g, w = rand({5, 6}), rand({5, 6}), rand({6})
  local gx, gw = qkv._rms_norm_backward(x, g, 6, w, 1e-3, true)
  local xf, gf, wf = flat(x), flat(g), flat(w)
  local wantx, wantw = {}, {}
  for j = 1, 6 do wantw[j] = 0 end
  for r = 0, 4 do
    local s = 0
    for j = 1, 6 do s = s + xf[r * 6 + j] ^ 2 end
    local inv, dot = 1 / math.sqrt(s / 6 + 1e-3), 0
    for j = 1, 6 do dot = dot + gf[r * 6 + j] * wf[j] * xf[r * 6 + j] * inv end
    for j = 1, 6 do
      local xh = xf[r * 6 + j] * inv
      wantx[r * 6 + j] = inv * (gf[r * 6 + j] * wf[j] - xh * dot / 6)
      wantw[j] = wantw[j] + gf[r * 6 + j] * xh
    end
  end
  near(flat(gx), wantx, 1e-12, "gx")
  near(flat(gw), wantw, 1e-12, "gw")
  local _, none = qkv._rms_norm_backward(x, g, 6)
  lu.assertNil(none)
  local _, zw = qkv._rms_norm_backward(qkv.zeros(0, 3), qkv.zeros(0, 3), 3, nil, 1e-5, true)
  lu.assertEquals(zw:tolist(), {0, 0, 0})
end

function TestRMSNorm:testErrors()
  local x = qkv.ones(2, 3)
  fails("rms_norm: normalized_shape (2,) is not the last dims of x (2, 3)", qkv.rms_norm, x, 2)
  fails("rms_norm: normalized_shape (2, 3, 1) is not the last dims of x (2, 3)", qkv.rms_norm, x, {2, 3, 1})
  fails("rms_norm: weight is (2,) but normalized_shape is (3,)", qkv.rms_norm, x, 3, qkv.ones(2))
  fails("rms_norm: x must be float32 or float64, got int64", qkv.rms_norm, qkv.tensor({1}, "int64"), 1)
  fails("rms_norm: normalized_shape must be a size or a table of sizes, got string", qkv.rms_norm, x, "3")
  fails("rms_norm: normalized_shape item 1 is not an integer", qkv.rms_norm, x, {1.5})
  fails("rms_norm: eps must be >= 0", qkv.rms_norm, x, 3, nil, -1)
  fails("rms_norm: unknown option 'bias'", qkv.rms_norm, x, 3, {bias = qkv.ones(3)})
  fails("_rms_norm_backward: n = 4 is not the size of x (2, 3)'s last dims", qkv._rms_norm_backward, x, x, 4)
  fails("_rms_norm_backward: w (2,) must hold n = 3 elements", qkv._rms_norm_backward, x, x, 3, qkv.ones(2))
  fails("_rms_norm_backward: x (2, 3) and g (3,) must be float32 or float64 of one shape",
        qkv._rms_norm_backward, x, qkv.ones(3), 3)
  fails("_rms_norm_backward: eps must be >= 0", qkv._rms_norm_backward, x, x, 3, nil, -1)
end

---------------------------------------------------------------- dropout
TestDropout = {}

-- the mask is qkv.rand(x.shape) >= p from the generator's stream
function TestDropout:testMaskAndScale()
  for _, dt in ipairs{"float32", "float64"} do
    local x = rand({4, 50}, dt)
    qkv.seed(123)
    local out = qkv.dropout(x, 0.3)
    qkv.seed(123)
    local keep = qkv.rand({4, 50}, dt):ge(0.3)
    qkv.test.assertClose(out, x:masked_fill(keep:logical_not(), 0) / 0.7)
    lu.assertEquals(out.dtype, dt)
  end
  local x = qkv.ones(3)
  lu.assertTrue(rawequal(qkv.dropout(x, 0.5, false), x), "not training: x itself")
  lu.assertTrue(rawequal(qkv.dropout(x, 0), x), "p = 0: x itself")
  lu.assertEquals(qkv.dropout(x, 1):tolist(), {0, 0, 0})
  fails("dropout: p must be in [0, 1]", qkv.dropout, x, 1.5)
  fails("dropout: p must be in [0, 1]", qkv.dropout, x, 0 / 0)
  fails("dropout: x must be float32 or float64, got int64", qkv.dropout, qkv.tensor({1}, "int64"), 0.5)
end

-- x times the mask, with or without autograd: PyTorch's F.dropout([1, 2, inf],
-- 1.0, True) is [0, 0, nan] (input * 0), and a dropped inf or NaN is NaN at any
-- p; where x required grad, masked_fill gave 0 for them, hiding the overflow
function TestDropout:testNonFiniteDroppedIsNaN()
  local inf = math.huge
  local function x_of(g)
    local x = qkv.tensor({1, 2, inf, -inf, 0 / 0, inf, 3, 4}, "float64")
    return g and x:requires_grad_() or x
  end
  for _, g in ipairs{false, true} do
    local y = qkv.dropout(x_of(g), 1, true)
    near(flat(y), {0, 0, 0 / 0, 0 / 0, 0 / 0, 0 / 0, 0, 0}, 0, "p = 1, grad " .. tostring(g))
  end
  qkv.seed(3)
  local want = flat(qkv.dropout(x_of(false), 0.5, true))
  qkv.seed(3)
  local x = x_of(true)
  local y = qkv.dropout(x, 0.5, true)
  near(flat(y), want, 0, "p = 0.5 with grad as without")
  y:sum():backward()
  qkv.seed(3)
  local keep = flat(qkv.rand({8}, "float64"):ge(0.5))
  for i = 1, 8 do lu.assertEquals(x.grad:tolist()[i], keep[i] and 2 or 0, "grad " .. i) end
  local dropped = 0
  for i = 3, 6 do if not keep[i] then dropped = dropped + 1; lu.assertTrue(want[i] ~= want[i]) end end
  lu.assertTrue(dropped > 0, "the seed drops a non-finite element")
end

---------------------------------------------------------------- modules
TestModules = {}

function TestModules:testLayerNorm()
  local ln = qkv.nn.LayerNorm({3, 4})
  lu.assertEquals(tostring(ln), "LayerNorm((3, 4), eps=1e-05, elementwise_affine=true)")
  lu.assertEquals(ln.weight:tolist()[1], {1, 1, 1, 1})
  lu.assertEquals(ln:nparams(), 24)
  local x = rand({2, 3, 4}, "float32")
  ln.weight, ln.bias = rand({3, 4}, "float32"), rand({3, 4}, "float32")
  qkv.test.assertClose(ln(x), qkv.layer_norm(x, {3, 4}, ln.weight, ln.bias, 1e-5))
  lu.assertNil(qkv.nn.LayerNorm(4, {elementwise_affine = false}).weight)
  lu.assertNil(qkv.nn.LayerNorm(4, {bias = false}).bias)
  lu.assertEquals(tostring(qkv.nn.LayerNorm(4)), "LayerNorm((4,), eps=1e-05, elementwise_affine=true)")
  fails("LayerNorm: normalized_shape[1] must be a positive integer, got 0", qkv.nn.LayerNorm, 0)
  fails("LayerNorm: dtype must be 'float32', 'float64', 'float16' or 'bfloat16', got int64", qkv.nn.LayerNorm, 4, {dtype = "int64"})
end

function TestModules:testRMSNorm()
  local m = qkv.nn.RMSNorm({3, 4})
  lu.assertEquals(tostring(m), "RMSNorm((3, 4), eps=None, elementwise_affine=true)")
  lu.assertEquals(m.weight:tolist()[1], {1, 1, 1, 1})
  lu.assertEquals(m:nparams(), 12)
  local x = rand({2, 3, 4}, "float32")
  m.weight = rand({3, 4}, "float32")
  qkv.test.assertClose(m(x), qkv.rms_norm(x, {3, 4}, m.weight))
  local e = qkv.nn.RMSNorm(4, {eps = 1e-3, elementwise_affine = false})
  lu.assertNil(e.weight)
  lu.assertEquals(tostring(e), "RMSNorm((4,), eps=0.001, elementwise_affine=false)")
  qkv.test.assertClose(e(x), qkv.rms_norm(x, 4, nil, 1e-3))
  lu.assertEquals(qkv.nn.RMSNorm(4, {dtype = "float64"}).weight.dtype, "float64")
  fails("RMSNorm: normalized_shape[1] must be a positive integer, got 0", qkv.nn.RMSNorm, 0)
  fails("RMSNorm: eps must be a number, got string", qkv.nn.RMSNorm, 4, {eps = "x"})
  fails("RMSNorm: unknown option 'bias'", qkv.nn.RMSNorm, 4, {bias = false})
end

function TestModules:testDropoutTrainEval()
  local seq = qkv.nn.Sequential(qkv.nn.Linear(4, 4), qkv.nn.Dropout(0.5))
  lu.assertTrue(seq[2].training)
  local x = qkv.ones(8, 4)
  qkv.seed(9)
  local y = seq(x)
  qkv.seed(9)
  local keep = qkv.rand(8, 4):ge(0.5)
  qkv.test.assertClose(y, seq[1](x):masked_fill(keep:logical_not(), 0) * 2)
  lu.assertTrue(rawequal(seq:eval(), seq))
  lu.assertFalse(seq.training)
  lu.assertFalse(seq[2].training)
  qkv.test.assertClose(seq(x), seq[1](x))
  seq:train()
  lu.assertTrue(seq[2].training)
  lu.assertEquals(tostring(seq[2]), "Dropout(p=0.5)")
  fails("Dropout: p must be a number in [0, 1], got 2", qkv.nn.Dropout, 2)
  -- PyTorch's Dropout(0.5, True) zeros x itself; qkv has no inplace, so
  -- it is an error where the True was ignored and x kept
  fails("Dropout: takes 1 argument, got 2 (argument #2 is a boolean): PyTorch's inplace",
        qkv.nn.Dropout, 0.5, true)
  fails("train: mode must be a boolean, got number", function() return seq:train(1) end)
end

-- nn.GELU(approximate): PyTorch's option, where "tanh" was ignored and gave
-- the exact GELU, 0.8413447 at x = 1 for PyTorch's 0.8411920
function TestModules:testGELUApproximate()
  local x = qkv.tensor({-3, -1, 0.5, 1, 2}, "float64"):requires_grad_()
  local m = qkv.nn.GELU("tanh")
  local y = m(x)
  y:sum():backward()
  -- torch.nn.GELU('tanh') in float64: its values and their gradient
  near(flat(y), {-0.0036373920817729943, -0.15880800939172324, 0.34571400982514394,
                 0.8411919906082768, 1.954597694087775}, 1e-14, "GELU('tanh')")
  near(flat(x.grad), {-0.011584166630969648, -0.08296408384578252, 0.8673699035346424,
                      1.0829640838457826, 1.0860992566236183}, 1e-14, "GELU('tanh') grad")
  lu.assertEquals(tostring(m), "GELU(approximate='tanh')")
  -- PyTorch's keyword as an option; bfloat16 computed in float32: 0.8398 as PyTorch's
  near(flat(qkv.nn.GELU({approximate = "tanh"})(qkv.tensor({1}, "bfloat16")):to("float64")),
       {0.83984375}, 0, "GELU('tanh') bfloat16")
  near(flat(qkv.nn.GELU("none")(qkv.tensor({1}, "float64"))), {0.8413447460685429}, 1e-15, "none")
  lu.assertEquals(tostring(qkv.nn.GELU()), "GELU()")
  fails('GELU: approximate must be "none" or "tanh", got "tan"', qkv.nn.GELU, "tan")
  fails("GELU: unknown option 'approximat'", qkv.nn.GELU, {approximat = "tanh"})
  fails("GELU: takes one argument", qkv.nn.GELU, "tanh", 1)
end

function TestModules:testEmbedding()
  qkv.seed(4)
  local e = qkv.nn.Embedding(10, 3)
  qkv.seed(4)
  qkv.test.assertTensorEqual(e.weight, qkv.randn(10, 3))
  local ids = qkv.tensor({{1, 10}, {3, 3}}, "int64")
  qkv.test.assertTensorEqual(e(ids), qkv.embedding(ids, e.weight))
  lu.assertEquals(tostring(e), "Embedding(10, 3)")
  fails("Embedding: embedding_dim must be a positive integer, got 0", qkv.nn.Embedding, 3, 0)
  fails("Embedding: embedding: index 11 is out of range for dim 1 of size 10",
        function() return e(qkv.tensor({11}, "int64")) end)
end

-- with bias = true each projection adds its bias, as PyTorch's modules
function TestModules:testAttentionBias()
  qkv.seed(2)
  local sa = qkv.nn.SelfAttention(6, 4, {bias = true})
  lu.assertEquals(sa:nparams(), 3 * (6 * 4 + 4))
  local x = rand({5, 6}, "float32")
  local Q = qkv.project(x, sa.W_Q, sa.b_Q)
  local K = qkv.project(x, sa.W_K, sa.b_K)
  local V = qkv.project(x, sa.W_V, sa.b_V)
  qkv.test.assertClose(sa(x), (qkv.attention(Q, K, V)))
  local mha = qkv.nn.MultiHeadAttention(6, 2, {bias = true})
  lu.assertEquals(mha:nparams(), 4 * (36 + 6))
  lu.assertEquals(tostring(mha), "MultiHeadAttention(d_model=6, h=2, bias=true)")
  local out = qkv.attention(qkv.heads(qkv.project(x, mha.W_Q, mha.b_Q), 2),
                            qkv.heads(qkv.project(x, mha.W_K, mha.b_K), 2),
                            qkv.heads(qkv.project(x, mha.W_V, mha.b_V), 2))
  qkv.test.assertClose(mha(x), qkv.project(qkv.merge(out), mha.W_O, mha.b_O))
  lu.assertNil(qkv.nn.MultiHeadAttention(6, 2).b_Q, "no bias by default, as the documents")
  fails("SelfAttention: unknown option 'bais'", qkv.nn.SelfAttention, 4, 2, {bais = true})
  fails("MultiHeadAttention: option 'bias' must be a boolean, got number",
        qkv.nn.MultiHeadAttention, 4, 2, {bias = 1})
end

os.exit(lu.LuaUnit.run(), true)
