-- test_autocast.lua: qkv.autocast (stdlib/qkv/amp/autocast.lua) against
-- PyTorch's torch.autocast("cpu") (tests/fixtures/amp/torch_autocast.lua,
-- written by torch_autocast.py): the dtype each op gives for float32 and
-- bfloat16 inputs under bfloat16 and float16 regions, the values of
-- products, attention and a loss, and a small model's gradients (forward
-- under autocast, backward after); regions as functions and as <close>
-- variables, nested, disabled, per coroutine; float64 never cast; the
-- GPU's float32 list on the device; the errors.
local lu = require "luaunit"
local T = dofile("tests/fixtures/amp/torch_autocast.lua")
local F = qkv.nn.functional

qkv.set_default_device("cpu")

local function t32(v) return qkv.tensor(v, "float32") end

-- qkv's counterpart of each op in the fixture, on inputs cast by c
local a, b = t32(T.a), t32(T.b)
local a3, b3 = qkv.stack{a, a * 0.5}, qkv.stack{b, b * 2}
local w, bias = t32(T.w), t32(T.bias)
local q, k, v = t32(T.q), t32(T.k), t32(T.v)
local tgt = qkv.tensor(T.t, "int64")
local OPS = {
  matmul = function(c) return c(a):matmul(c(b)) end,
  mm = function(c) return qkv.mm(c(a), c(b)) end,
  bmm = function(c) return qkv.bmm(c(a3), c(b3)) end,
  linear = function(c) return F.linear(c(a), c(w), c(bias)) end,
  scaled_dot_product_attention = function(c) return F.scaled_dot_product_attention(c(q), c(k), c(v)) end,
  softmax = function(c) return c(a):softmax(2) end,
  log_softmax = function(c) return c(a):log_softmax(2) end,
  layer_norm = function(c) return F.layer_norm(c(a), {8}) end,
  rms_norm = function(c) return F.rms_norm(c(a), {8}) end,
  exp = function(c) return c(a):exp() end,
  log = function(c) return (c(a):abs() + 1):log() end,
  sum = function(c) return c(a):sum() end,
  cumsum = function(c) return c(a):cumsum(2) end,
  gelu = function(c) return c(a):gelu() end,
  relu = function(c) return c(a):relu() end,
  tanh = function(c) return c(a):tanh() end,
  add = function(c) return c(a) + c(a) end,
  mul = function(c) return c(a) * c(a) end,
  mse_loss = function(c) return F.mse_loss(c(a), c(a) * 0.5) end,
  cross_entropy = function(c) return F.cross_entropy(c(a), tgt) end,
  nll_loss = function(c) return F.nll_loss(c(a), tgt) end,
}

TestAutocast = {}

-- every op's dtype as PyTorch's CPU autocast gives it
function TestAutocast:testPolicyIsPyTorchs()
  for key, case in pairs{bf16_from_f32 = {"bfloat16", "float32"}, bf16_from_bf16 = {"bfloat16", "bfloat16"},
                         f16_from_f32 = {"float16", "float32"}} do
    local want = T[key]
    local n = 0
    for name, f in pairs(OPS) do
      local got = qkv.autocast({device_type = "cpu", dtype = case[1]}, f, function(x) return x:to(case[2]) end)
      lu.assertEquals(key .. " " .. name .. " " .. got.dtype, key .. " " .. name .. " " .. want[name])
      n = n + 1
    end
    lu.assertEquals(n, 21, "every op of the fixture")
  end
  -- outside a region each op keeps its inputs' dtype
  lu.assertEquals(a:matmul(b).dtype, "float32")
  lu.assertEquals(a:bfloat16():softmax(2).dtype, "bfloat16")
end

-- got within rtol of want, relative to each value or (near 0) to want's largest
local function near(got, want, rtol, what)
  got = got:double()
  local w = qkv.tensor(want, "float64")
  local big = w:abs():max():item()
  local err = ((got - w):abs() - (w:abs() * rtol) - big * rtol / 4):max():item()
  lu.assertTrue(err <= 0, ("%s: off by %g past %g relative"):format(what, err, rtol))
end

-- values under bfloat16 autocast: the products rounded to bfloat16 as
-- PyTorch's (float32 sums of bfloat16 products); softmax and the loss of
-- bfloat16 inputs
function TestAutocast:testValuesMatchPyTorch()
  local r = qkv.autocast({device_type = "cpu"}, function()
    local mm = a:matmul(b)
    local lin = F.linear(a, w, bias)
    return {matmul = mm, linear = lin,
            attention = F.scaled_dot_product_attention(q, k, v, {is_causal = true}),
            softmax = mm:softmax(2), cross_entropy = F.cross_entropy(lin, tgt)}
  end)
  for name, x in pairs(r) do
    lu.assertEquals(x.dtype, T[name].dtype, name)
    -- two bfloat16 roundings apart at most (2^-7 relative: PyTorch's linear
    -- rounds product and bias once, qkv's project the product and then the
    -- sum), the loss of bfloat16 logits in float32
    near(x, T[name].value, name == "cross_entropy" and 1e-2 or 2 ^ -7, name)
  end
end

-- a model's forward under autocast, its backward after: float32 parameters
-- get float32 gradients, as PyTorch's, through bfloat16 products
function TestAutocast:testModelGradients()
  local M = T.model
  local ps = {t32(M.w1), t32(M.b1), t32(M.w2), t32(M.b2)}
  for _, p in ipairs(ps) do p:requires_grad_() end
  local x, y = t32(M.x), qkv.tensor(M.y, "int64")
  local logits, loss
  do
    local ac <close> = qkv.autocast{device_type = "cpu", dtype = "bfloat16"}
    logits = F.linear(F.linear(x, ps[1], ps[2]):relu(), ps[3], ps[4])
    loss = F.cross_entropy(logits, y)
  end
  lu.assertEquals(logits.dtype, M.logits_dtype)
  lu.assertEquals(loss.dtype, "float32")
  lu.assertAlmostEquals(loss:item(), M.loss, 2e-2)
  loss:backward()
  for i, p in ipairs(ps) do
    lu.assertEquals(p.grad.dtype, "float32", "grad " .. i)
    near(p.grad, M.grads[i], 1e-2, "grad " .. i)
  end
  -- without autocast the same model's float32 gradients differ from these
  -- by more than float32 rounding: the products did run in bfloat16
  local f = {}
  for i, p in ipairs(ps) do f[i] = p:detach():clone():requires_grad_() end
  F.cross_entropy(F.linear(F.linear(x, f[1], f[2]):relu(), f[3], f[4]), y):backward()
  lu.assertTrue((f[1].grad - ps[1].grad):abs():max():item() > 1e-5, "bfloat16 products")
end

-- a residual connection adds a float32 input to a bfloat16 product (the
-- sum float32): the backward hands the product its gradient in bfloat16
-- (it raised "the dtypes must agree" in the product's backward before);
-- the gradient is the float64 one within bfloat16's rounding
function TestAutocast:testResidualBackward()
  local x = t32(T.a)
  local w = qkv.eye(8):float():requires_grad_()
  local y = qkv.autocast({device_type = "cpu"}, function() return x + F.linear(x, w) end)
  lu.assertEquals(y.dtype, "float32")
  local loss = (y * y):sum()
  loss:backward()
  -- d/dw sum((x + x w^T)^2) = 2 (x + x w^T)^T x = 4 x^T x at w = I
  local xd = x:double()
  near(w.grad, (4 * xd:t():matmul(xd)):tolist(), 2e-2, "w.grad")
end

-- PyTorch's cast cache: a parameter's cast is made once in a region and
-- shared by its uses (the live memory of four kept uses holds one cast,
-- not four), dropped when the outermost region closes; gradients through
-- the shared cast add up; a write into the parameter, a backward that
-- freed the cast's node, or a cast made under no_grad is cast again
function TestAutocast:testCastCache()
  local x, w = qkv.randn(2, 512), qkv.randn(512, 512):requires_grad_()    -- w's cast: 0.5 MB
  local CAST = 512 * 512 * 2
  local function live(cache)
    collectgarbage()
    local before, outs = qkv.memory(), {}
    local ac <close> = qkv.autocast{device_type = "cpu", cache_enabled = cache}
    for i = 1, 4 do outs[i] = F.linear(x, w) end
    collectgarbage()
    return qkv.memory() - before
  end
  local kept, shared = live(false), live(true)
  lu.assertTrue(kept - shared >= 3 * CAST, ("%d bytes without the cache, %d with"):format(kept, shared))
  collectgarbage()
  local before = qkv.memory()
  qkv.autocast({device_type = "cpu"}, function() F.linear(x, w) end)
  collectgarbage()
  lu.assertEquals(qkv.memory(), before, "the cache is dropped with the region")
  -- gradients: two uses, two backwards in one region, a write in between
  local AC = {device_type = "cpu"}
  local one = qkv.autocast(AC, function() return F.linear(x, w):float():sum() end)
  one:backward()
  local g = w.grad:clone()
  w.grad = nil
  qkv.autocast(AC, function() return (F.linear(x, w) + F.linear(x, w)):float():sum() end):backward()
  near(w.grad, (2 * g):tolist(), 1e-6, "two uses")
  w.grad = nil
  do
    local ac <close> = qkv.autocast(AC)
    for _ = 1, 2 do F.linear(x, w):float():sum():backward() end   -- the node freed, cast again
    near(w.grad, (2 * g):tolist(), 1e-6, "two backwards")
    local a = F.linear(x, w)
    qkv.no_grad(function() w:mul_(2) end)
    near(F.linear(x, w), (2 * a:double()):tolist(), 1e-2, "after a write")
    qkv.no_grad(function() w:div_(2) end)
  end
  w.grad = nil
  do
    local ac <close> = qkv.autocast(AC)
    qkv.no_grad(function() return F.linear(x, w) end)
    F.linear(x, w):float():sum():backward()
  end
  near(w.grad, g:tolist(), 1e-6, "a cast under no_grad is not shared")
  -- nn.Linear's weight too (its forward casts the weight, not its view)
  local lin = qkv.nn.Linear(512, 512, {bias = false})
  local function lin_live(cache)
    collectgarbage()
    local before, outs = qkv.memory(), {}
    local ac <close> = qkv.autocast{device_type = "cpu", cache_enabled = cache}
    for i = 1, 4 do outs[i] = lin(x) end
    collectgarbage()
    return qkv.memory() - before
  end
  lu.assertTrue(lin_live(false) - lin_live(true) >= 3 * CAST)
end

-- a transposed view of a contiguous weight (project's W = weight:t(), as
-- qkv.bert keeps them) is cast as that weight and seen transposed again:
-- the same values and gradient as a cast of the view, one contiguous pass
function TestAutocast:testTransposedCast()
  local x, w = qkv.randn(3, 40), qkv.randn(24, 40):requires_grad_()
  local W = w:t()                                          -- (40, 24), not contiguous
  local AC = {device_type = "cpu"}
  local got = qkv.autocast(AC, function() return qkv.project(x, W) end)
  local want = qkv.project(x:bfloat16(), W:contiguous():bfloat16())
  lu.assertEquals(got.dtype, "bfloat16")
  qkv.test.assertTensorEqual(got, want)
  qkv.autocast(AC, function() return qkv.project(x, w:t()):float():sum() end):backward()
  local g = w.grad:clone()
  w.grad = nil
  qkv.project(x:bfloat16(), w:t():bfloat16()):float():sum():backward()
  qkv.test.assertTensorEqual(g, w.grad)
  -- a view of neither layout, and 3-D batches of them
  local V = qkv.randn(40, 2, 24):select(2, 1)
  qkv.test.assertTensorEqual(qkv.autocast(AC, function() return qkv.project(x, V) end),
                             qkv.project(x:bfloat16(), V:bfloat16()))
  local B = qkv.randn(2, 24, 40):transpose(2, 3)
  qkv.test.assertTensorEqual(qkv.autocast(AC, function() return qkv.matmul(x, B) end),
                             qkv.matmul(x:bfloat16(), B:contiguous():bfloat16()))
end

function TestAutocast:testRegions()
  lu.assertFalse(qkv.is_autocast_enabled("cpu"))
  lu.assertEquals(qkv.get_autocast_dtype("cpu"), "bfloat16")
  lu.assertEquals(qkv.get_autocast_dtype("cuda"), "float16")
  -- f's results come back; the region ends with f, also on an error
  local x, y = qkv.autocast({device_type = "cpu"}, function(s) return a:matmul(b), s end, "s")
  lu.assertEquals({x.dtype, y}, {"bfloat16", "s"})
  lu.assertFalse(pcall(qkv.autocast, {device_type = "cpu"}, function() error("inside") end))
  lu.assertFalse(qkv.is_autocast_enabled("cpu"))
  lu.assertEquals(a:matmul(b).dtype, "float32")
  -- nested: an inner region's dtype, enabled = false turns it off, the outer back after
  qkv.autocast({device_type = "cpu"}, function()
    lu.assertTrue(qkv.is_autocast_enabled("cpu"))
    lu.assertFalse(qkv.is_autocast_enabled("cuda"))
    lu.assertFalse(qkv.is_autocast_enabled())            -- PyTorch's default asks about CUDA
    qkv.autocast({device_type = "cpu", dtype = "float16"}, function()
      lu.assertEquals(a:matmul(b).dtype, "float16")
      lu.assertEquals(qkv.get_autocast_dtype("cpu"), "float16")
    end)
    do
      local off <close> = qkv.autocast{device_type = "cpu", enabled = false}
      lu.assertEquals(a:matmul(b).dtype, "float32")
      lu.assertFalse(qkv.is_autocast_enabled("cpu"))
    end
    lu.assertEquals(a:matmul(b).dtype, "bfloat16")
    -- a region on the GPU leaves the CPU's on
    qkv.autocast({device_type = "cuda"}, function()
      lu.assertEquals(a:matmul(b).dtype, "bfloat16")
      lu.assertTrue(qkv.is_autocast_enabled("cuda"))
    end)
    -- float64 is never cast
    lu.assertEquals(a:double():matmul(b:double()).dtype, "float64")
  end)
  -- a <close> region ends at its block's end, also when the block raises
  lu.assertFalse(pcall(function()
    local ac <close> = qkv.autocast{device_type = "cpu"}
    lu.assertEquals(a:matmul(b).dtype, "bfloat16")
    error("raised")
  end))
  lu.assertFalse(qkv.is_autocast_enabled("cpu"))
  -- qkv.amp.autocast is the same function
  lu.assertEquals(qkv.amp.autocast, qkv.autocast)
end

-- a coroutine's region is its own: the main thread keeps float32, and a
-- coroutine with none sees the main thread's
function TestAutocast:testCoroutines()
  local co = coroutine.wrap(function()
    local ac <close> = qkv.autocast{device_type = "cpu"}
    coroutine.yield(a:matmul(b).dtype)
    coroutine.yield(a:matmul(b).dtype)
  end)
  lu.assertEquals(co(), "bfloat16")
  lu.assertEquals(a:matmul(b).dtype, "float32", "the main thread outside the coroutine's region")
  lu.assertEquals(co(), "bfloat16")
  qkv.autocast({device_type = "cpu", dtype = "float16"}, function()
    local seen = coroutine.wrap(function() return a:matmul(b).dtype end)()
    lu.assertEquals(seen, "float16", "a coroutine without a region sees the main thread's")
  end)
end

-- on the GPU, PyTorch's CUDA lists: the products in float16, softmax,
-- log_softmax, layer_norm, exp, log, sum in float32, the rest as given
function TestAutocast:testDevicePolicy()
  local ok, why = qkv.cuda_available()
  if not ok then lu.skip("needs the CUDA device: " .. tostring(why)) end
  local x, y = a:cuda(), b:cuda()
  qkv.autocast({device_type = "cuda"}, function()
    lu.assertEquals(x:matmul(y).dtype, "float16")
    lu.assertEquals(x:matmul(y):softmax(2).dtype, "float32")
    lu.assertEquals(x:half():exp().dtype, "float32")
    lu.assertEquals(x:half():sum().dtype, "float32")
    lu.assertEquals(F.layer_norm(x:half(), {8}).dtype, "float32")
    lu.assertEquals(x:half():gelu().dtype, "float16")
    lu.assertEquals(a:matmul(b).dtype, "float32", "a CPU op outside the GPU's region")
  end)
end

-- attention with score_mod/mask_mod/block_mask runs in the region's
-- dtype, as the plain one and PyTorch's flex_attention do (its output is
-- bfloat16 under torch.autocast("cpu")): the bits of the same call on
-- explicit casts, both paths, gradients to the float32 leaves and to a
-- captured float32 bias through the casts
function TestAutocast:testVariantsRunInTheLowDtype()
  local q = qkv.randn(1, 2, 40, 16):requires_grad_()
  local k, v = qkv.randn(1, 2, 40, 16), qkv.randn(1, 2, 40, 16)
  local bias = qkv.randn(2, 40, 40):requires_grad_()
  local function sm(s, _, h, i, j) return s + bias[{h, i, j}] end
  local bm = qkv.block_mask(qkv.variants.sliding_window(8), nil, nil, 40, 40, {block = 16})
  for _, weights in ipairs{false, true} do
    local opts = {score_mod = sm, block_mask = bm, weights = weights}
    local o = qkv.autocast({device_type = "cpu"}, qkv.attention, q, k, v, opts)
    lu.assertEquals(o.dtype, "bfloat16", tostring(weights))
    local want = qkv.attention(q:bfloat16(), k:bfloat16(), v:bfloat16(), opts)
    lu.assertTrue(o:eq(want):all():item(), "the explicit casts' bits")
    q.grad, bias.grad = nil, nil
    o:float():sum():backward()
    lu.assertEquals(q.grad.dtype, "float32")
    lu.assertEquals(bias.grad.dtype, "float32")
    local qb = q:detach():bfloat16():requires_grad_()
    local bb = bias:detach():requires_grad_()
    local function smb(s, _, h, i, j) return s + bb[{h, i, j}] end
    qkv.attention(qb, k:bfloat16(), v:bfloat16(), {score_mod = smb, block_mask = bm,
                                                   weights = weights}):float():sum():backward()
    lu.assertTrue(q.grad:eq(qb.grad:float()):all():item(), "dQ through the cast")
    lu.assertTrue(bias.grad:eq(bb.grad):all():item(), "the bias's gradient")
  end
end

function TestAutocast:testErrors()
  local function err(pat, f, ...)
    local ok, msg = pcall(f, ...)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(msg), pat)
  end
  err("autocast: device_type is required", qkv.autocast, {}, print)
  err("autocast: device_type must be 'cpu' or 'cuda', got tpu", qkv.autocast, {device_type = "tpu"}, print)
  err("autocast: dtype must be 'bfloat16' or 'float16', got float32", qkv.autocast,
      {device_type = "cpu", dtype = "float32"}, print)
  err("autocast: unknown option 'dtpye'", qkv.autocast, {device_type = "cpu", dtpye = "float16"}, print)
  err("autocast: bad argument #2 (function expected, got number)", qkv.autocast, {device_type = "cpu"}, 3)
  err("enabled", qkv.autocast, {device_type = "cpu", enabled = "yes"}, print)
  err("is_autocast_enabled: device_type must be 'cpu' or 'cuda', got gpu", qkv.is_autocast_enabled, "gpu")
  err("get_autocast_dtype: device_type must be 'cpu' or 'cuda', got nil", qkv.get_autocast_dtype)
  local ac <close> = qkv.autocast{device_type = "cpu"}
  err("autocast: a region has no field 'exit'", function() return ac.exit end)
  -- an op's own error under autocast still names the op
  err("matmul", function() return a:matmul(a) end)
end

os.exit(lu.LuaUnit.run(), true)
