-- test_primitives.lua: the attention primitives of README "Attention
-- primitives" (project, scores, mask, causal, padding, softmax, heads,
-- merge, gelu, align) against float64 plain-loop references written in Lua
-- (tests/helpers/attn_ref.lua) on tolist() data, random shapes and data from a
-- fixed-seed Lua RNG; and their bad-input errors.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")

math.randomseed(20250612)
local inf, nan = math.huge, 0 / 0
local T, close, exact, fails, sstr = R.T, R.close, R.exact, R.fails, R.sstr
local DT = {"float32", "float64"}

local function rshape(nd, lo, hi)
  local s = {} for i = 1, nd do s[i] = math.random(lo or 1, hi or 4) end return s
end
local function cat(a, ...) local r = R.copy(a) for _, v in ipairs{...} do r[#r + 1] = v end return r end
local function assertShape(x, s, what) lu.assertEquals(sstr(R.shape(x)), sstr(s), what) end
-- a random bool tensor of a shape, with its reference
local function rbool(shape, p)
  local d = {} for i = 1, R.numel(shape) do d[i] = math.random() < (p or 0.6) end
  local x = qkv.tensor(R.nest(d, shape))
  lu.assertEquals(x.dtype, "bool")
  return x, T(x)
end

---------------------------------------------------------------- project

TestProject = {}

function TestProject:testWithAndWithoutBias()
  for _, dt in ipairs(DT) do
    for _ = 1, 5 do
      local din, dout = math.random(1, 6), math.random(1, 6)
      local x, X = R.mk(cat(rshape(math.random(1, 3)), din), dt)
      local W, WR = R.mk({din, dout}, dt)
      local b, B = R.mk({dout}, dt)
      local what = dt .. " x " .. sstr(X.shape) .. " W " .. sstr(WR.shape)
      local y = qkv.project(x, W)
      lu.assertEquals(y.dtype, dt)
      close(y, R.project(X, WR), nil, what)
      close(qkv.project(x, W, b), R.project(X, WR, B), nil, what .. " + b")
    end
  end
end

function TestProject:testOneDimensionalX()
  for _, dt in ipairs(DT) do
    local x, X = R.mk({5}, dt)
    local W, WR = R.mk({5, 3}, dt)
    local b, B = R.mk({3}, dt)
    close(qkv.project(x, W), R.project(X, WR), nil, dt .. " 1-D")
    close(qkv.project(x, W, b), R.project(X, WR, B), nil, dt .. " 1-D + b")
  end
end

function TestProject:testNonContiguous()
  for _, dt in ipairs(DT) do
    local x = R.mk({2, 5, 4}, dt)                    -- x:transpose(1, 2) is (5, 2, 4)
    local w, WR = R.mk({3, 4}, dt)                   -- w:t() is (4, 3)
    local b = R.mk({3, 5}, dt)                       -- b:select(2, 2) is (3,), stride 5
    local xt, Wt = x:transpose(1, 2), w:t()
    lu.assertFalse(xt:is_contiguous())
    lu.assertEquals(T(Wt).data, R.tlast(WR).data)
    close(qkv.project(xt, Wt), R.project(T(xt), T(Wt)), nil, dt .. " transposed x and W")
    close(qkv.project(xt, Wt, b:select(2, 2)), R.project(T(xt), T(Wt), T(b:select(2, 2))), nil, dt .. " strided b")
  end
end

-- a half project's bias goes in before the one rounding, as PyTorch's
-- addmm (linear): float16 on the CPU, whose products are float32 sums of
-- the converted operands, equals the float32 product plus the bias rounded
-- once, and differs from rounding the product first (two roundings)
function TestProject:testHalfBiasRoundsOnce()
  qkv.seed(3)
  local x, W = qkv.randn(64, 48):half(), qkv.randn(48, 32):half()
  local b = (qkv.randn(32) * 100):half()        -- a large bias: the roundings differ
  local got = qkv.project(x, W, b):float()
  local prod = x:float():matmul(W:float())
  local once = (prod + b:float()):half():float()
  local twice = (prod:half():float() + b:float()):half():float()
  lu.assertEquals(got:tolist(), once:tolist())
  lu.assertTrue((once - twice):abs():max():item() > 0, "the two roundings differ here")
  -- nn.Linear and F.linear take the same path
  local lin = qkv.nn.Linear(48, 32):half()
  local want = (x:float():matmul(lin.weight:float():t()) + lin.bias:float()):half()
  lu.assertEquals(lin(x):tolist(), want:tolist())
end

---------------------------------------------------------------- scores

TestScores = {}

function TestScores:testDefaultScale()
  for _, dt in ipairs(DT) do
    for _ = 1, 4 do
      local d = math.random(1, 8)
      local Q, QR = R.mk({math.random(1, 6), d}, dt)
      local K, KR = R.mk({math.random(1, 6), d}, dt)
      local S = qkv.scores(Q, K)
      lu.assertEquals(S.dtype, dt)
      close(S, R.scores(QR, KR, 1 / math.sqrt(d)), nil, dt .. " d_k " .. d)
    end
  end
end

function TestScores:testCustomScale()
  for _, dt in ipairs(DT) do
    local Q, QR = R.mk({4, 5}, dt)
    local K, KR = R.mk({3, 5}, dt)
    for _, s in ipairs{0.3, 1, -2, 0, 1e-3, 7} do
      close(qkv.scores(Q, K, {scale = s}), R.scores(QR, KR, s), nil, dt .. " scale " .. s)
    end
    close(qkv.scores(Q, K, {}), R.scores(QR, KR), nil, dt .. " empty options")
  end
end

function TestScores:testBatchBroadcast()
  local cases = {                                    -- Q batch, K batch
    {{2, 3}, {}}, {{2, 3}, {3}}, {{2, 3}, {2, 1}}, {{1, 3}, {2, 1}}, {{}, {2, 3}},
    {{4}, {4}}, {{2, 1, 3}, {5, 1}},
  }
  for _, dt in ipairs(DT) do
    for _, c in ipairs(cases) do
      local d, nq, nk = math.random(1, 6), math.random(1, 5), math.random(1, 5)
      local Q, QR = R.mk(cat(c[1], nq, d), dt)
      local K, KR = R.mk(cat(c[2], nk, d), dt)
      local what = dt .. " Q " .. sstr(QR.shape) .. " K " .. sstr(KR.shape)
      close(qkv.scores(Q, K), R.scores(QR, KR), nil, what)
    end
  end
end

function TestScores:testTransposedViews()
  for _, dt in ipairs(DT) do
    local x, _ = R.mk({6, 4}, dt)                    -- (d, n_q): x:t() is Q
    local y, _ = R.mk({6, 5}, dt)                    -- (d, n_k): y:t() is K
    local Q, K = x:t(), y:t()
    lu.assertFalse(Q:is_contiguous())
    close(qkv.scores(Q, K), R.scores(T(Q), T(K)), nil, dt .. " x:t(), y:t()")
    close(qkv.scores(Q, K:contiguous()), R.scores(T(Q), T(K)), nil, dt .. " x:t(), K")
    close(qkv.scores(Q:contiguous(), K), R.scores(T(Q), T(K)), nil, dt .. " Q, y:t()")
    -- batched: Q (B, n_q, d) from (B, d, n_q); K (B, n_k, d) from (n_k, B, d)
    local a = R.mk({2, 3, 4}, dt)
    local b = R.mk({5, 2, 3}, dt)
    local Qb, Kb = a:transpose(2, 3), b:transpose(1, 2)
    lu.assertFalse(Kb:is_contiguous())
    close(qkv.scores(Qb, Kb, {scale = 0.5}), R.scores(T(Qb), T(Kb), 0.5), nil, dt .. " batched views")
    -- an expanded K (stride 0 over the batch)
    local k1 = R.mk({1, 5, 3}, dt)
    local Ke = k1:expand(2, 5, 3)
    close(qkv.scores(Qb, Ke), R.scores(T(Qb), T(Ke)), nil, dt .. " expanded K")
  end
end

---------------------------------------------------------------- mask

TestMask = {}

function TestMask:testPadding()
  for _, dt in ipairs(DT) do
    local B, nq, nk = 3, 4, 5
    local S, SR = R.mk({B, nq, nk}, dt)
    local lengths = {5, 2, 0}
    local m = qkv.padding(lengths)
    local got = qkv.mask(S, m)
    lu.assertEquals(got.dtype, dt)
    close(got, R.mask(SR, R.padding(lengths)), nil, dt .. " padding (B, 1, n)")
    -- on (B, H, n_q, n_k) scores the padding mask takes an extra dim
    local S4, S4R = R.mk({B, 2, nq, nk}, dt)
    close(qkv.mask(S4, m:unsqueeze(2)), R.mask(S4R, {shape = {B, 1, 1, nk}, data = T(m).data}),
          nil, dt .. " padding (B, 1, 1, n)")
  end
end

function TestMask:testCausal()
  for _, dt in ipairs(DT) do
    for _, c in ipairs{{4, 4}, {2, 5}, {5, 2}, {1, 1}} do
      local nq, nk = c[1], c[2]
      for _, lead in ipairs{{}, {2}, {2, 3}} do
        local S, SR = R.mk(cat(lead, nq, nk), dt)
        close(qkv.mask(S, qkv.causal(nq, nk)), R.mask(SR, R.causal(nq, nk)), nil,
              dt .. " causal " .. sstr(SR.shape))
      end
    end
  end
end

function TestMask:testPerHead()
  for _, dt in ipairs(DT) do
    local S, SR = R.mk({2, 3, 4, 5}, dt)
    local m, M = rbool({2, 3, 4, 5})
    close(qkv.mask(S, m), R.mask(SR, M), nil, dt .. " per-head")
    local mh, MH = rbool({3, 1, 5})                  -- per head, broadcast over batch and rows
    close(qkv.mask(S, mh), R.mask(SR, MH), nil, dt .. " (H, 1, n_k)")
  end
end

-- a mask of 0 and 1 in any dtype is the bool one; an integer mask keeps
-- its non-zero places; a float one holds 0 and 1 alone (below)
function TestMask:testNumericMasksAndFill()
  local S, SR = R.mk({3, 4}, "float32")
  local d = {1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1}
  local ref = {shape = {3, 4}, data = d}
  for _, mdt in ipairs{"float32", "float64", "float16", "bfloat16", "int64", "int32"} do
    local m = qkv.tensor(R.nest(d, {3, 4}), mdt)
    close(qkv.mask(S, m), R.mask(SR, ref), nil, mdt .. " 0/1 mask")
  end
  local di = {1, 0, 1, 1, 0, 0, 1, 0, 2, 1, 0, -1}
  close(qkv.mask(S, qkv.tensor(R.nest(di, {3, 4}), "int64")),
        R.mask(SR, {shape = {3, 4}, data = di}), nil, "int64 non-zero mask")
  local m = qkv.tensor(R.nest(d, {3, 4}))
  for _, fill in ipairs{-1e9, 0, 5, inf} do
    local got = qkv.mask(S, m, fill)
    close(got, R.mask(SR, ref, fill), nil, "fill " .. fill)
  end
  -- a copy: S itself is unchanged
  exact(S, SR, "S after mask")
  local b = qkv.mask(S, m:ne(0))
  close(b, R.mask(SR, ref), nil, "bool mask from ne")
end

-- PyTorch's float attn_mask is added to the scores (0 where a query may
-- attend, -inf where not): read as qkv's mask (non-zero = may attend) it
-- would keep exactly the masked keys. So a float mask holds 0 and 1 alone,
-- and not only 0 (which masks every key to qkv, none to PyTorch).
function TestMask:testFloatMaskIsZeroOrOne()
  local S = R.mk({2, 3, 4}, "float32")
  local keep = qkv.tensor{{true, true, false, false}, {true, false, true, false},
                          {false, false, false, true}}
  for _, mdt in ipairs{"float32", "float64", "float16", "bfloat16"} do
    local additive = qkv.where(keep, 0.0, -inf):to(mdt)
    local msg = fails({"mask: mask is " .. mdt .. " (3, 4) with values other than 0 and 1",
                       "(from -inf to 0.0)", "m:eq(0)", "S + m"}, qkv.mask, S, additive)
    lu.assertStrContains(msg, "true (or 1) where a query may attend")
    -- its bool form is what it meant
    exact(qkv.mask(S, additive:eq(0)), T(qkv.mask(S, keep)), mdt .. " additive:eq(0)")
    fails({"mask: mask is " .. mdt .. " (3, 4) and all 0", "masks every key",
           "PyTorch's additive mask none"}, qkv.mask, S, qkv.zeros({3, 4}, mdt))
    for _, v in ipairs{0.5, 2, -1, nan, inf} do
      local m = keep:to(mdt):clone()
      m[{1, 1}] = v
      fails({"mask: mask is " .. mdt .. " (3, 4) with values other than 0 and 1"},
            qkv.mask, S, m)
    end
  end
  -- a bool or 0/1 mask, and an empty one, pass
  exact(qkv.mask(S, keep:double()), T(qkv.mask(S, keep)), "0/1 float64")
  lu.assertEquals(qkv.mask(qkv.zeros(0, 4), qkv.zeros(0, 4)).shape[1], 0)
end

---------------------------------------------------------------- causal, padding

TestCausal = {}

function TestCausal:testSquare()
  for n = 1, 6 do
    local m = qkv.causal(n)
    lu.assertEquals(m.dtype, "bool")
    exact(m, R.causal(n, n), "causal(" .. n .. ")")
    exact(qkv.causal(n, n), R.causal(n, n), "causal(n, n)")
  end
end

function TestCausal:testFewerQueriesAlignToTheEnd()
  exact(qkv.causal(2, 4), {shape = {2, 4}, data = {true, true, true, false, true, true, true, true}},
        "README causal(2, 4)")
  for _, c in ipairs{{1, 5}, {3, 7}, {4, 5}} do
    local m = qkv.causal(c[1], c[2])
    exact(m, R.causal(c[1], c[2]), "causal" .. sstr(c))
    local last = m[c[1]]                             -- the last query sees every key
    lu.assertEquals(last:sum():item(), c[2])
  end
end

function TestCausal:testMoreQueriesLeaveLeadingRowsEmpty()
  local m = qkv.causal(5, 3)
  exact(m, R.causal(5, 3), "causal(5, 3)")
  lu.assertEquals(m:sum(2):tolist(), {0, 0, 1, 2, 3})
end

TestPadding = {}

function TestPadding:testTable()
  local m = qkv.padding{3, 1, 2}
  lu.assertEquals(m.dtype, "bool")
  exact(m, R.padding({3, 1, 2}), "default n")
  assertShape(m, {3, 1, 3})
  exact(qkv.padding({3, 1, 2}, 5), R.padding({3, 1, 2}, 5), "n = 5")
  exact(qkv.padding({0, 2}), R.padding({0, 2}), "a zero length")
  exact(qkv.padding({4}, 4), R.padding({4}, 4), "one sequence")
end

function TestPadding:testTensor()
  for _, dt in ipairs{"int64", "float32", "float64"} do
    exact(qkv.padding(qkv.tensor({2, 4, 1}, dt)), R.padding({2, 4, 1}), dt .. " lengths")
    exact(qkv.padding(qkv.tensor({2, 4, 1}, dt), 6), R.padding({2, 4, 1}, 6), dt .. " lengths, n = 6")
  end
end

function TestPadding:testBadLengths()
  fails({"padding", "exceeds"}, qkv.padding, {3, 5}, 4)
  fails("padding", qkv.padding, {2, -1})
  fails({"padding", "1-D"}, qkv.padding, qkv.ones(2, 2))
end

---------------------------------------------------------------- softmax

TestSoftmax = {}

function TestSoftmax:testAnyDim()
  for _, dt in ipairs(DT) do
    for nd = 1, 4 do
      local x, X = R.mk(rshape(nd, 1, 5), dt, -5, 5)
      for d = 1, nd do
        local ref = R.softmax(X, d)
        local y = qkv.softmax(x, d)
        lu.assertEquals(y.dtype, dt)
        close(y, ref, nil, dt .. " " .. sstr(X.shape) .. " dim " .. d)
        close(qkv.softmax(x, d - nd - 1), ref, nil, dt .. " negative dim " .. (d - nd - 1))
        close(x:softmax(d), ref, nil, dt .. " method dim " .. d)
      end
      close(qkv.softmax(x), R.softmax(X, -1), nil, dt .. " default dim")
    end
  end
end

function TestSoftmax:testNonContiguous()
  for _, dt in ipairs(DT) do
    local x = R.mk({3, 4, 5}, dt, -4, 4)
    for _, v in ipairs{x:transpose(1, 3), x:transpose(2, 3), x:narrow(3, 2, 3),
                       x:select(2, 2):t(), x[1]:unsqueeze(1):expand(2, 4, 5)} do
      for d = 1, v.ndim do
        close(qkv.softmax(v, d), R.softmax(T(v), d), nil, dt .. " view " .. sstr(R.shape(v)) .. " dim " .. d)
      end
    end
  end
end

function TestSoftmax:testAllNegInfRowsGiveZeros()
  for _, dt in ipairs(DT) do
    local x = qkv.tensor({{-inf, -inf, -inf}, {-inf, 2, 3}, {-inf, 0, -inf}}, dt)
    local y = qkv.softmax(x)
    exact(y[1], {shape = {3}, data = {0, 0, 0}}, dt .. " all -inf row")
    exact(y[3], {shape = {3}, data = {0, 1, 0}}, dt .. " -inf, 0, -inf")
    close(y, R.softmax(T(x)), nil, dt)
    -- along dim 1 the first column is all -inf
    exact(qkv.softmax(x, 1):select(2, 1), {shape = {3}, data = {0, 0, 0}}, dt .. " all -inf column")
    -- a fully masked row of scores
    local S = qkv.mask(qkv.ones({2, 3}, dt), qkv.tensor{{true, true, false}, {false, false, false}})
    exact(qkv.softmax(S), {shape = {2, 3}, data = {0.5, 0.5, 0, 0, 0, 0}}, dt .. " masked row")
  end
end

function TestSoftmax:testHugeFiniteValues()
  for _, dt in ipairs(DT) do
    local cases = {
      {{1e30, -1e30}, {1, 0}}, {{-1e30, 1e30}, {0, 1}}, {{1e30, 1e30}, {0.5, 0.5}},
      {{-1e30, -1e30, -1e30, -1e30}, {0.25, 0.25, 0.25, 0.25}}, {{1e30, 0, -1e30}, {1, 0, 0}},
      {{3e38, -3e38}, {1, 0}}, {{-1e30, -inf}, {1, 0}},
    }
    for _, c in ipairs(cases) do
      local y = qkv.softmax(qkv.tensor(c[1], dt))
      exact(y, {shape = {#c[2]}, data = c[2]}, dt .. " softmax" .. lu.prettystr(c[1]))
    end
  end
end

function TestSoftmax:testNaNPropagates()
  for _, dt in ipairs(DT) do
    local y = qkv.softmax(qkv.tensor({{nan, 1, 2}, {1, 2, 3}, {0, 0, nan}}, dt))
    local v = T(y).data
    for i = 1, 3 do lu.assertNaN(v[i], dt .. " row 1") end
    for i = 7, 9 do lu.assertNaN(v[i], dt .. " row 3") end
    close(y[2], R.softmax(T(qkv.tensor({1, 2, 3}, dt))), nil, dt .. " row 2 unaffected")
  end
end

---------------------------------------------------------------- heads, merge

TestHeads = {}

function TestHeads:testShapesAndValues()
  for _, dt in ipairs(DT) do
    for _ = 1, 6 do
      local h, dh, n = math.random(1, 4), math.random(1, 3), math.random(1, 5)
      local x, X = R.mk(cat(rshape(math.random(0, 2)), n, h * dh), dt)
      local y = qkv.heads(x, h)
      lu.assertEquals(y.dtype, dt)
      exact(y, R.heads(X, h), dt .. " heads(" .. sstr(X.shape) .. ", " .. h .. ")")
      local z = qkv.merge(y)
      exact(z, X, dt .. " merge(heads(x))")
    end
  end
  assertShape(qkv.heads(qkv.randn(1, 10, 512), 8), {1, 8, 10, 64}, "README")
end

function TestHeads:testHeadsIsAView()
  local x = qkv.arange(24):view(2, 12)               -- (n = 2, d = 12), h = 3: dh = 4
  local y = qkv.heads(x, 3)
  y[2][1][3] = 100                                   -- head 2, token 1, j = 3 is x[1][4 + 3]
  lu.assertEquals(x[1][7], 100)
  y[3][2] = -1                                       -- head 3, token 2: x[2][9..12]
  lu.assertEquals(x[2]:narrow(1, 9, 4):tolist(), {-1, -1, -1, -1})
  lu.assertEquals(x[2][8], 19)
  x[1][1] = 42                                       -- and back
  lu.assertEquals(y[1][1][1], 42)
  exact(y, R.heads(T(x), 3), "heads after writes")
end

function TestHeads:testNonContiguousInput()
  for _, dt in ipairs(DT) do
    local x = R.mk({2, 8, 3}, dt)                    -- x:transpose(2, 3) is (2, 3, 8), d strided
    local xt = x:transpose(2, 3)
    local y = qkv.heads(xt, 4)
    exact(y, R.heads(T(xt), 4), dt .. " heads of a transposed x")
    exact(qkv.merge(y), T(xt), dt .. " merge(heads(transposed x))")
    y[1][2][3][1] = 7                                -- still a view
    lu.assertEquals(xt[1][3][3], 7)
  end
end

function TestHeads:testMergeValues()
  for _, dt in ipairs(DT) do
    for _, s in ipairs{{3, 4, 2}, {2, 3, 1, 5}, {1, 1, 1}, {2, 2, 3, 4}, {4, 1, 3}} do
      local x, X = R.mk(s, dt)                       -- contiguous (.., h, n, dh): merge copies
      local z = qkv.merge(x)
      lu.assertEquals(z.dtype, dt)
      exact(z, R.merge(X), dt .. " merge" .. sstr(s))
      exact(qkv.heads(z, s[#s - 2]), X, dt .. " heads(merge(x))")
    end
  end
end

function TestHeads:testOneToken()
  for _, dt in ipairs(DT) do
    local x, X = R.mk({2, 1, 6}, dt)
    local y = qkv.heads(x, 3)
    assertShape(y, {2, 3, 1, 2})
    exact(y, R.heads(X, 3), dt .. " n = 1")
    exact(qkv.merge(y), X, dt .. " merge, n = 1")
    exact(qkv.heads(x, 1), R.heads(X, 1), dt .. " h = 1")
    exact(qkv.heads(x, 6), R.heads(X, 6), dt .. " h = d")
  end
end

---------------------------------------------------------------- gelu

TestGelu = {}

function TestGelu:testAgainstErf()
  local grid = {}
  for i = -100, 100 do grid[#grid + 1] = i / 10 end
  for _, v in ipairs{-30, -12, 1e-8, -1e-8, 0.7071067811865476, 25, 1e3, -1e3} do grid[#grid + 1] = v end
  for _, dt in ipairs(DT) do
    local x, X = R.tensor({shape = {#grid}, data = grid}, dt)
    local y = qkv.gelu(x)
    lu.assertEquals(y.dtype, dt)
    close(y, R.gelu(X), nil, dt .. " grid")
    close(x:gelu(), R.gelu(X), nil, dt .. " method")
    local r, RR = R.mk({3, 4, 5}, dt, -6, 6)
    close(qkv.gelu(r), R.gelu(RR), nil, dt .. " random")
    close(qkv.gelu(r:transpose(1, 3)), R.gelu(T(r:transpose(1, 3))), nil, dt .. " transposed")
  end
  -- the exact GELU, not the tanh approximation: at x = 1 they differ by 1.6e-4
  local g = qkv.gelu(qkv.tensor({1}, "float64"))[1]
  lu.assertAlmostEquals(g, 0.8413447460685429, 1e-14)
end

---------------------------------------------------------------- align

TestAlign = {}

function TestAlign:testLinear()
  for _, dt in ipairs(DT) do
    local x, X = R.mk({2, 5, 4}, dt)
    local W, WR = R.mk({4, 6}, dt)
    local b, B = R.mk({6}, dt)
    close(qkv.align(x, W), R.project(X, WR), nil, dt .. " align(x, W)")
    close(qkv.align(x, W, b), R.project(X, WR, B), nil, dt .. " align(x, W, b)")
  end
end

function TestAlign:testMLP()
  for _, dt in ipairs(DT) do
    for _, xs in ipairs{{5, 4}, {2, 3, 4}, {4}} do
      local x, X = R.mk(xs, dt)
      local W1, W1R = R.mk({4, 7}, dt)
      local b1, B1 = R.mk({7}, dt)
      local W2, W2R = R.mk({7, 3}, dt)
      local b2, B2 = R.mk({3}, dt)
      local ref = R.project(R.gelu(R.project(X, W1R, B1)), W2R, B2)
      local y = qkv.align(x, {W1, b1, W2, b2})
      lu.assertEquals(y.dtype, dt)
      close(y, ref, nil, dt .. " MLP x " .. sstr(xs))
      close(qkv.project(qkv.gelu(qkv.project(x, W1, b1)), W2, b2), ref, nil, dt .. " composed")
    end
  end
end

---------------------------------------------------------------- errors

TestPrimitiveErrors = {}
local M = function(...) return qkv.ones(...) end

function TestPrimitiveErrors:testScores()
  local ok, msg = pcall(qkv.scores, M(3, 4), M(5, 3))
  lu.assertFalse(ok)
  lu.assertEquals(msg, "scores: Q is (3, 4) but K is (5, 3): d_k 4 ≠ 3")
  fails({"scores", "(2, 3, 4)", "(3, 5, 4)", "batch dims do not broadcast"}, qkv.scores, M(2, 3, 4), M(3, 5, 4))
  fails({"scores", "(2, 2, 3, 4)", "(3, 5, 4)", "broadcast"}, qkv.scores, M(2, 2, 3, 4), M(3, 5, 4))
  fails({"scores", "Q"}, qkv.scores, M(4), M(3, 4))
  fails({"scores", "unknown option", "scal"}, qkv.scores, M(2, 4), M(3, 4), {scal = 1})
  fails({"scores", "float32", "float64"}, qkv.scores, M(2, 4), M(3, 4, "float64"))
  fails({"scores", "float64", "float32"}, qkv.scores, M(2, 4, "float64"), M(3, 4))
end

-- README: every error names the function
function TestPrimitiveErrors:testScaleNotANumber()
  fails({"scores", "scale", "number"}, qkv.scores, M(2, 4), M(3, 4), {scale = "abc"})
  fails({"scores", "scale", "number"}, qkv.scores, M(2, 4), M(3, 4), {scale = {}})
  fails({"scores", "scale", "number"}, qkv.scores, M(2, 4), M(3, 4), {scale = true})
end

function TestPrimitiveErrors:testProject()
  fails({"project", "(2, 4)", "(3, 5)", "d_in 4 ≠ 3"}, qkv.project, M(2, 4), M(3, 5))
  fails({"project", "b", "(4,)", "(3, 5)"}, qkv.project, M(2, 3), M(3, 5), M(4))
  fails({"project", "b"}, qkv.project, M(2, 3), M(3, 5), M(1, 5))
  fails({"project", "W", "(3,)"}, qkv.project, M(2, 3), M(3))
  fails({"project", "W", "(1, 3, 5)"}, qkv.project, M(2, 3), M(1, 3, 5))
  fails({"project", "float32", "float64"}, qkv.project, M(2, 3), M(3, 5, "float64"))
  fails({"project", "float32", "float64"}, qkv.project, M(2, 3), M(3, 5), M(5, "float64"))
end

function TestPrimitiveErrors:testMask()
  fails({"mask", "(4, 3)", "(2, 3)"}, qkv.mask, M(2, 3), M(4, 3))
  fails({"mask", "(2, 1, 5)", "(2, 4, 4)"}, qkv.mask, M(2, 4, 4), qkv.padding({5, 2}))
  fails({"mask", "(3, 4)", "(4, 4)"}, qkv.mask, M(4, 4), qkv.causal(3, 4))
end

function TestPrimitiveErrors:testHeadsMerge()
  fails({"heads", "d = 6", "h = 4"}, qkv.heads, M(2, 6), 4)
  fails({"heads", "d = 5", "h = 2"}, qkv.heads, M(3, 2, 5), 2)
  fails("heads", qkv.heads, M(2, 6), 0)
  fails({"merge", "(2, 6)"}, qkv.merge, M(2, 6))
end

function TestPrimitiveErrors:testAlign()
  local x, W1, b1, W2, b2 = M(2, 4), M(4, 6), M(6), M(6, 3), M(3)
  fails({"align", "3 items"}, qkv.align, x, {W1, b1, W2})
  fails({"align", "item 2", "number"}, qkv.align, x, {W1, 1, W2, b2})
  fails({"align", "item 4", "string"}, qkv.align, x, {W1, b1, W2, "b2"})
  fails({"align", "d_in"}, qkv.align, x, {M(5, 6), b1, W2, b2})
  fails({"align", "b"}, qkv.align, x, {W1, M(5), W2, b2})
  fails({"align", "d_in"}, qkv.align, x, {W1, b1, M(5, 3), b2})
  fails({"align", "b"}, qkv.align, x, {W1, b1, W2, M(6)})
  fails({"align", "d_in"}, qkv.align, x, M(3, 3))
  fails({"align", "float32", "float64"}, qkv.align, x, {W1:to("float64"), b1, W2, b2})
end

function TestPrimitiveErrors:testNotATensor()
  local E = "qkv.Tensor expected"
  local x = M(2, 4)
  fails({E, "project"}, qkv.project, 1, M(4, 2))
  fails({E, "project"}, qkv.project, x, "W")
  fails({E, "project"}, qkv.project, x, M(4, 2), {})
  fails({E, "scores"}, qkv.scores, x, 2)
  fails({E, "mask"}, qkv.mask, x, true)
  fails({E, "mask"}, qkv.mask, {}, x)
  fails({E, "softmax"}, qkv.softmax, {1, 2})
  fails({E, "heads"}, qkv.heads, 4, 2)
  fails({E, "merge"}, qkv.merge, nil)
  fails({E, "gelu"}, qkv.gelu, 0.5)
  fails({E, "align"}, qkv.align, 1, M(4, 2))
  fails({E, "align"}, qkv.align, x, 3)
  fails({E, "attention"}, qkv.attention, x, x, 1)
end

os.exit(lu.LuaUnit.run(), true)
