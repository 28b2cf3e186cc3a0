-- test_edges_float64.lua: docs/numerics.md's edge cases, continued.
-- (e) every primitive, the fused path, matmul, the reductions and the
-- qkv.nn modules in float64 agree with the float64 references of
-- tests/helpers/attn_ref.lua to 1e-12 and stay float64 -- also on data that
-- float32 cannot tell apart, so a silent round trip through float32
-- fails; mixed float32/float64 promote or raise as docs/numerics.md says.
-- (f) very large and very small magnitudes: softmax of ±1e30 and ±3e38,
-- scores that overflow float32, subnormals, underflowing exponentials.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")

math.randomseed(20250707)
local inf = math.huge
local T, close, exact, fails = R.T, R.close, R.exact, R.fails
local F64 = "float64"

local function rt(s, dt, lo, hi) return (R.mk(s, dt or F64, lo, hi)) end
local function is64(x, what) lu.assertEquals(x.dtype, F64, what) return x end
local function nonan(x, what)
  lu.assertEquals(x:ne(x):sum():item(), 0, (what or "") .. ": NaN")
end

-- both attention paths in float64 against the reference
local function attend64(Q, K, V, opts, what)
  opts = opts or {}
  local ro = {scale = opts.scale, causal = opts.causal, mask = opts.mask and T(opts.mask)}
  local rout, rw = R.attention(T(Q), T(K), T(V), ro)
  local out, w = qkv.attention(Q, K, V, opts)
  close(is64(out, what), rout, 1e-12, what .. ": out")
  close(is64(w, what), rw, 1e-12, what .. ": weights")
  local f = {weights = false}
  for k, v in pairs(opts) do f[k] = v end
  close(is64(qkv.attention(Q, K, V, f), what), rout, 1e-12, what .. ": fused")
  return out, w
end

---------------------------------------------------------------- (e) float64

TestFloat64 = {}

function TestFloat64:testPrimitives()
  local x, W, b = rt({2, 3, 5}), rt({5, 4}), rt({4})
  local X, WR, B = T(x), T(W), T(b)
  close(is64(qkv.project(x, W, b)), R.project(X, WR, B), 1e-12, "project")
  local Q, K = rt({2, 3, 4}), rt({2, 6, 4})
  close(is64(qkv.scores(Q, K)), R.scores(T(Q), T(K)), 1e-12, "scores")
  close(is64(qkv.scores(Q, K, {scale = 0.3})), R.scores(T(Q), T(K), 0.3), 1e-12, "scores, scale")
  local S, m = qkv.scores(Q, K), qkv.padding({6, 2})
  exact(is64(qkv.mask(S, m)), R.mask(T(S), T(m)), "mask")
  exact(is64(qkv.mask(S, m, -7.25)), R.mask(T(S), T(m), -7.25), "mask, fill")
  for _, d in ipairs{1, 2, -1} do
    close(is64(qkv.softmax(S, d)), R.softmax(T(S), d), 1e-12, "softmax dim " .. d)
  end
  local h = rt({2, 5, 8})
  exact(is64(qkv.heads(h, 4)), R.heads(T(h), 4), "heads")
  exact(is64(qkv.merge(qkv.heads(h, 4))), T(h), "merge")
  -- gelu element by element: its tiny negative values count too
  local g = qkv.tensor({-30, -10, -8, -5, -3, -1e-8, 0, 1e-8, 0.5, 3, 40}, F64)
  for i, v in ipairs(is64(qkv.gelu(g)):tolist()) do
    local r = R.gelu1(g[i])
    lu.assertAlmostEquals(v, r, 1e-12 * math.abs(r), "gelu(" .. g[i] .. ")")
  end
  local W1, b1, W2, b2 = rt({5, 6}), rt({6}), rt({6, 3}), rt({3})
  close(is64(qkv.align(x, W, b)), R.project(X, WR, B), 1e-12, "align linear")
  local hid = R.gelu(R.project(X, T(W1), T(b1)))
  close(is64(qkv.align(x, {W1, b1, W2, b2})), R.project(hid, T(W2), T(b2)), 1e-12, "align mlp")
  local A, Bm = rt({3, 2, 4}), rt({4, 5})
  close(is64(qkv.matmul(A, Bm)), R.matmul(T(A), T(Bm)), 1e-12, "matmul")
end

-- plain-loop reductions of a reference array along its last dim
local function reduce_ref(X, op)
  local n, out = X.shape[#X.shape], {}
  for r = 0, #X.data // n - 1 do
    local s, mx, mn = 0, -inf, inf
    for j = 1, n do
      local v = X.data[r * n + j]
      s, mx, mn = s + v, math.max(mx, v), math.min(mn, v)
    end
    local mean, ss = s / n, 0
    for j = 1, n do ss = ss + (X.data[r * n + j] - mean) ^ 2 end
    local v = ({sum = s, mean = mean, max = mx, min = mn, var = ss / (n - 1),
                std = math.sqrt(ss / (n - 1))})[op]
    out[r + 1] = v
  end
  local shape = R.copy(X.shape)
  shape[#shape] = nil
  return {shape = shape, data = out}
end

function TestFloat64:testReductions()
  local x = rt({3, 7}, F64, -1e3, 1e3)
  for _, op in ipairs{"sum", "mean", "max", "min", "var", "std"} do
    local y = x[op](x, 2)
    close(is64(y), reduce_ref(T(x), op), 1e-12, op)
    lu.assertAlmostEquals(is64(x[op](x:view(-1))):item(),
                          reduce_ref(T(x:view(-1)), op).data[1], 1e-9, op .. " over all")
  end
end

function TestFloat64:testAttentionBothPaths()
  local Q, K, V = rt({2, 5, 8}), rt({2, 7, 8}), rt({2, 7, 3})
  attend64(Q, K, V, {}, "plain")
  attend64(Q, K, V, {mask = qkv.padding({3, 7})}, "padding")
  attend64(Q, K, V, {causal = true}, "causal")
  attend64(Q, K, V, {scale = 0.05, causal = true, mask = qkv.causal(5, 7)}, "scale, mask, causal")
  -- past the fused kernel's tiles
  attend64(rt({40, 16}), rt({200, 16}), rt({200, 8}), {causal = true}, "40 x 200 causal")
end

-- scores that differ by ~1e-9 relative: float32 sees equal keys and
-- uniform weights, float64 does not. Any float32 step on the way (inputs,
-- scores, exp, sums) makes these weights equal.
function TestFloat64:testNoSilentFloat32()
  local eps = 1e-9
  local K = qkv.tensor({{1}, {1 + eps}, {1 + 2 * eps}}, F64)
  local Q, V = qkv.tensor({{1e6}}, F64), qkv.tensor({{0}, {1}, {2}}, F64)
  lu.assertEquals(K:to("float32"):to(F64)[2][1], 1, "float32 cannot tell the keys apart")
  local _, w = attend64(Q, K, V, {scale = 1}, "keys 1e-9 apart")
  -- softmax of (0, 1e-3, 2e-3): the weights grow by ~1e-3 each
  lu.assertTrue(w[1][3] - w[1][1] > 6e-4, "weights " .. tostring(w))
  local p = qkv.project(qkv.tensor({{1 + 2 ^ -30}}, F64), qkv.tensor({{2 ^ 30}}, F64))
  lu.assertEquals(p[1][1] - 2 ^ 30, 1, "project keeps float64")
  local s = qkv.softmax(qkv.tensor({0, 1e-9}, F64))
  lu.assertTrue(s[2] > s[1], "softmax keeps float64")
  local g = qkv.gelu(qkv.tensor({1 + eps}, F64)) - qkv.gelu(qkv.tensor({1}, F64))
  lu.assertAlmostEquals(g[1], eps * 1.0833, 1e-12, "gelu keeps float64")
  local m = qkv.tensor({{1, 2 ^ -30}}, F64):sum(2)
  lu.assertEquals(m[1] - 1, 2 ^ -30, "sum keeps float64")
end

-- a MultiHeadAttention in float64 (m:double()) runs in float64; load
-- keeps a module's dtype, as load_state_dict does
function TestFloat64:testModules()
  qkv.seed(5)
  local m = qkv.nn.MultiHeadAttention(8, 2)
  local sd = {}
  for name, t in pairs(m:state_dict()) do sd[name] = t:to(F64) end
  m:load(sd)
  lu.assertEquals(m.W_Q.dtype, "float32")
  lu.assertTrue(rawequal(m:double(), m))
  m:load(sd)
  local x = rt({2, 4, 8})
  local pad = qkv.padding({4, 1})
  local out, w = m(x, {mask = pad})
  local X, H = T(x), function(t) return R.heads(t, 2) end
  local Q, K, V = H(R.project(X, T(m.W_Q))), H(R.project(X, T(m.W_K))), H(R.project(X, T(m.W_V)))
  local ro, rw = R.attention(Q, K, V, {mask = T(pad:unsqueeze(2))})
  close(is64(out), R.project(R.merge(ro), T(m.W_O)), 1e-12, "MHA out")
  close(is64(w), rw, 1e-12, "MHA weights")
  close(is64(m(x, {mask = pad, weights = false})), T(out), 1e-12, "MHA fused")
  local lin = qkv.nn.Linear(8, 3, {dtype = F64})
  close(is64(lin(x)), R.project(X, T(lin.weight:t()), T(lin.bias)), 1e-12, "Linear float64")
  -- float32 weights do not take float64 input silently
  fails({"project", "float64", "float32"}, qkv.nn.MultiHeadAttention(8, 2), x)
end

---------------------------------------------------------------- mixed dtypes

TestPromotion = {}

function TestPromotion:testArithmeticPromotes()
  local a, b = qkv.tensor({1.5, -2}), qkv.tensor({0.25, 1e-10}, F64)
  for _, f in ipairs{function() return a + b end, function() return b - a end,
                     function() return a * b end, function() return a / b end,
                     function() return qkv.maximum(a, b) end} do
    is64(f(), "float32 with float64")
  end
  lu.assertEquals((a + b)[2], -2 + 1e-10, "the sum is float64's")
  lu.assertEquals((a * 0.1).dtype, "float32", "a Lua number does not widen")
  lu.assertEquals((b * 0.1).dtype, F64)
  lu.assertEquals(qkv.mask(rt({2, 2}), qkv.tensor{1, 0}).dtype, F64, "mask keeps S's dtype")
end

-- matrix arguments of one call must share a float dtype (as PyTorch's matmul)
function TestPromotion:testMatrixArgumentsRaise()
  local a, b = qkv.ones(2, 2), qkv.ones(2, 2, F64)
  fails({"matmul", "float32", "float64"}, qkv.matmul, a, b)
  fails({"project", "float64", "float32"}, qkv.project, b, a)
  fails({"project", "b is float32"}, qkv.project, b, b, qkv.ones(2))
  fails({"scores", "float32", "float64"}, qkv.scores, a, b)
  fails({"align", "float64", "float32"}, qkv.align, b, {a, qkv.ones(2), a, qkv.ones(2)})
  for _, w in ipairs{true, false} do
    fails({"attention", "K is float64"}, qkv.attention, a, b, a, {weights = w})
    fails({"attention", "V is float64"}, qkv.attention, a, a, b, {weights = w})
    fails({"attention", "int64"}, qkv.attention, a:to("int64"), a:to("int64"), a:to("int64"),
          {weights = w})
  end
end

-- softmax and gelu of integers and bools give float32 (PyTorch raises);
-- a float mask counts nonzero as kept (PyTorch's float attn_mask is added)
function TestPromotion:testIntegersAndMasks()
  close(qkv.softmax(qkv.tensor({1, 2}, "int64")), R.softmax({shape = {2}, data = {1, 2}}), nil, "int64")
  lu.assertEquals(qkv.softmax(qkv.tensor({true, false})).dtype, "float32")
  lu.assertEquals(qkv.gelu(qkv.tensor({1, 2}, "int64")).dtype, "float32")
  local Q, K, V = rt({2, 3}), rt({4, 3}), rt({4, 2})
  -- an integer mask keeps its non-zero keys; a float one holds 0 and 1
  -- alone (0.5 or -2 might be PyTorch's additive mask: an error)
  local keep = {shape = {4}, data = {true, false, true, true}}
  local out = attend64(Q, K, V, {mask = qkv.tensor({1, 0, 3, -2}, "int64")}, "int64 0/nonzero mask")
  close(out, R.attention(T(Q), T(K), T(V), {mask = keep}), 1e-12, "nonzero is kept")
  out = attend64(Q, K, V, {mask = qkv.tensor({1, 0, 1, 1}, F64)}, "float64 0/1 mask")
  close(out, R.attention(T(Q), T(K), T(V), {mask = keep}), 1e-12, "1 is kept")
  R.fails("attention: mask is float64 (4,) with values other than 0 and 1 (from -2.0 to 1.0)",
          qkv.attention, Q, K, V, {mask = qkv.tensor({1, 0, 0.5, -2}, F64)})
end

---------------------------------------------------------------- (f) magnitudes

TestMagnitudes = {}

function TestMagnitudes:testSoftmaxHuge()
  for _, dt in ipairs{"float32", F64} do
    local x = qkv.tensor({{1e30, -1e30, 0}, {1e30, 1e30, -1e30}, {-1e30, -1e30, -1e30},
                          {3e38, -3e38, 0}, {-3e38, -inf, -3e38}}, dt)
    local y = qkv.softmax(x)
    close(y, {shape = {5, 3}, data = {1, 0, 0, 0.5, 0.5, 0, 1 / 3, 1 / 3, 1 / 3,
                                      1, 0, 0, 0.5, 0, 0.5}}, nil, dt .. " softmax ±1e30")
    nonan(y, dt)
  end
end

function TestMagnitudes:testSoftmaxTiny()
  for _, dt in ipairs{"float32", F64} do
    local x = qkv.tensor({{1e-45, 0}, {1e-30, -1e-30}, {0, -200}, {0, -1000}}, dt)
    close(qkv.softmax(x), R.softmax(T(x)), nil, dt .. " tiny and underflowing")
  end
  -- e^-100 is subnormal in float32 and still there
  local y = qkv.softmax(qkv.tensor({0, -100}))[2]
  lu.assertTrue(y > 0 and math.abs(y - math.exp(-100)) < 0.05 * math.exp(-100), tostring(y))
end

-- q k beyond float32's range: inf scores, rows of NaN (as PyTorch) in
-- float32 in both paths; float64 holds the same numbers
function TestMagnitudes:testScoresOverflowFloat32()
  local Q = {{1e20, 0}, {0, 1}}
  local K = {{1e20, 0}, {0, 1}, {-1e20, 1}}
  local V = {{1, 2}, {3, 4}, {5, 6}}
  local t = function(d, dt) return qkv.tensor(d, dt) end
  local out, w = qkv.attention(t(Q), t(K), t(V), {scale = 1})
  local f = qkv.attention(t(Q), t(K), t(V), {scale = 1, weights = false})
  for j = 1, 3 do lu.assertNaN(w[1][j], "float32 weights, row 1") end
  for j = 1, 2 do lu.assertNaN(out[1][j]); lu.assertNaN(f[1][j], "fused") end
  nonan(out[2], "row 2"); close(f, T(out), nil, "fused = composed")
  -- a scale of 0 does not hide it: inf * 0 is NaN in both paths
  out = qkv.attention(t(Q), t(K), t(V), {scale = 0})
  f = qkv.attention(t(Q), t(K), t(V), {scale = 0, weights = false})
  lu.assertNaN(out[1][1], "scale 0"); nonan(out[2], "scale 0, row 2")
  close(f, T(out), nil, "scale 0: fused = composed")
  out = attend64(t(Q, F64), t(K, F64), t(V, F64), {scale = 1}, "float64 1e40 scores")
  exact(out[1], {shape = {2}, data = {1, 2}}, "float64: one-hot on key 1")
end

-- subnormal inputs: scores underflow to 0, weights uniform, nothing NaN
function TestMagnitudes:testSubnormalInputs()
  local Q, K = qkv.tensor({{1e-40, 0}}), qkv.tensor({{1e-40, 0}, {0, 1e-40}})
  local V = qkv.tensor({{1, 2}, {3, 4}})
  local out, w = qkv.attention(Q, K, V)
  exact(w, {shape = {1, 2}, data = {0.5, 0.5}}, "uniform")
  exact(qkv.attention(Q, K, V, {weights = false}), T(out), "fused")
end

-- huge scale on ordinary data: one-hot rows in both paths and dtypes
function TestMagnitudes:testHugeScale()
  for _, dt in ipairs{"float32", F64} do
    local Q, K, V = rt({4, 3}, dt), rt({6, 3}, dt), rt({6, 2}, dt)
    for _, s in ipairs{1e30, -1e30} do
      local out, w = qkv.attention(Q, K, V, {scale = s})
      nonan(w, dt .. " scale " .. s)
      close(w, (select(2, R.attention(T(Q), T(K), T(V), {scale = s}))), nil, dt .. " scale " .. s)
      close(qkv.attention(Q, K, V, {scale = s, weights = false}), T(out), nil, "fused")
      lu.assertEquals(w:max(2):sum():item(), 4, "one-hot rows")
    end
  end
end

-- float32 sums accumulate in double: the mean of two 3e38 is 3e38
function TestMagnitudes:testFloat32SumsInDouble()
  local x = qkv.tensor({3e38, 3e38})
  lu.assertEquals(x:sum():item(), inf, "the float32 sum overflows")
  lu.assertAlmostEquals(x:mean():item(), 3e38, 1e32, "the mean does not")
  lu.assertEquals(x:var():item(), 0)
end
