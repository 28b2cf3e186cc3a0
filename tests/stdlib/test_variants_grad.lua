-- test_variants_grad.lua: gradients through score_mod and mask_mod.
-- qkv.test.gradcheck in float64 on both paths (weights = false: the fused
-- kernel's own backward; weights = true: autograd through the composed
-- ops, out and W) through softcap, ALiBi, a learnable relative-position
-- bias and learnable slopes captured by the mods, with masks and rows
-- that see no key; then, at sizes that cross the kernels' blocks, the
-- fused path's gradients of q, k, v and the captured tensors against the
-- weights path's and against autograd through the plain-op reference of
-- tests/helpers/variants_ref.lua.
local lu = require "luaunit"
local V = dofile("tests/helpers/variants_ref.lua")
local t = qkv.test
local VA = qkv.variants

qkv.set_default_device("cpu")
qkv.manual_seed(4849)

local NQ, NK, H = 12, 14, 2

-- the cases: name, the inputs beyond q, k, v (float64, requiring grad in
-- gradcheck), and opts(extra...) the options for those inputs
local function cases()
  return {
    {"softcap + causal", {}, function()
      return {score_mod = VA.softcap(0.8), mask_mod = VA.causal()} end},
    {"alibi + sliding window", {}, function()
      return {score_mod = VA.alibi(H), mask_mod = VA.sliding_window(5, {causal = false})} end},
    {"relative bias (H, 2n - 1)", {qkv.randn(H, NQ + NK - 1, "float64")}, function(bias)
      return {score_mod = function(s, b, h, i, j) return s + bias[{h, j - i + NQ}] end} end},
    {"relative bias + document", {qkv.randn(H, NQ + NK - 1, "float64")}, function(bias)
      return {score_mod = function(s, b, h, i, j) return s + bias[{h, j - i + NQ}] end,
              mask_mod = function(b, h, i, j) return ((i - 1) // 5):eq((j - 1) // 5) end} end},
    {"learnable slopes", {qkv.tensor({0.3, -0.6}, "float64")}, function(sl)
      return {score_mod = function(s, b, h, i, j) return s + sl[h] * (j - i) end,
              mask_mod = VA.prefix_lm(4)} end},
    {"slopes and bias, softcapped, rows with no key", {qkv.tensor({0.5, 0.25}, "float64"),
                                                        qkv.randn(H, NQ + NK - 1, "float64")},
     function(sl, bias)
       return {score_mod = function(s, b, h, i, j)
                 return ((s + sl[h] * (i - j) + bias[{h, j - i + NQ}]) / 2):tanh() * 2 end,
               mask_mod = VA.causal(-3)} end},
    {"one tensor loaded twice", {qkv.randn(H, NQ + NK - 1, "float64")}, function(bias)
      return {score_mod = function(s, b, h, i, j) return s * bias[{h, NQ}] + bias[{h, j - i + NQ}] end} end},
    {"where, exp, a mask tensor and causal", {qkv.randn(H, NK, "float64")}, function(kb)
      return {score_mod = function(s, b, h, i, j) return qkv.where(j:gt(i), s + kb[{h, j}]:exp(), s * kb[{h, j}]) end,
              mask = qkv.arange(1, NK + 1, "float64"):reshape(1, NK):ne(3), causal = true} end},
  }
end

local function inputs()
  local q, k, v = V.qkv({1, H}, {1, H}, NQ, NK, 4, 3)
  return q, k, v
end

TestGradcheck = {}

for n, c in ipairs(cases()) do
  for _, w in ipairs{false, true} do
    TestGradcheck[("test%d_%s_%s"):format(n, c[1]:gsub("%W+", "_"), w and "weights" or "fused")] = function()
      local q, k, v = inputs()
      local list = {q, k, v}
      for x, e in ipairs(c[2]) do list[3 + x] = e end
      t.gradcheck(function(q, k, v, ...)
        local opts = c[3](...)
        opts.weights = w
        return (qkv.attention(q, k, v, opts))
      end, list)
      if w then                                  -- the weights too
        t.gradcheck(function(q, k, v, ...)
          local opts = c[3](...)
          local _, W = qkv.attention(q, k, v, opts)
          return W
        end, list)
      end
    end
  end
end

---------------------------------------------------------------- fused = weights = reference

TestGradAgree = {}

-- the gradients of sum(out * G) by each of list (q, k, v, captured...)
-- through f(list...) -> out
local function grads(f, list, G)
  return qkv.grad(function(...) return (f(...) * G):sum() end, list)
end

local function agree(name, bq, bk, nq, nk, extra, opts, ro, tol)
  local q, k, v = V.qkv(bq, bk, nq, nk, 16, 8)
  local list = {q, k, v}
  for x, e in ipairs(extra) do list[3 + x] = e end
  local G = qkv.randn(V.ref(q, k, v).shape, "float64")
  local function run(w)
    return function(q, k, v, ...)
      local o = opts(...)
      o.weights = w
      return (qkv.attention(q, k, v, o))
    end
  end
  local gf = grads(run(false), list, G)
  local gw = grads(run(true), list, G)
  local gr = grads(function(q, k, v, ...) return (V.ref(q, k, v, ro(...))) end, list, G)
  local names = {"dq", "dk", "dv", "d captured 1", "d captured 2"}
  for x = 1, #list do
    V.near(gf[x], gr[x], tol, name .. ": fused " .. names[x])
    V.near(gw[x], gr[x], tol, name .. ": weights " .. names[x])
    lu.assertTrue(gr[x]:abs():max():item() > 0, name .. ": " .. names[x] .. " is zero")
  end
end

function TestGradAgree:testRelativeBiasAndWindow()
  local nq, nk, h = 150, 130, 3
  local bias = qkv.randn(h, nq + nk - 1, "float64")
  agree("bias + window", {2, h}, {2, h}, nq, nk, {bias},
    function(b) return {score_mod = function(s, _, hh, i, j) return s + b[{hh, j - i + nq}] end,
                        mask_mod = VA.sliding_window(40, {causal = false})} end,
    function(b)
      local P = V.pos({2, h}, nq, nk)
      local B = V.take(b, (P.h - 1) * (nq + nk - 1) + P.j - P.i + nq)
      return {score = function(S) return S + B end, keep = (P.i - P.j):abs():lt(40)}
    end, 1e-10)
end

function TestGradAgree:testSlopesSoftcapDocuments()
  local n, h = 140, 4
  local sl = qkv.tensor({0.1, -0.05, 0.2, 0.02}, "float64")
  local ids = {}
  for x = 1, n do ids[x] = (x - 1) // 50 end
  local I = qkv.tensor(ids, "int64")
  agree("slopes + softcap + document + causal", {h}, {h}, n, n, {sl},
    function(s2) return {score_mod = function(s, b, hh, i, j) return ((s + s2[hh] * (j - i)) / 3):tanh() * 3 end,
                         mask_mod = VA.document(I), causal = true} end,
    function(s2)
      local P = V.pos({h}, n, n)
      local D = I:double()
      return {score = function(S) return ((S + s2:reshape(h, 1, 1) * (P.j - P.i)) / 3):tanh() * 3 end,
              keep = D:reshape(n, 1):eq(D:reshape(1, n)):logical_and(P.j:le(P.i))}
    end, 1e-10)
end

function TestGradAgree:testBroadcastKVAndEmptyRows()
  -- K, V shared by the heads (their gradients summed over H); the first
  -- 20 queries see no key
  local nq, nk = 130, 150
  local kb = qkv.randn(nk, "float64")
  agree("broadcast K/V, empty rows", {2, 3}, {2, 1}, nq, nk, {kb},
    function(x) return {score_mod = function(s, b, h, i, j) return s + x[j] * h end,
                        mask_mod = VA.causal(-20)} end,
    function(x)
      local P = V.pos({2, 3}, nq, nk)
      return {score = function(S) return S + x:reshape(1, nk) * P.h end, keep = P.j:le(P.i - 20)}
    end, 1e-10)
end

function TestGradAgree:testFloat32()
  -- float32's fused backward against the float64 reference's gradients
  local nq, nk, h = 100, 120, 2
  local q, k, v = V.qkv({h}, {h}, nq, nk, 16, 8)
  local bias = qkv.randn(h, nq + nk - 1, "float64")
  local G = qkv.randn(h, nq, 8, "float64")
  local function opts(b) return {score_mod = function(s, _, hh, i, j) return s + b[{hh, j - i + nq}] end,
                                 mask_mod = VA.sliding_window(30), weights = false} end
  local g32 = qkv.grad(function(q, k, v, b)
    return (qkv.attention(q, k, v, opts(b)):double() * G):sum()
  end, {q:float(), k:float(), v:float(), bias:float()})
  local g64 = qkv.grad(function(q, k, v, b) return (qkv.attention(q, k, v, opts(b)) * G):sum() end,
                       {q, k, v, bias})
  for x, name in ipairs{"dq", "dk", "dv", "dbias"} do
    lu.assertEquals(g32[x].dtype, "float32", name)
    V.near(g32[x]:double(), g64[x], 2e-4, "float32 " .. name)
  end
end

function TestGradAgree:testFloat32Transcendentals()
  -- the score's tanh, exp and sigmoid, which a float32 backward evaluates
  -- in float32 (vexp.h's), and biases added to it (ALiBi, a relative
  -- bias that wants no gradient: on AVX-512 the backward's register
  -- kernel runs them, with a block mask's spans too): its gradients the
  -- float64 reference's
  local nq, nk, h = 90, 110, 2
  local q, k, v = V.qkv({h}, {h}, nq, nk, 16, 8)
  local G = qkv.randn(h, nq, 8, "float64")
  local bias = qkv.randn(h, nq + nk, "float64")
  local bm = qkv.block_mask(VA.sliding_window(30), nil, nil, nq, nk, {block = 16})
  local mods = {
    {"softcap", {score_mod = VA.softcap(2)}},
    {"exp", {score_mod = function(s, b, h, i, j) return (s / 4):exp() end}},
    {"sigmoid", {score_mod = function(s, b, h, i, j) return s * s:sigmoid() * 2 end}},
    {"alibi", {score_mod = VA.alibi(h)}},
    {"alibi and a window's block mask", {score_mod = VA.alibi(h), block_mask = bm}},
    {"a relative bias and causal", {score_mod = function(s, b, hh, i, j) return s + bias[{hh, i - j + nk}] end,
                                    causal = true}},
  }
  for _, m in ipairs(mods) do
    local function loss(q, k, v)
      return (qkv.attention(q, k, v, V.with(m[2], "weights", false)):double() * G):sum()
    end
    local g32 = qkv.grad(loss, {q:float(), k:float(), v:float()})
    local g64 = qkv.grad(loss, {q, k, v})
    for x, name in ipairs{"dq", "dk", "dv"} do
      V.near(g32[x]:double(), g64[x], 1e-4, "float32 " .. m[1] .. " " .. name)
    end
  end
end

function TestGradAgree:testBlockMasks()
  -- the fused backward on a block mask's tiles (q, k strided): its
  -- gradients the weights path's, in float64, and in float32 near them
  local B, H, nq, nk = 2, 3, 150, 140
  local q = qkv.randn(B, nq, H, 16, "float64"):transpose(2, 3)
  local k = qkv.randn(B, nk, H, 16, "float64"):transpose(2, 3)
  local v = qkv.randn(B, H, nk, 8, "float64")
  local bias = qkv.randn(H, nq + nk - 1, "float64")
  local G = qkv.randn(B, H, nq, 8, "float64")
  for _, blk in ipairs{16, {32, 48}, {100, 7}} do
    local bm = qkv.block_mask(VA.sliding_window(45), nil, nil, nq, nk, {block = blk})
    local function loss(w)
      return function(q, k, v, b)
        local o = {score_mod = function(s, _, h, i, j) return s + b[{h, i - j + nk}] end, block_mask = bm,
                   weights = w}
        return (qkv.attention(q, k, v, o):double() * G):sum()
      end
    end
    local what = "block " .. (type(blk) == "table" and table.concat(blk, "x") or blk)
    local gw = qkv.grad(loss(true), {q, k, v, bias})
    local gf = qkv.grad(loss(false), {q, k, v, bias})
    local g32 = qkv.grad(loss(false), {q:float(), k:float(), v:float(), bias:float()})
    for x, name in ipairs{"dq", "dk", "dv", "dbias"} do
      V.near(gf[x], gw[x], 1e-10, what .. " fused " .. name)
      V.near(g32[x]:double(), gw[x], 2e-5, what .. " float32 " .. name)
    end
    -- the block mask alone (a partial tile cut by its spans, no score_mod)
    local function plain(w)
      return function(q, k, v)
        return (qkv.attention(q, k, v, {block_mask = bm, weights = w}):double() * G):sum()
      end
    end
    gw = qkv.grad(plain(true), {q, k, v})
    gf = qkv.grad(plain(false), {q, k, v})
    g32 = qkv.grad(plain(false), {q:float(), k:float(), v:float()})
    for x, name in ipairs{"dq", "dk", "dv"} do
      V.near(gf[x], gw[x], 1e-10, what .. " mask alone, fused " .. name)
      V.near(g32[x]:double(), gw[x], 2e-5, what .. " mask alone, float32 " .. name)
    end
  end
end

function TestGradAgree:testOnlyTheCapturedRequiresGrad()
  -- q, k, v constants: the bias alone gets a gradient, on both paths
  local nq, nk, h = 80, 90, 2
  local q, k, v = V.qkv({h}, {h}, nq, nk, 8, 8)
  local bias = qkv.randn(h, nq + nk - 1, "float64")
  local G = qkv.randn(h, nq, 8, "float64")
  local got = {}
  for _, w in ipairs{false, true} do
    got[w] = qkv.grad(function(b)
      return (qkv.attention(q, k, v, {score_mod = function(s, _, hh, i, j) return s + b[{hh, j - i + nq}] end,
                                      weights = w}) * G):sum()
    end, {bias})[1]
  end
  V.near(got[false], got[true], 1e-10, "dbias fused vs weights")
  lu.assertTrue(got[false]:abs():max():item() > 0)
end

---------------------------------------------------------------- a bug kept apart

--[[
BUG (stdlib/qkv/variants/trace.lua, deriv, commit 98f12c2): on the fused
path with autograd on, a score_mod in which a subexpression of the score
(or of a load that requires grad) other than the score itself is divided,
log'd or sqrt'd fails in the forward call: deriv calls d(a) twice for div,
log and sqrt, the second call finds a memoised symbolic derivative, and
`m ~= ZERO` (line 268) compares a symbolic value with == , whose __eq is
the tracer's error. Input: q requiring grad, score_mod (s + 1) / 2,
weights = false. Expected: out, and dq = the weights path's. Got:
"attention: score_mod: a Lua comparison (== or ~=) of symbolic values
gives a plain boolean ...". TestGradcheck's slopes/bias/softcap case
(fused) and testSlopesSoftcapDocuments fail the same way.
]]
function TestGradAgree:testDividedSubexpressionOnTheFusedPath()
  local q, k, v = V.qkv({2}, {2}, 70, 80, 8, 8)
  local G = qkv.randn(2, 70, 8, "float64")
  for _, f in ipairs{function(s, b, h, i, j) return (s + 1) / 2 end,
                     function(s, b, h, i, j) return (s * s + 1):log() end,
                     function(s, b, h, i, j) return (s * s + 1):sqrt() end} do
    local got = {}
    for _, w in ipairs{false, true} do
      got[w] = qkv.grad(function(q) return (qkv.attention(q, k, v, {score_mod = f, weights = w}) * G):sum() end,
                        {q})[1]
    end
    V.near(got[false], got[true], 1e-10, "dq fused vs weights")
  end
end

os.exit(lu.LuaUnit.run(), true)
