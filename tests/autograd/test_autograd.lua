-- test_autograd.lua: qkv.autograd (docs/autograd.md, "Gradients"): every rule of
-- stdlib/qkv/derivatives.lua against float64 finite differences
-- (qkv.test.gradcheck) on broadcast, non-contiguous and masked inputs; the
-- API as PyTorch has it (requires_grad_, backward, grad accumulation,
-- detach, no_grad, qkv.grad, grad_fn printing); the errors (in-place write
-- after save, a freed graph, integer tensors, a missing grad); the optimizers
-- and losses; and a training loop whose memory stays flat.
local lu = require "luaunit"
local t = qkv.test
local R = dofile("tests/helpers/attn_ref.lua")
local fails = R.fails

qkv.seed(17)
local function r(...) return qkv.randn(...):double() end
local function check(f, inputs, what)
  local ok, err = pcall(t.gradcheck, f, inputs)
  if not ok then lu.fail((what or "") .. ": " .. tostring(err)) end
end

---------------------------------------------------------------- rules
TestRules = {}

function TestRules:testArithmeticBroadcast()
  local a, b = r(2, 3), r(3)
  check(function(x, y) return x + y end, {a, b}, "add")
  check(function(x, y) return x - y * 2 end, {a, b}, "sub")
  check(function(x, y) return x * y end, {a, b}, "mul")
  check(function(x, y) return x / (y * y + 1) end, {a, b}, "div")
  check(function(x) return 3 / (x * x + 1) end, {a}, "number / x")
  check(function(x, y) return (x * x + 1) ^ y end, {a, b}, "pow")
  check(function(x) return 2 ^ x end, {a}, "number ^ x")
  check(function(x) return -x end, {a}, "neg")
  check(function(x, y) return qkv.maximum(x, y) + qkv.minimum(x, y * 2) end, {a, b}, "max/min")
  check(function(x) return x:t() * 2 end, {r(3, 2)}, "transposed")
end

function TestRules:testUnary()
  local x = r(2, 3)
  local pos = x:abs() + 0.5
  for _, name in ipairs{"exp", "tanh", "sigmoid", "silu", "sin", "cos", "gelu", "relu", "abs"} do
    check(function(v) return v[name](v) end, {x}, name)
  end
  check(function(v) return v:log() + v:sqrt() end, {pos}, "log, sqrt")
  -- float32's tanh (vectorised, vm/cpu/vexp.h): its rule takes the output,
  -- 1 - y^2, so the forward's error reaches the gradient (1.1e-7 here)
  local xf = (qkv.linspace(-9, 9, 1001) + 1e-3):requires_grad_()
  xf:tanh():sum():backward()
  local want = 1 - xf:detach():double():tanh() ^ 2
  local err = (xf.grad:double() - want):abs():max():item()
  lu.assertTrue(err < 3e-7, "float32 tanh's gradient off by " .. err)
end

-- every differentiable op of the list (vm/common/ops.h, qkv._ops()): its
-- rule against finite differences, on positive operands (log, sqrt, pow)
-- away from the kinks (abs, relu) and with no ties (maximum, minimum),
-- the second broadcast
function TestRules:testEveryDifferentiableOpOfTheList()
  local a, b = qkv.rand(2, 3, "float64") + 0.5, qkv.rand(3, "float64") + 0.6
  local n = 0
  for _, op in ipairs(qkv._ops()) do
    if op.grad then
      n = n + 1
      if op.arity == 2 then check(qkv[op.name], {a, b}, op.name)
      else check(qkv[op.name], {a}, op.name) end
    end
  end
  lu.assertTrue(n >= 19)
end

function TestRules:testReductions()
  local x = r(3, 4)
  check(function(v) return v:sum() end, {x}, "sum")
  check(function(v) return v:sum(2) end, {x}, "sum(2)")
  check(function(v) return v:mean(1, true) end, {x}, "mean(1, keep)")
  check(function(v) return v:var() + v:std(2) end, {x}, "var, std")
  check(function(v) return (v:max(2)) end, {x}, "max(2)")
  check(function(v) return (v:min(1, true)) end, {x}, "min(1, keep)")
  check(function(v) return v:max() end, {x}, "max()")
  -- std where the spread is 0: PyTorch's 0 there, not 0 / 0
  local z = qkv.tensor({{1, 1, 1}, {1, 2, 4}}, "float64"):requires_grad_()
  z:std(2, false, 0):sum():backward()
  local want = {{0, 0, 0}, {-0.35634832254989923, -0.08908708063747484, 0.44543540318737396}}
  local got = z.grad:tolist()
  for i = 1, 2 do
    for j = 1, 3 do
      lu.assertAlmostEquals(got[i][j], want[i][j], 1e-12, ("std grad [%d][%d]"):format(i, j))
    end
  end
end

function TestRules:testProductsAndViews()
  check(function(a, b) return a:matmul(b) end, {r(2, 3, 4), r(4, 5)}, "batched matmul")
  check(function(a, b) return a:matmul(b) end, {r(4), r(4, 2)}, "vector @ matrix")
  check(function(a, b) return a:matmul(b) end, {r(2, 4), r(4)}, "matrix @ vector")
  check(function(a, b) return a:matmul(b) end, {r(4), r(2, 4, 3)}, "vector @ batch")
  -- a dot product: its gradient is 0-d (the rule's unsqueeze(-2) of it failed)
  check(function(a, b) return a:matmul(b) end, {r(4), r(4)}, "vector @ vector")
  check(function(a, b) return qkv.mm(a, b) + qkv.bmm(a:unsqueeze(1), b:unsqueeze(1)):squeeze(1) end,
        {r(2, 3), r(3, 2)}, "mm, bmm")
  local x = r(2, 3, 4)
  check(function(v) return v:transpose(1, 3):permute(2, 1, 3):reshape(6, 4) end, {x}, "views")
  check(function(v) return v:narrow(3, 2, 2):select(1, 2):unsqueeze(1):expand(3, 3, 2) end, {x}, "narrow")
  check(function(v) return v:view(6, 4):contiguous():clone() end, {x}, "view")
  -- PyTorch's keywords in the shape tables (issue 46); permute's rule reads them
  check(function(v) return v:permute{dims = {3, 1, 2}}:reshape{shape = {4, 6}} end, {x},
        "permute{dims}")
  check(function(v) return v:view{size = {6, 4}}:narrow(1, 1, 1):expand{size = {2, 6, 4}} end,
        {x}, "view{size}")
  check(function(v) return v[2] + v[{1, {1, 3}}] end, {x}, "indexing")
  -- the fields x.T and x.mT: views that autograd records, as x:t() (they
  -- once gave a view outside the graph: x:matmul(w.T) got no gradient)
  check(function(a, b) return a:matmul(b.T) end, {r(2, 3), r(4, 3)}, "x.T")
  check(function(a, b) return a:matmul(b.mT) end, {r(2, 2, 3), r(2, 4, 3)}, "x.mT")
  local v = r(3):requires_grad_()
  lu.assertTrue(rawequal(v.T, v), "a vector's x.T is x")
  lu.assertTrue(r(2, 3):requires_grad_().T.requires_grad, "x.T requires grad")
  check(function(a, b) return qkv.cat({a, b}, 2) end, {r(2, 1), r(2, 3)}, "cat")
  check(function(a, b) return qkv.stack({a, b}, 2) end, {r(2, 3), r(2, 3)}, "stack")
  -- through float32 and back (finite differences cannot see past float32's rounding)
  local g = qkv.grad(function(v) return (v:to("float32") * 2):sum() end, {r(3)})[1]
  lu.assertEquals({g.dtype, g:tolist()}, {"float64", {2, 2, 2}})
end

function TestRules:testMasksAndSelection()
  local x = r(3, 4)
  local m = qkv.tensor{{true, false, true, true}, {false, false, true, true}, {true, true, true, false}}
  check(function(v) return v:masked_fill(m, 0) end, {x}, "masked_fill")
  check(function(v) return qkv.mask(v, m, -1) end, {x}, "mask")
  check(function(v) return qkv.mask(v, qkv.padding({2}, 4), 0) end, {x}, "mask adds dims")
  check(function(a, b) return qkv.where(m, a, b) end, {x, r(4)}, "where")
  check(function(v) return v:clamp(-0.5, 0.5) end, {x}, "clamp")
  check(function(v) return v:tril() * 2 + qkv.triu(v, 1) end, {x}, "tril, triu")
  check(function(v) return qkv.tril(v:transpose(2, 3), -1) + v:triu(2):transpose(2, 3) end,
        {r(2, 4, 3)}, "tril, triu batched, of transposed views")
  check(function(v) return v:tril(-5) + v:triu(9) + v:tril(7) end, {x}, "tril, triu past the edges")
  local q = qkv.randn(3, 3):requires_grad_()
  lu.assertEquals(tostring(q:tril().grad_fn), "<TrilBackward0>")
  lu.assertEquals(tostring(qkv.triu(q, 1).grad_fn), "<TriuBackward0>")
end

function TestRules:testPositionsAndEinsum()
  local I = function(x) return qkv.tensor(x, "int64") end
  check(function(x) return x:gather(2, I{{1, 1, 3}, {2, 2, 2}}) end, {r(2, 3)}, "gather")
  check(function(x) return x:index_select(1, I{3, 1, 3}) end, {r(3, 2)}, "index_select")
  check(function(W) return qkv.embedding(I{{1, 4}, {4, 2}}, W) end, {r(5, 3)}, "embedding")
  check(function(a, b) return qkv.einsum("bqd,bkd->bqk", a, b) end, {r(2, 3, 4), r(2, 5, 4)}, "einsum")
  check(function(a) return qkv.einsum("ii->i", a) end, {r(3, 3)}, "einsum diagonal")
  -- sort and topk send each value's gradient back where it came from
  check(function(x) return (x:sort()) end, {r(3, 4)}, "sort")
  check(function(x) return (x:sort(1, true)) end, {r(3, 4)}, "sort dim 1 descending")
  check(function(x) return (x:topk(2)) end, {r(3, 4)}, "topk")
  check(function(x) return (x:topk(2, 1, false)) end, {r(3, 4)}, "topk dim 1 smallest")
  check(function(x) return (x:sort()) end, {r(5)}, "sort 1-D")
  lu.assertEquals(tostring((r(3):requires_grad_():sort()).grad_fn), "<SortBackward0>")
end

-- the staples of stdlib/qkv/composite/: compositions of the ops above,
-- and scatter, whose rule is its own
function TestRules:testStaples()
  local I = function(x) return qkv.tensor(x, "int64") end
  local x = r(3, 4)
  check(function(v) return v:norm() end, {x}, "norm")
  check(function(v) return v:norm(1, 2) + v:norm(3, -1) end, {x}, "norm p = 1, 3")
  check(function(v) return v:norm(math.huge, 1, true) end, {x}, "norm p = inf")
  check(function(v) return qkv.norm(v:t(), "fro", {1, 2}) end, {x}, "norm over dims")
  check(function(v) return v:flip({1, -1}) end, {x}, "flip")
  check(function(v) return v:roll({1, -3}, {1, 2}) + v:roll(5) end, {x}, "roll")
  check(function(a, b) return qkv.outer(a, b) end, {r(3), r(4)}, "outer")
  check(function(a, b) return a:outer(b:narrow(1, 2, 2)) end, {r(3), r(4)}, "outer of a view")
  -- scatter: index repeats a place (the last write wins: the others get no
  -- gradient) and src is larger than index
  local idx = I{{2, 2, 4}, {1, 3, 1}}
  check(function(v, s) return qkv.scatter(v, 2, idx, s) end, {r(2, 4), r(2, 5)}, "scatter src")
  check(function(v, s) return v:scatter(1, I{{2, 1}}, s) * 3 end, {r(2, 2), r(1, 2)}, "scatter dim 1")
  check(function(v) return v:scatter(-1, idx, 0.5) end, {r(2, 4)}, "scatter a number")
  check(function(v) return v:repeat_interleave({2, 0, 1}, 1) end, {r(3, 2)}, "repeat_interleave")
  check(function(v) local a, b = v:chunk(2, -1) return a * b end, {x}, "chunk")
  check(function(v) return v:flatten():unflatten(1, {2, 6}) end, {x}, "flatten, unflatten")
  -- the norm of zeros has a zero gradient, not NaN (PyTorch's subgradient)
  local z = qkv.grad(function(v) return v:norm() + v:norm(3) end, {qkv.zeros(3, "float64")})[1]
  lu.assertEquals(z:tolist(), {0, 0, 0})
  local s = qkv.grad(function(v) return qkv.zeros(1, 3, "float64"):scatter(2, I{{3, 1, 3}}, v):sum() end,
                     {r(1, 3)})[1]
  lu.assertEquals(s:tolist(), {{0, 1, 1}})
end

function TestRules:testRows()
  local x = r(3, 5)
  check(function(v) return v:softmax() end, {x}, "softmax")
  check(function(v) return qkv.softmax(v, 1) end, {x}, "softmax(1)")
  check(function(v) return v:log_softmax() end, {x}, "log_softmax")
  check(function(v) return v:cumsum(2) end, {x}, "cumsum")
  check(function(v) return qkv.cumsum(v:t(), -2) end, {x}, "cumsum of a transposed view")
  check(function(v, w, b) return qkv.layer_norm(v, 5, w, b) end, {x, r(5), r(5)}, "layer_norm")
  check(function(v) return qkv.layer_norm(v:view(3, 5, 1):expand(3, 5, 2), {5, 2}) end, {x}, "layer_norm 2-D")
  check(function(v, w) return qkv.rms_norm(v, 5, w) end, {x, r(5)}, "rms_norm")
  check(function(v, w) return qkv.rms_norm(v, 5, w, 0.5) end, {x, r(5)}, "rms_norm, eps given")
  check(function(v) return qkv.rms_norm(v:view(3, 5, 1):expand(3, 5, 2), {5, 2}) end, {x}, "rms_norm 2-D")
end

function TestRules:testAttentionPrimitives()
  local Q, K, V = r(2, 3, 4), r(2, 5, 4), r(2, 5, 3)
  check(function(q, k) return qkv.scores(q, k) end, {Q, K}, "scores")
  check(function(q, k) return qkv.scores(q, k, {scale = 0.3}) end, {Q, K:select(1, 1)}, "scores, broadcast K")
  check(function(x, W, b) return qkv.project(x, W, b) end, {Q, r(4, 6), r(6)}, "project")
  check(function(x) return qkv.merge(qkv.heads(x, 2)) * x end, {r(3, 4)}, "heads, merge")
  check(function(x, W1, b1, W2, b2) return qkv.align(x, {W1, b1, W2, b2}) end,
        {r(3, 4), r(4, 5), r(5), r(5, 2), r(2)}, "align mlp")
  local m = qkv.padding({5, 2}, 5)
  for _, opts in ipairs{{}, {mask = m}, {causal = true}, {mask = m, causal = true},
                        {key_padding_mask = m:squeeze(2):logical_not()}, {weights = false}} do
    check(function(q, k, v) return (qkv.attention(q, k, v, opts)) end, {Q, K, V}, "attention")
  end
  -- n_q > n_k with causal: rows with no key give zeros, and no gradient
  check(function(q, k, v) return (qkv.attention(q, k, v, {causal = true})) end,
        {r(4, 2), r(2, 2), r(2, 3)}, "attention, empty rows")
  check(function(a, b) return qkv.nn.cosine_similarity(a, b) end, {r(3, 4), r(3, 4)}, "cosine")
  -- mse_loss's one node: each reduction, target broadcast, either side alone
  for _, red in ipairs{"mean", "sum", "none"} do
    check(function(a, b) return qkv.nn.mse_loss(a, b, red) end, {r(3, 4), r(4)}, "mse " .. red)
  end
  local tgt = r(3, 4)
  check(function(a) return qkv.nn.mse_loss(a, tgt) * 3 end, {r(3, 4)}, "mse, target no grad")
  check(function(b) return qkv.nn.mse_loss(tgt, b, "sum") end, {r(3, 4)}, "mse, input no grad")
  local a = r(2, 3):requires_grad_()
  local loss = qkv.nn.mse_loss(a, qkv.zeros(2, 3, "float64"))
  lu.assertEquals(tostring(loss.grad_fn), "<MseLossBackward0>")
  loss:backward()
  qkv.test.assertClose(a.grad, a:detach() * (2 / 6))
end

-- the fused path's backward kernel (tiles of 128 queries x 256 keys: one
-- key tile, whose scores are kept from the first pass, and two, whose are
-- made again) against the composed path's gradients, masks, causal, n_q > n_k
-- and n_q < n_k included
function TestRules:testFusedBackwardAcrossTiles()
  qkv.seed(21)
  for _, nn in ipairs{{300, 200}, {140, 300}} do
    local Q, K, V = r(2, nn[1], 16), r(2, nn[2], 16), r(2, nn[2], 8)
    local m = qkv.rand(2, 1, nn[2]):gt(0.2)
    for _, opts in ipairs{{}, {mask = m}, {causal = true}, {mask = m, causal = true}} do
      local function f(fused)
        return function(q, k, v)
          local o = qkv.attention(q, k, v, {mask = opts.mask, causal = opts.causal, weights = not fused})
          return (o * o):sum()
        end
      end
      local a = qkv.grad(f(true), {Q, K, V})
      local b = qkv.grad(f(false), {Q, K, V})
      for i = 1, 3 do t.assertClose(a[i], b[i], {rtol = 1e-9, atol = 1e-12}) end
      -- float32 has a kernel path of its own (float exps, vectorised rows)
      local Q32, K32, V32 = Q:float(), K:float(), V:float()
      local a32 = qkv.grad(f(true), {Q32, K32, V32})
      for i = 1, 3 do
        lu.assertEquals(a32[i].dtype, "float32")
        t.assertClose(a32[i]:double(), b[i], {rtol = 1e-3, atol = 1e-4})
      end
    end
  end
  local q = qkv.randn(3, 4):requires_grad_()
  lu.assertEquals(tostring(qkv.attention(q, q, q, {weights = false}).grad_fn),
                  "<ScaledDotProductFlashAttentionBackward0>")
end

-- weights = true: one node for out and W, whose backward is analytic; the
-- loss uses both (or W alone), with masks of every kind, causal, PyTorch's
-- is_causal with n_q ~= n_k, and batch dims that broadcast
function TestRules:testAttentionWeightsBackward()
  qkv.seed(23)
  local Q, K, V = r(2, 1, 4, 3), r(3, 5, 3), r(2, 3, 5, 2)
  local G, H = r(2, 3, 4, 2), r(2, 3, 4, 5)
  local m = qkv.rand(2, 1, 4, 5):gt(0.3)
  m[{1, 1, 2}] = false                   -- a row no key is left for: no gradient
  local cases = {
    {mask = m, causal = true}, {mask = m:double()}, {causal = true, scale = 0.7},
    {key_padding_mask = qkv.tensor{{false, false, true, false, true}}:expand(3, 5)},
    {is_causal = true}, {mask = m, is_causal = true},
  }
  for i, opts in ipairs(cases) do
    check(function(q, k, v)
      local out, w = qkv.attention(q, k, v, opts)
      return (out * G):sum() + (w * w * H):sum()
    end, {Q, K, V}, "attention with weights, out and W used, case " .. i)
    check(function(q, k, v)
      local _, w = qkv.attention(q, k, v, opts)
      return (w * H):sum()
    end, {Q, K, V}, "attention with weights, W alone, case " .. i)
  end
  -- PyTorch's is_causal with n_q ~= n_k: a mask aligned to the first key
  check(function(q, k, v)
    local out, w = qkv.attention(q, k, v, {is_causal = true, mask = qkv.tensor{true, true, false}})
    return (out * out):sum() + w:sum(-1):sum()
  end, {r(4, 2), r(3, 2), r(3, 3)}, "is_causal, n_q > n_k")
  local q = qkv.randn(3, 4):requires_grad_()
  local out, w = qkv.attention(q, q, q)
  lu.assertEquals(tostring(out.grad_fn), "<AttentionWeightsBackward0>")
  lu.assertTrue(rawequal(out.grad_fn, w.grad_fn), "one node for out and W")
  -- backward from W after one from out: the node was freed, as PyTorch's
  out:sum():backward()
  fails("freed", function() w:sum():backward() end)
end

-- float16 and bfloat16 both ways: the fused forward in the half dtype and
-- its backward through the float32 kernel, or the weights' analytic one in
-- float32; each gradient in its input's dtype against the float64 one at
-- the same (rounded) inputs, within half precision
function TestRules:testHalfAttentionBackward()
  qkv.seed(29)
  local TOL = {float16 = 2e-3, bfloat16 = 1e-2}
  local function rel(a, b)
    local d = a:double() - b
    return math.sqrt((d * d):sum():item() / (b * b):sum():item())
  end
  local m = qkv.rand(2, 1, 90):gt(0.2)
  for _, dt in ipairs{"float16", "bfloat16"} do
    local Q, K, V = r(2, 70, 16):to(dt), r(2, 90, 16):to(dt), r(1, 90, 8):to(dt)
    local G = r(2, 70, 8):to(dt)
    for _, weights in ipairs{false, true} do
      for _, opts in ipairs{{}, {mask = m, causal = true}} do
        local function loss(q, k, v)
          local o = qkv.attention(q, k, v, {mask = opts.mask, causal = opts.causal, weights = weights})
          return (o * G:to(q.dtype)):sum()
        end
        local got = qkv.grad(loss, {Q, K, V})
        local want = qkv.grad(loss, {Q:double(), K:double(), V:double()})
        for i, name in ipairs{"dQ", "dK", "dV"} do
          local what = ("%s %s weights = %s causal = %s"):format(dt, name, tostring(weights),
                                                                 tostring(opts.causal))
          lu.assertEquals(got[i].dtype, dt, what)
          lu.assertEquals(got[i].shape, ({Q, K, V})[i].shape, what)
          local e = rel(got[i], want[i])
          lu.assertTrue(e < TOL[dt], ("%s: relative error %.3g"):format(what, e))
        end
      end
    end
    local q = Q:detach():requires_grad_()
    lu.assertEquals(tostring(qkv.attention(q, K, V, {weights = false}).grad_fn),
                    "<ScaledDotProductFlashAttentionBackward0>")
  end
end

-- no key at all (n_k = 0): the output is zeros and so is Q's gradient, in
-- memory a freed tensor of sevens had held (the kernel once left it)
function TestRules:testFusedBackwardWithNoKeys()
  for _ = 1, 3 do
    local junk = qkv.full({2, 300, 4}, 7)
    junk = nil
    collectgarbage()
    local q = qkv.randn(2, 300, 4):requires_grad_()
    local k, v = qkv.randn(2, 0, 4):requires_grad_(), qkv.randn(2, 0, 5):requires_grad_()
    qkv.attention(q, k, v, {weights = false}):sum():backward()
    t.assertTensorEqual(q.grad, qkv.zeros(2, 300, 4))
    lu.assertEquals(k.grad.shape, k.shape)
  end
end

-- an op of mixed dtypes (float32 + bfloat16 gives float32) hands each
-- input its gradient in that input's dtype, as PyTorch's engine: the
-- bfloat16 product's backward then meets bfloat16 (it raised "the dtypes
-- must agree" before), and the values are the float64 ones rounded
function TestRules:testMixedDtypeOpsGiveEachInputItsDtype()
  local x = qkv.randn(3, 4)
  local w = qkv.randn(4, 4):requires_grad_()
  local z = x:bfloat16():matmul(w:bfloat16())          -- bfloat16, tracked
  local y = x + z                                       -- float32
  lu.assertEquals(y.dtype, "float32")
  local loss = (y * y):sum()
  loss:backward()
  lu.assertEquals(w.grad.dtype, "float32")
  -- d/dw sum((x + xw)^2) = x^T 2 (x + xw), with bfloat16's roundings
  local xb = x:bfloat16():double()
  local want = xb:t():matmul((2 * y:double()):bfloat16():double())
  t.assertClose(w.grad:double(), want, {rtol = 2e-2, atol = 1e-2})
end

-- mean's backward divides by n, a number: over more than 65504 elements
-- 1 / n of a float16 gradient is 1 / n rounded once (the number stays in
-- float32 with a half, as PyTorch's), not 0 from n rounded to inf first
function TestRules:testHalfMeanOverManyElements()
  for _, dt in ipairs{"float16", "bfloat16"} do
    local x = qkv.ones(100000, dt):requires_grad_()
    x:mean():backward()
    lu.assertEquals(x.grad.dtype, dt)
    local want = qkv.tensor(1 / 100000, "float64"):to(dt)
    lu.assertTrue(x.grad:eq(want):all():item(), dt .. " mean()")
    local y = qkv.ones(70000, 2, dt):requires_grad_()
    y:mean(1):sum():backward()
    want = qkv.tensor(1 / 70000, "float64"):to(dt)
    lu.assertTrue(y.grad:eq(want):all():item(), dt .. " mean(1)")
  end
  lu.assertEquals(qkv.tensor(1 / 100000, "float64"):to("float16"):item(), 1.0013580322265625e-05)
end

---------------------------------------------------------------- the API
TestAPI = {}

function TestAPI:testLeavesAndAccumulation()
  local x = qkv.tensor({1, 2, 3}, "float64")
  lu.assertFalse(x.requires_grad)
  lu.assertTrue(rawequal(x:requires_grad_(), x))
  lu.assertTrue(x.requires_grad)
  lu.assertTrue(x.is_leaf)
  lu.assertNil(x.grad)
  local y = (x * x):sum()
  lu.assertFalse(y.is_leaf)
  lu.assertEquals(tostring(y.grad_fn), "<SumBackward0>")
  local dev = x.device == "cuda" and "device='cuda', " or ""
  lu.assertEquals(tostring(y), "tensor(14., " .. dev .. "dtype=float64, grad_fn=<SumBackward0>)")
  lu.assertEquals(tostring(x), "tensor([1., 2., 3.], " .. dev .. "dtype=float64, requires_grad=True)")
  y:backward()
  lu.assertEquals(x.grad:tolist(), {2, 4, 6})
  ;(x * 3):sum():backward()
  lu.assertEquals(x.grad:tolist(), {5, 7, 9}, "gradients accumulate")
  x.grad = nil
  lu.assertNil(x.grad)
  local z = x * 2
  z:backward(qkv.tensor({1, 0, -1}, "float64"))
  lu.assertEquals(x.grad:tolist(), {2, 0, -2})
  lu.assertFalse(x:detach().requires_grad)
  lu.assertFalse(qkv.no_grad(function() return x * 2 end).requires_grad)
  lu.assertTrue(qkv.no_grad(qkv.enable_grad, function() return x * 2 end).requires_grad)
  local g = qkv.grad(function(v) return (v * v * v):sum() end, {x})
  lu.assertEquals(g[1]:tolist(), {3, 12, 27})
  lu.assertEquals(x.grad:tolist(), {2, 0, -2}, "qkv.grad leaves .grad alone")
end

function TestAPI:testErrors()
  local x = qkv.ones(3):requires_grad_()
  local y = x * 2
  fails("backward: the output has 3 elements; a gradient (grad) is needed", function() y:backward() end)
  fails("backward: grad is (2,) but the output is (3,)", function() y:backward(qkv.ones(2)) end)
  local s = (x * x):sum()
  s:backward()
  fails("graph was freed", function() s:backward() end)
  local a = qkv.ones(3):requires_grad_()
  local b = qkv.ones(3)
  local c = (a * b):sum()
  b[1] = 5
  fails("backward: a tensor MulBackward saved was modified in place (version 0, now 1)",
        function() c:backward() end)
  fails("requires_grad_: only float tensors can require grad, x is int64",
        function() qkv.ones(2, "int64"):requires_grad_() end)
  fails("requires_grad_: x is the result of MulBackward, not a leaf",
        function() (a * 2):requires_grad_() end)
  fails("backward: y does not require grad", function() qkv.ones(1):backward() end)
  fails("grad: f must return a tensor", qkv.grad, function() return 1 end, {qkv.ones(1)})
  -- the API fuzzer's finding: options that are not a table
  fails("bad argument #3 to 'gradcheck' (options must be a table, got number)",
        qkv.test.gradcheck, function(x) return x end, {qkv.ones(2, "float64")}, 1)
  fails("bad argument #3 to 'gradcheck' (unknown option 'atl' (did you mean 'atol'?))",
        qkv.test.gradcheck, function(x) return x end, {qkv.ones(2, "float64")}, {atl = 1})
  fails("bad argument #3 to 'gradcheck' (eps must be a positive number, got 0)",
        qkv.test.gradcheck, function(x) return x end, {qkv.ones(2, "float64")}, {eps = 0})
  -- the inputs are a list and nothing else: options inside it, or a nil
  -- that ended it early, were ignored (issue 46)
  fails("bad argument #2 to 'gradcheck' (unknown key 'eps' in inputs (it holds its 1 item only))",
        qkv.test.gradcheck, function(x) return x end, {qkv.ones(2, "float64"), eps = 1})
  fails("bad argument #2 to 'gradcheck' (input 2 must be a float64 tensor)",
        qkv.test.gradcheck, function(x) return x end, {qkv.ones(2, "float64"), nil,
                                                      qkv.ones(2, "float64")})
  fails("grad: unknown key 'n' in inputs", qkv.grad, function(x) return x:sum() end,
        table.pack(qkv.ones(1)))
  -- a backward that gives a gradient of another shape than its input's
  -- (a custom op through record) is an error naming the node, as
  -- PyTorch's engine has it; it was summed into the input's gradient, and
  -- gradcheck compared its first elements alone. gradcheck of no input
  -- checked nothing and passed
  local A = require "qkv.autograd"
  local function bad(x)
    local y = A.no_grad(function() return x * 2 end)
    return A.record("BadShape", y, {x}, function(g) return qkv.cat({g * 2, qkv.full({3}, 7, g.dtype)}) end)
  end
  local w = qkv.ones(3, "float64"):requires_grad_()
  fails("backward: BadShape gave a gradient of shape (6,) for its input 1, which is (3,)",
        function() bad(w):sum():backward() end)
  fails("gradshape", function()
    local ok, err = pcall(qkv.test.gradcheck, bad, {qkv.ones(3, "float64")})
    error(ok and "gradshape: passed" or (err:find("BadShape gave a gradient", 1, true) and "gradshape" or err))
  end)
  fails("bad argument #2 to 'gradcheck' (no input tensor to check the gradient of)",
        qkv.test.gradcheck, function() return qkv.ones(1, "float64") end, {})
  -- a closed tensor is an error naming the function the script called
  local closed
  do
    local c <close> = qkv.ones(3, "float64")
    closed = c
  end
  fails("bad argument #2 to 'gradcheck' (tensor was closed)",
        qkv.test.gradcheck, function(x) return x end, {closed})
  fails("backward: grad is a closed tensor", function() (x * 2):backward(closed) end)
  -- errors of the ops keep naming them, at the script's line
  local line = debug.getinfo(1, "l").currentline + 1
  local ok, msg = pcall(function() return a:sum(5) end)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "test_autograd.lua:" .. line .. ": bad argument #2 to 'qkv.")
  lu.assertStrContains(msg, "sum' (dim 5 out of range")
end

-- autograd records no in-place op: under grad mode an in-place op on a
-- tensor it tracks (a leaf that requires grad, or a recorded op's output,
-- a view of one included) or with a tracked operand is an error naming the
-- op, where it gave wrong gradients silently (y = x * 2; y:mul_(3) sent
-- back 2, not 6); under no_grad each runs, as an optimizer's step does
function TestAPI:testInPlaceOnTrackedTensorsIsAnError()
  local x = qkv.ones(3, "float64"):requires_grad_()
  local idx, src = qkv.tensor({1}, "int64"), qkv.ones(1, "float64")
  local ops = {
    {"mul_", function(y) y:mul_(3) end}, {"add_", function(y) y:add_(1) end},
    {"sub_", function(y) y:sub_(1) end}, {"div_", function(y) y:div_(2) end},
    {"fill_", function(y) y:fill_(0) end}, {"zero_", function(y) y:zero_() end},
    {"copy_", function(y) y:copy_(qkv.zeros(3, "float64")) end},
    {"clamp_", function(y) y:clamp_(0, 2) end},
    {"masked_fill_", function(y) y:masked_fill_(qkv.ones(3, "bool"), 0) end},
    {"index_add_", function(y) y:index_add_(1, idx, src) end},
    {"scatter_add_", function(y) y:scatter_add_(1, idx, src) end},
    {"scatter_", function(y) y:scatter_(1, idx, src) end},         -- a composite: not copy_'s error
    {"scatter_", function(y) y:scatter_(1, idx, 5, "add") end},
    {"index", function(y) y[1] = 100 end}, {"index", function(y) y[{{1, 2}}] = 0 end},
  }
  for _, c in ipairs(ops) do
    fails({c[1] .. ": x requires grad", "records no in-place op"}, c[2], x)
    fails(c[1] .. ": x requires grad", c[2], x * 2)                -- a recorded op's output
    fails(c[1] .. ": x requires grad", c[2], (x * 2):narrow(1, 1, 3))
    qkv.no_grad(c[2], x * 2)                                         -- no graph: runs
  end
  -- an operand that requires grad, into a tensor that does not
  fails("add_: an operand requires grad", function() qkv.zeros(3, "float64"):add_(x) end)
  fails("copy_: an operand requires grad", function() qkv.zeros(3, "float64"):copy_(x) end)
  fails("scatter_: an operand requires grad",
        function() qkv.zeros(3, "float64"):scatter_(1, idx, x:narrow(1, 1, 1)) end)
  fails("index: an operand requires grad", function() local z = qkv.zeros(3, "float64"); z[{{1, 3}}] = x end)
  -- under no_grad the leaf itself (an optimizer's step), and x.grad's field
  qkv.no_grad(function() x:mul_(2) end)
  lu.assertEquals(x:tolist(), {2, 2, 2})
  x.grad = qkv.ones(3, "float64")
  lu.assertEquals(x.grad:tolist(), {1, 1, 1})
  -- a detached tensor is no graph's: written in place freely (a saved one
  -- is still caught at backward by its version)
  local y = x * 2
  y:detach():mul_(3)
  lu.assertEquals(y:tolist(), {12, 12, 12})
  -- untracked tensors, grad mode on: as before
  local z = qkv.ones(3, "float64")
  z:mul_(3)
  z[1] = 0
  lu.assertEquals(z:tolist(), {0, 3, 3})
end

-- a script's backward error names its place once, as any error does
-- ("bw.lua:4: backward: ...", not "bw.lua:4: /tmp/.../bw.lua:4: backward: ...")
function TestAPI:testScriptErrorsNameTheirPlaceOnce()
  local shell = dofile("tests/helpers/shell.lua")
  local exe = arg and arg[-1] or "build/qkv"
  local dir = shell.tmpdir()
  local cases = {
    {"local x = qkv.ones(3):requires_grad_()\nlocal y = (x * 2):sum()\n\ny:backward(qkv.ones(2))\n",
     ":4: backward: grad is (2,) but the output is ()"},
    -- an in-place op on a tracked tensor, at its own line
    {"local x = qkv.ones(3):requires_grad_()\nlocal y = x:exp()\ny:add_(1)\n",
     ":3: add_: x requires grad"},
    {"local x = qkv.ones(3):requires_grad_()\nlocal y = x:exp()\ny:detach():add_(1)\ny:sum():backward()\n",
     ":4: backward: a tensor ExpBackward saved was modified in place (version 0, now 1)"},
    -- an error of the script's own inside no_grad keeps its own line
    {"qkv.no_grad(function()\n  error('boom')\nend)\n", ":2: boom"},
    -- an op's error inside qkv.grad's f, at f's line, by the one name
    -- the function has (bindings/lqkv.c: package.loaded["qkv.Tensor"])
    {"local x = qkv.ones(2)\nqkv.grad(function(a)\n  return a:sum(3)\nend, {x})\n",
     ":3: bad argument #2 to 'qkv.sum' (dim 3 out of range [-1, 1])"},
  }
  for i, c in ipairs(cases) do
    local path = dir .. "/bw" .. i .. ".lua"
    shell.write(path, c[1])
    local out = shell.exe(exe, path)
    local first = out:match("^[^\n]*")
    lu.assertEquals(first:sub(1, #exe + #path + #c[2] + 2), exe .. ": " .. path .. c[2], "case " .. i)
  end
  os.execute("rm -rf " .. shell.quote(dir))
end

---------------------------------------------------------------- training
TestTraining = {}

function TestTraining:testLossesAndOptimizers()
  qkv.seed(3)
  local x = qkv.randn(16, 4)
  local w_true = qkv.tensor{{1}, {-2}, {0.5}, {3}}
  local y = x:matmul(w_true)
  for _, make in ipairs{function(p) return qkv.optim.SGD(p, {lr = 0.1, momentum = 0.5}) end,
                        function(p) return qkv.optim.Adam(p, {lr = 0.05}) end} do
    local model = qkv.nn.Linear(4, 1)
    local opt = make(model)
    local first, last
    for step = 1, 200 do
      opt:zero_grad()
      local loss = qkv.nn.mse_loss(model(x), y)
      loss:backward()
      opt:step()
      first = first or loss:item()
      last = loss:item()
    end
    lu.assertTrue(last < first * 1e-3, string.format("loss %g -> %g", first, last))
  end
  -- cross_entropy against its definition
  local logits = r(3, 4):requires_grad_()
  local targets = qkv.tensor({2, 4, 1}, "int64")
  local ce = qkv.nn.cross_entropy(logits, targets)
  local lsm = logits:detach():log_softmax():tolist()
  lu.assertAlmostEquals(ce:item(), -(lsm[1][2] + lsm[2][4] + lsm[3][1]) / 3, 1e-12)
  check(function(l) return qkv.nn.cross_entropy(l, targets) end, {logits:detach()}, "cross_entropy")
  fails("cross_entropy: targets must be classes 1 to 4", qkv.nn.cross_entropy, logits, qkv.tensor({5, 1, 1}, "int64"))
  fails("SGD: parameter 1 does not require grad", qkv.optim.SGD, {qkv.ones(2)})
  fails("Adam: option 'lr' must be a number >= 0, got -1", qkv.optim.Adam, {qkv.ones(1):requires_grad_()}, {lr = -1})
end

function TestTraining:testModulesRequireGradAndZeroGrad()
  local m = qkv.nn.MultiHeadAttention(8, 2, {bias = true})
  for name, p in m:named_parameters() do lu.assertTrue(p.requires_grad, name) end
  local out = m(qkv.randn(2, 5, 8))
  out:sum():backward()
  for name, p in m:named_parameters() do lu.assertNotNil(p.grad, name) end
  lu.assertTrue(rawequal(m:zero_grad(), m))
  for name, p in m:named_parameters() do lu.assertNil(p.grad, name) end
end

-- the graph is freed with the tensors: memory stays flat over many steps
function TestTraining:testMemoryStaysFlat()
  qkv.seed(5)
  local model = qkv.nn.Sequential(qkv.nn.Linear(8, 16), qkv.nn.GELU(), qkv.nn.Linear(16, 1))
  local opt = qkv.optim.SGD(model, {lr = 0.01})
  local x, y = qkv.randn(32, 8), qkv.randn(32, 1)
  local marks = {}
  for step = 1, 10000 do
    opt:zero_grad()
    qkv.nn.mse_loss(model(x), y):backward()
    opt:step()
    if step % 2500 == 0 then
      collectgarbage()
      marks[#marks + 1] = qkv.memory()
    end
  end
  lu.assertEquals(marks[#marks], marks[1], "bytes held by tensors after 2500 and 10000 steps")
end

os.exit(lu.LuaUnit.run(), true)
