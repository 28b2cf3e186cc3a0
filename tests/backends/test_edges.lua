-- test_edges.lua: the edge cases of docs/numerics.md for
-- every primitive, the fused path and the qkv.nn modules: empty tensors (0
-- queries, 0 keys, 0 batch, d = 0), 1-token sequences, rows with every key
-- masked (zeros, never NaN, in the weights and the output of both paths),
-- and NaN/inf in tiles of the fused kernel. Values are checked against
-- the float64 references of tests/helpers/attn_ref.lua; every attention call is
-- also run fused and compared with the composed one. The float64 paths,
-- promotion and magnitudes are in test_edges_float64.lua, PyTorch's
-- answers in test_edges_torch.lua.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")

math.randomseed(20250706)
local inf, nan = math.huge, 0 / 0
local T, close, exact, fails, sstr = R.T, R.close, R.exact, R.fails, R.sstr
local DT = {"float32", "float64"}

local function shape(x, s, what) lu.assertEquals(sstr(R.shape(x)), sstr(s), what) end
local function rt(s, dt, lo, hi) return (R.mk(s, dt, lo, hi)) end
local function zeros_ref(s) local d = {} for i = 1, R.numel(s) do d[i] = 0 end return {shape = s, data = d} end

-- no NaN anywhere in x
local function nonan(x, what)
  lu.assertEquals(x:ne(x):sum():item(), 0, (what or "") .. ": NaN in " .. sstr(R.shape(x)))
end

-- qkv.attention through both paths; the fused out must be the composed one
local function attend(Q, K, V, opts, what)
  opts = opts or {}
  local out, w = qkv.attention(Q, K, V, opts)
  local o = {weights = false}
  for k, v in pairs(opts) do if k ~= "weights" then o[k] = v end end
  local f = qkv.attention(Q, K, V, o)
  lu.assertEquals(f.dtype, out.dtype, what)
  close(f, T(out), nil, (what or "") .. ": fused = composed")
  return out, w, f
end

-- the reference for attend's arguments
local function ref(Q, K, V, opts)
  opts = opts or {}
  local ro = {scale = opts.scale, causal = opts.causal, mask = opts.mask and T(opts.mask)}
  return R.attention(T(Q), T(K), T(V), ro)
end

---------------------------------------------------------------- (a) empty tensors

TestEmpty = {}

function TestEmpty:testProjectScoresMask()
  for _, dt in ipairs(DT) do
    local b = rt({3}, dt)
    shape(qkv.project(qkv.zeros({0, 4}, dt), rt({4, 3}, dt), b), {0, 3}, "project 0 tokens")
    shape(qkv.project(qkv.zeros({0, 5, 4}, dt), rt({4, 3}, dt)), {0, 5, 3}, "project batch 0")
    shape(qkv.project(rt({2, 4}, dt), qkv.zeros({4, 0}, dt)), {2, 0}, "project d_out 0")
    -- d_in = 0: x W is a sum over nothing, so x W + b is b on every row
    exact(qkv.project(qkv.zeros({2, 0}, dt), qkv.zeros({0, 3}, dt), b),
          R.project(zeros_ref({2, 0}), zeros_ref({0, 3}), T(b)), dt .. " project d_in 0")
    shape(qkv.scores(qkv.zeros({0, 4}, dt), rt({3, 4}, dt)), {0, 3}, "scores 0 queries")
    shape(qkv.scores(rt({2, 4}, dt), qkv.zeros({0, 4}, dt)), {2, 0}, "scores 0 keys")
    shape(qkv.scores(qkv.zeros({0, 2, 4}, dt), qkv.zeros({0, 3, 4}, dt)), {0, 2, 3}, "scores batch 0")
    exact(qkv.scores(qkv.zeros({2, 0}, dt), qkv.zeros({3, 0}, dt)), zeros_ref({2, 3}), "scores d_k 0")
    shape(qkv.mask(qkv.zeros({0, 3}, dt), qkv.causal(0, 3)), {0, 3}, "mask 0 rows")
    shape(qkv.mask(qkv.zeros({2, 3, 0}, dt), qkv.padding({0, 0})), {2, 3, 0}, "mask 0 keys")
  end
end

function TestEmpty:testMaskHelpers()
  shape(qkv.causal(0), {0, 0}, "causal(0)")
  shape(qkv.causal(0, 3), {0, 3}, "causal(0, 3)")
  shape(qkv.causal(3, 0), {3, 0}, "causal(3, 0)")
  shape(qkv.padding({}), {0, 1, 0}, "padding{}")
  shape(qkv.padding({0, 0}), {2, 1, 0}, "padding{0, 0}")
  exact(qkv.padding({0, 0}, 3), R.padding({0, 0}, 3), "padding{0, 0}, 3: all false")
  exact(qkv.padding(qkv.tensor({0, 2}, "int64"), 2), R.padding({0, 2}, 2), "padding of a tensor")
end

function TestEmpty:testSoftmaxGeluHeadsMerge()
  for _, dt in ipairs(DT) do
    for _, s in ipairs{{0, 3}, {3, 0}, {2, 0, 3}, {0}} do
      for d = 1, #s do
        local y = qkv.softmax(qkv.zeros(s, dt), d)
        shape(y, s, "softmax " .. sstr(s) .. " dim " .. d)
        lu.assertEquals(y.dtype, dt)
      end
      shape(qkv.gelu(qkv.zeros(s, dt)), s, "gelu " .. sstr(s))
    end
    local x = qkv.zeros({0, 8}, dt)
    shape(qkv.heads(x, 2), {2, 0, 4}, "heads 0 tokens")
    shape(qkv.merge(qkv.heads(x, 2)), {0, 8}, "merge 0 tokens")
    shape(qkv.heads(qkv.zeros({3, 0}, dt), 2), {2, 3, 0}, "heads d = 0")
    shape(qkv.merge(qkv.zeros({0, 3, 4}, dt)), {3, 0}, "merge 0 heads")
    shape(qkv.heads(qkv.zeros({0, 5, 8}, dt), 4), {0, 4, 5, 2}, "heads batch 0")
  end
end

function TestEmpty:testAlign()
  for _, dt in ipairs(DT) do
    local W1, b1, W2, b2 = rt({4, 3}, dt), rt({3}, dt), rt({3, 2}, dt), rt({2}, dt)
    shape(qkv.align(qkv.zeros({0, 4}, dt), W1, b1), {0, 3}, "align linear 0 tokens")
    shape(qkv.align(qkv.zeros({0, 4}, dt), {W1, b1, W2, b2}), {0, 2}, "align mlp 0 tokens")
    shape(qkv.align(qkv.zeros({2, 0, 4}, dt), {W1, b1, W2, b2}), {2, 0, 2}, "align mlp batch of empties")
  end
end

-- attention with nothing to attend: shapes, and zeros where docs/numerics.md says
function TestEmpty:testAttention()
  for _, dt in ipairs(DT) do
    local z = function(...) return qkv.zeros({...}, dt) end
    local out, w = attend(z(0, 4), rt({3, 4}, dt), rt({3, 2}, dt), nil, "0 queries")
    shape(out, {0, 2}); shape(w, {0, 3})
    for _, opts in ipairs{{}, {causal = true}, {mask = qkv.zeros({2, 0}, "bool")}} do
      out, w = attend(rt({2, 4}, dt), z(0, 4), z(0, 3), opts, "0 keys")
      exact(out, zeros_ref({2, 3}), "0 keys: out is zeros")
      shape(w, {2, 0})
    end
    out, w = attend(z(0, 2, 4), z(0, 3, 4), z(0, 3, 2), nil, "batch 0")
    shape(out, {0, 2, 2}); shape(w, {0, 2, 3})
    out, w = attend(rt({2, 2, 4}, dt), z(2, 0, 4), z(2, 0, 5), {causal = true}, "0 keys, batched")
    exact(out, zeros_ref({2, 2, 5}), "0 keys, batched")
    out, w = attend(rt({2, 4}, dt), rt({3, 4}, dt), z(3, 0), nil, "d_v 0")
    shape(out, {2, 0}); shape(w, {2, 3})
    -- d_k = 0: every score is 0 and the default scale is 1 (not 1/sqrt 0),
    -- so the weights are uniform and out is the mean of V
    local V = rt({3, 2}, dt)
    out, w = attend(z(2, 0), z(3, 0), V, nil, "d_k 0")
    close(w, R.softmax(zeros_ref({2, 3})), nil, "d_k 0: uniform weights")
    close(out, R.matmul(R.softmax(zeros_ref({2, 3})), T(V)), nil, "d_k 0: mean of V")
  end
end

function TestEmpty:testMatmulAndReductions()
  for _, dt in ipairs(DT) do
    exact(qkv.matmul(qkv.zeros({2, 0}, dt), qkv.zeros({0, 3}, dt)), zeros_ref({2, 3}), "inner dim 0")
    shape(qkv.matmul(qkv.zeros({0, 2}, dt), rt({2, 3}, dt)), {0, 3}, "0 rows")
    shape(qkv.matmul(qkv.zeros({0, 2, 3}, dt), rt({3, 4}, dt)), {0, 2, 4}, "batch 0")
    lu.assertEquals(qkv.matmul(qkv.zeros({0}, dt), qkv.zeros({0}, dt)):item(), 0, "empty dot")
    local e, rows = qkv.zeros({0}, dt), qkv.zeros({3, 0}, dt)
    lu.assertEquals(e:sum():item(), 0, "sum of nothing")
    exact(rows:sum(2), zeros_ref({3}), "sums of empty rows")
    exact(rows:sum(2, true), zeros_ref({3, 1}), "sums of empty rows, keepdim")
    for _, op in ipairs{"mean", "var", "std"} do
      lu.assertNaN(e[op](e):item(), op .. " of nothing")
      for i = 1, 3 do lu.assertNaN(rows[op](rows, 2)[i], op .. " of empty rows") end
    end
    for _, op in ipairs{"max", "min", "argmax", "argmin"} do
      fails({op, "empty", "(3, 0)"}, function() return rows[op](rows, 2) end)
      fails({op, "empty"}, function() return e[op](e) end)
      -- reducing a non-empty dim of an empty tensor is fine and empty
      shape(qkv.zeros({0, 3}, dt)[op](qkv.zeros({0, 3}, dt), 2), {0}, op .. " along a full dim")
    end
    shape(qkv.zeros({0, 3}, dt):sum(1), {3}, "sum down 0 rows")
    exact(qkv.zeros({0, 3}, dt):sum(1), zeros_ref({3}), "sum down 0 rows")
  end
end

function TestEmpty:testModules()
  local nn = qkv.nn
  qkv.seed(7)
  local x0 = qkv.zeros(0, 8)
  shape(nn.Linear(8, 3)(x0), {0, 3}, "Linear")
  shape(nn.GELU()(x0), {0, 8}, "GELU")
  local out, w = nn.SelfAttention(8, 4)(x0)
  shape(out, {0, 4}); shape(w, {0, 0})
  out, w = nn.SelfAttention(8, 4)(qkv.zeros(2, 0, 8), {causal = true})
  shape(out, {2, 0, 4}); shape(w, {2, 0, 0})
  out, w = nn.CrossAttention(8, 4)(qkv.randn(3, 8), x0)
  exact(out, zeros_ref({3, 4}), "CrossAttention, no image tokens")
  out, w = nn.MultiHeadAttention(8, 2)(qkv.zeros(2, 0, 8))
  shape(out, {2, 0, 8}); shape(w, {2, 2, 0, 0})
  local mhca = nn.MultiHeadCrossAttention(8, 2)
  out, w = mhca(qkv.randn(3, 8), x0)
  exact(out, zeros_ref({3, 8}), "MultiHeadCrossAttention, no image tokens")
  shape(w, {2, 3, 0})
  out, w = mhca(x0, qkv.randn(5, 8))
  shape(out, {0, 8}); shape(w, {2, 0, 5})
  for _, method in ipairs{"linear", "mlp", "identity"} do
    shape(nn.TokenAligner(8, 8, method)(x0), {0, 8}, "TokenAligner " .. method)
  end
  out = nn.AlignedCrossAttention(6, 8, 2, "mlp")(qkv.randn(3, 8), qkv.zeros(0, 6))
  exact(out, zeros_ref({3, 8}), "AlignedCrossAttention, no image tokens")
  -- a·b / max(|a||b|, eps) with d = 0: 0 / eps = 0
  exact(nn.cosine_similarity(qkv.zeros(2, 0), qkv.zeros(2, 0)), zeros_ref({2}), "cosine d = 0")
  shape(nn.cosine_similarity(qkv.zeros(0, 3), qkv.zeros(0, 3)), {0}, "cosine 0 rows")
end

---------------------------------------------------------------- (b) one token

TestOneToken = {}

-- one key: every kept weight is exactly 1 and out is exactly that V row
function TestOneToken:testOneKey()
  for _, dt in ipairs(DT) do
    local Q, K, V = rt({1, 4}, dt), rt({1, 4}, dt), rt({1, 3}, dt)
    for _, opts in ipairs{{}, {causal = true}, {mask = qkv.tensor{true}}, {scale = 1e30}} do
      local out, w = attend(Q, K, V, opts, dt .. " 1 token")
      exact(w, {shape = {1, 1}, data = {1}}, "weight")
      exact(out, T(V), "out = V")
    end
    local out, w = attend(Q, K, V, {mask = qkv.tensor{false}}, dt .. " 1 token masked")
    exact(w, zeros_ref({1, 1}), "masked weight")
    exact(out, zeros_ref({1, 3}), "masked out")
    -- several queries, one key: all see it; causal: only the last does
    local Qn = rt({4, 4}, dt)
    out, w = attend(Qn, K, V, nil, dt .. " 4 queries, 1 key")
    exact(w, {shape = {4, 1}, data = {1, 1, 1, 1}}, "weights")
    out, w = attend(Qn, K, V, {causal = true}, dt .. " causal, 4 queries, 1 key")
    exact(w, {shape = {4, 1}, data = {0, 0, 0, 1}}, "causal weights")
    nonan(out, "causal out")
    close(out, ref(Qn, K, V, {causal = true}), nil, "causal out")
    -- one query (decoding) against a cache of 5 keys: causal keeps them all
    local K5, V5 = rt({5, 4}, dt), rt({5, 3}, dt)
    out, w = attend(Q, K5, V5, {causal = true}, dt .. " 1 query, cache of 5")
    close(out, ref(Q, K5, V5), nil, "1 query vs cache")
  end
end

function TestOneToken:testPrimitives()
  for _, dt in ipairs(DT) do
    exact(qkv.softmax(rt({3, 1}, dt)), {shape = {3, 1}, data = {1, 1, 1}}, "softmax of one")
    exact(qkv.softmax(qkv.tensor({-inf}, dt)), {shape = {1}, data = {0}}, "softmax of one -inf")
    lu.assertEquals(qkv.softmax(qkv.tensor(3, dt)):item(), 1, "softmax of a 0-d tensor")
    local x = rt({1, 8}, dt)
    exact(qkv.merge(qkv.heads(x, 4)), T(x), "heads/merge of one token")
    exact(qkv.heads(x, 4), R.heads(T(x), 4), "heads of one token")
    lu.assertNaN(qkv.tensor({5}, dt):var():item(), "var of one (n - 1 = 0)")
  end
end

-- a module over one token: weights are ones, out = x W_V W_O
function TestOneToken:testModules()
  qkv.seed(3)
  local m, x = qkv.nn.MultiHeadAttention(8, 2), qkv.randn(1, 8)
  local out, w = m(x)
  exact(w, {shape = {2, 1, 1}, data = {1, 1}}, "MHA weights")
  close(out, R.project(R.project(T(x), T(m.W_V)), T(m.W_O)), nil, "MHA out")
  local f = m(x, {weights = false})
  close(f, T(out), nil, "MHA fused")
  local a = qkv.nn.AlignedCrossAttention(6, 8, 2)
  out, w = a(qkv.randn(2, 8), qkv.randn(1, 6))
  exact(w, {shape = {2, 2, 1}, data = {1, 1, 1, 1}}, "aligned cross weights")
end

---------------------------------------------------------------- (c) all-masked rows

TestAllMasked = {}

local function check_zero_rows(out, w, rows, what)
  nonan(out, what .. " out"); nonan(w, what .. " weights")
  for _, r in ipairs(rows) do
    lu.assertEquals(w:select(-2, r):abs():max():item(), 0, what .. ": weights of row " .. r)
    lu.assertEquals(out:select(-2, r):abs():max():item(), 0, what .. ": out of row " .. r)
  end
end

function TestAllMasked:testMaskAllFalse()
  for _, dt in ipairs(DT) do
    local Q, K, V = rt({3, 4}, dt), rt({5, 4}, dt), rt({5, 2}, dt)
    for _, m in ipairs{qkv.zeros(5, "bool"), qkv.zeros(3, 5, "int32"), qkv.zeros(1, 1, "int64")} do
      local out, w = attend(Q, K, V, {mask = m}, dt .. " mask all false")
      check_zero_rows(out, w, {1, 2, 3}, dt .. " mask " .. m.dtype)
    end
    -- a float mask of 0 alone is PyTorch's additive mask that masks nothing
    -- as much as qkv's that masks everything: an error
    R.fails("attention: mask is float32 (3, 5) and all 0", qkv.attention, Q, K, V,
            {mask = qkv.zeros(3, 5)})
    -- with causal on top, and huge scores that would overflow exp
    local out, w = attend(Q * 1e30, K, V, {mask = qkv.zeros(5, "bool"), causal = true}, dt .. " huge")
    check_zero_rows(out, w, {1, 2, 3}, dt .. " huge, causal")
  end
end

function TestAllMasked:testCausalMoreQueriesThanKeys()
  for _, dt in ipairs(DT) do
    local Q, K, V = rt({2, 6, 4}, dt), rt({2, 2, 4}, dt), rt({2, 2, 3}, dt)
    local out, w = attend(Q, K, V, {causal = true}, dt .. " causal 6 x 2")
    check_zero_rows(out, w, {1, 2, 3, 4}, dt .. " causal 6 x 2")
    close(out, ref(Q, K, V, {causal = true}), nil, "causal 6 x 2 out")
    exact(w:select(-2, 5):select(-1, 2), zeros_ref({2}), "row 5 sees key 1 only")
  end
end

function TestAllMasked:testPaddingLengthZero()
  for _, dt in ipairs(DT) do
    local Q, K, V = rt({3, 4, 8}, dt), rt({3, 5, 8}, dt), rt({3, 5, 2}, dt)
    local pad = qkv.padding({0, 5, 0}, 5)
    local out, w = attend(Q, K, V, {mask = pad}, dt .. " padding {0, 5, 0}")
    check_zero_rows(out[1], w[1], {1, 2, 3, 4}, dt .. " batch 1")
    check_zero_rows(out[3], w[3], {1, 2, 3, 4}, dt .. " batch 3")
    close(out, ref(Q, K, V, {mask = pad}), nil, "padding out")
    -- through heads, with a per-head mask leaving one head nothing
    local hm = qkv.ones(3, 2, 1, 5, "bool")
    hm[2][1] = 0
    local Qh, Kh, Vh = qkv.heads(Q, 2), qkv.heads(K, 2), qkv.heads(V, 2)
    out, w = attend(Qh, Kh, Vh, {mask = hm}, dt .. " one head masked")
    check_zero_rows(out[2][1], w[2][1], {1, 2, 3, 4}, dt .. " head masked")
  end
end

-- rows fully masked in tiles of the fused kernel: 40 queries (more than
-- the 16 of an AVX2 group), 200 keys (more than the 96 of a key tile)
function TestAllMasked:testAcrossTiles()
  for _, dt in ipairs(DT) do
    local Q, K, V = rt({40, 16}, dt), rt({200, 16}, dt), rt({200, 8}, dt)
    local d = {}
    for i = 1, 40 do
      d[i] = {}
      for j = 1, 200 do
        -- rows 1-17 nothing; 18-30 only keys past the first tile; rest random
        d[i][j] = i > 17 and (i <= 30 and j > 96 or i > 30 and math.random() < 0.5)
      end
    end
    local m = qkv.tensor(d)
    local rows = {} for i = 1, 17 do rows[i] = i end
    local out, w = attend(Q, K, V, {mask = m}, dt .. " across tiles")
    check_zero_rows(out, w, rows, dt .. " across tiles")
    close(out, ref(Q, K, V, {mask = m}), nil, dt .. " across tiles")
    out, w = attend(Q, K, V, {mask = m, causal = true}, dt .. " across tiles, causal")
    close(out, ref(Q, K, V, {mask = m, causal = true}), nil, dt .. " across tiles, causal")
  end
end

function TestAllMasked:testModules()
  qkv.seed(11)
  local x = qkv.randn(2, 3, 8)
  local pad = qkv.padding({0, 3})
  for _, m in ipairs{qkv.nn.MultiHeadAttention(8, 2), qkv.nn.SelfAttention(8, 4)} do
    local out, w = m(x, {mask = pad})
    nonan(out); nonan(w)
    lu.assertEquals(out[1]:abs():max():item(), 0, m.__name .. ": padded batch out")
    lu.assertEquals(w[1]:abs():max():item(), 0, m.__name .. ": padded batch weights")
    close(m(x, {mask = pad, weights = false}), T(out), nil, m.__name .. " fused")
  end
  local out = qkv.nn.CrossAttention(8, 4)(x, x, {mask = qkv.zeros(3, "bool")})
  lu.assertEquals(out:abs():max():item(), 0, "CrossAttention, mask all false")
end

---------------------------------------------------------------- NaN and inf across tiles

TestNonFiniteTiles = {}

-- a query block whose scores are NaN and -inf only (q = (-inf, 0, ...)
-- against keys with 0 or positive first features): the max skips NaN, the
-- row must still be NaN (as softmax and PyTorch give), in every query of
-- a full group of 16 and in both dtypes
function TestNonFiniteTiles:testNaNWithMinusInf()
  for _, dt in ipairs(DT) do
    for _, nq in ipairs{1, 16, 20} do
      local Q = qkv.cat({qkv.full({nq, 1}, -inf, dt), qkv.zeros(nq, 3, dt)}, 2)
      local K = qkv.cat({qkv.tensor({{0}, {1}, {2}}, dt), rt({3, 3}, dt)}, 2)
      local out, w = attend(Q, K, rt({3, 2}, dt), nil, dt .. " NaN, -inf, -inf")
      for i = 1, nq do lu.assertNaN(out[i][1], dt .. " query " .. i) end
      lu.assertNaN(w[1][1])
    end
  end
end

-- NaN scores only in the second tile of keys: the online softmax must not
-- forget them (it once returned the unnormalised sum, 96)
function TestNonFiniteTiles:testNaNInLaterTile()
  for _, dt in ipairs(DT) do
    for _, bad in ipairs{nan, inf} do
      local col = qkv.cat({qkv.ones(100, 1, dt), qkv.full({100, 1}, bad, dt)}, 1)
      local K = qkv.cat({col, qkv.zeros(200, 1, dt)}, 2)
      local Q = qkv.cat({qkv.ones(16, 1, dt), qkv.zeros(16, 1, dt)}, 2)
      local out = attend(Q, K, qkv.ones(200, 2, dt), nil, dt .. " " .. bad .. " in tile 2")
      for i = 1, 16 do lu.assertNaN(out[i][1], dt .. " " .. bad .. " query " .. i) end
    end
  end
end

-- scores that are -inf from the data (not a mask) in every tile: zeros
function TestNonFiniteTiles:testMinusInfEverywhere()
  for _, dt in ipairs(DT) do
    local Q = qkv.cat({qkv.full({20, 1}, -inf, dt), qkv.zeros(20, 1, dt)}, 2)
    local K = qkv.cat({qkv.ones(200, 1, dt), rt({200, 1}, dt)}, 2)
    local out, w = attend(Q, K, rt({200, 3}, dt), nil, dt .. " all -inf scores")
    exact(out, zeros_ref({20, 3}), "out")
    exact(w, zeros_ref({20, 200}), "weights")
  end
end

-- garbage (NaN) in K at padded positions is masked away in both paths
function TestNonFiniteTiles:testNaNKeysMasked()
  for _, dt in ipairs(DT) do
    local K = qkv.cat({rt({150, 8}, dt), qkv.full({50, 8}, nan, dt)}, 1)
    local Q, V = rt({20, 8}, dt), rt({200, 4}, dt)
    local pad = qkv.padding({150}, 200)[1]
    local out = attend(Q, K, V, {mask = pad}, dt .. " NaN keys padded")
    nonan(out, dt .. " NaN keys padded")
    close(out, ref(Q, K:narrow(1, 1, 150), V:narrow(1, 1, 150)), nil, dt .. " = without them")
  end
end

-- a scale of 0 or ±inf, or NaN: Q K^T * scale is NaN where 0 meets inf,
-- which BLAS's gemm skips for alpha = 0 and the AVX2 path (scale folded
-- into q) does not see the same way; both paths must give the composed
-- result, also with d_k = 0 (every score 0 * scale)
function TestNonFiniteTiles:testNonFiniteScale()
  for _, dt in ipairs(DT) do
    local K = rt({200, 8}, dt)
    K[150] = inf                                  -- an infinite key for scale 0
    local Q, V = rt({20, 8}, dt), rt({200, 3}, dt)
    Q[3] = qkv.zeros(8, dt)                       -- 0 * inf for an infinite scale
    for _, s in ipairs{0, inf, -inf, nan} do
      local what = dt .. " scale " .. s
      local out = attend(Q, K, V, {scale = s, causal = true}, what)
      close(out, ref(Q, K, V, {scale = s, causal = true}), nil, what)
      out = attend(qkv.zeros(20, 0, dt), qkv.zeros(200, 0, dt), V, {scale = s}, what .. ", d_k 0")
      if s == 0 then nonan(out, what) else lu.assertNaN(out[1][1], what .. ", d_k 0") end
    end
  end
end

-- softmax rows of 37 (AVX2 lanes and a tail): a NaN or +inf in the tail
-- spoils the row, a -inf there is a zero
function TestNonFiniteTiles:testSoftmaxTail()
  for _, dt in ipairs(DT) do
    for _, case in ipairs{{nan, true}, {inf, true}, {-inf, false}} do
      local x = rt({2, 37}, dt)
      x[1][37] = case[1]
      local y = qkv.softmax(x)
      local X = T(x)
      X.data[37] = case[1]                -- tolist already has it; kept for clarity
      close(y, R.softmax(X), nil, dt .. " tail " .. tostring(case[1]))
      if case[2] then lu.assertNaN(y[1][1]) else lu.assertEquals(y[1][37], 0) end
      nonan(y[2], "the other row")
    end
  end
end
