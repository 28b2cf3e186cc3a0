-- test_attention.lua: the cross-backend suite's attention (the backend's
-- attention and attention_backward): the fused forward on many shapes,
-- masks broadcast and rows with no key, the log-sum-exps, float16 and
-- bfloat16 on the tensor cores in every variant, decode steps with their
-- keys split across blocks, the gradients in every dtype
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local t = qkv.test
local S = dofile("tests/helpers/shell.lua")
local check_grads = dofile("tests/helpers/half_grads.lua")
local C = dofile("tests/helpers/cuda_suite.lua")
local need, same, values, FLOATS, EXE = C.need, C.same, C.values, C.FLOATS, C.EXE

---------------------------------------------------------------- attention

TestCudaAttention = {}

-- unit normal Q, K, V (float32 scores of size 100 would round at 1e-5)
local function qkvs(b, nq, nk, dk, dv, dt)
  local function u(shape) return (values(shape, "float64") / 3):to(dt) end
  return u(b and {b, nq, dk} or {nq, dk}), u(b and {b, nk, dk} or {nk, dk}),
         u(b and {b, nk, dv} or {nk, dv})
end

function TestCudaAttention:testFusedForwardOnManyShapes()
  need()
  local cases = {  -- batch, n_q, n_k, d_k, d_v
    {nil, 5, 5, 8, 8}, {2, 7, 13, 16, 16}, {3, 64, 64, 64, 64}, {1, 65, 129, 32, 48},
    {2, 1, 300, 128, 128}, {1, 257, 31, 80, 16}, {2, 33, 33, 256, 64}, {1, 0, 5, 8, 8},
    {1, 5, 0, 8, 8}, {0, 3, 3, 8, 8}, {1, 3, 3, 1, 1},
  }
  for _, dt in ipairs(FLOATS) do
    for _, c in ipairs(cases) do
      local q, k, v = qkvs(c[1], c[2], c[3], c[4], c[5], dt)
      local label = ("%s b=%s nq=%d nk=%d dk=%d dv=%d"):format(dt, tostring(c[1]), c[2], c[3], c[4], c[5])
      -- weights = false: the fused kernel (with weights, the composed path)
      same(label, function(a, b, e) return qkv.attention(a, b, e, {weights = false}) end, {q, k, v})
      same(label .. " causal", function(a, b, e)
        return qkv.attention(a, b, e, {causal = true, weights = false})
      end, {q, k, v})
      local m = values({c[2], c[3]}, "bool")
      same(label .. " mask", function(a, b, e, w)
        return qkv.attention(a, b, e, {mask = w, weights = false})
      end, {q, k, v, m})
      same(label .. " mask + causal + scale", function(a, b, e, w)
        return qkv.attention(a, b, e, {mask = w, causal = true, scale = 0.3, weights = false})
      end, {q, k, v, m})
      same(label .. " composed, with weights", function(a, b, e, w)
        return qkv.attention(a, b, e, {mask = w, causal = true})
      end, {q, k, v, m})
    end
  end
end

-- a decode step's few queries (vm/cuda/attention_decode.c's kernel):
-- keys split across blocks and merged (one batch item, many keys), causal
-- with n_q > 1 and n_q > n_k, heads to 256, K and V broadcast over heads,
-- a NaN in one key, and the log-sum-exps autograd's backward reads
function TestCudaAttention:testDecodeStepsSplitAcrossBlocks()
  need()
  require "qkv.autograd"
  local cases = {  -- batch, n_q, n_k, d_k, d_v
    {1, 1, 1000, 64, 64}, {1, 4, 700, 128, 128}, {2, 8, 300, 32, 48}, {1, 3, 2, 16, 16},
    {1, 2, 129, 256, 256}, {3, 1, 65, 8, 8},
  }
  for _, dt in ipairs(FLOATS) do
    for _, c in ipairs(cases) do
      local q, k, v = qkvs(c[1], c[2], c[3], c[4], c[5], dt)
      local label = ("%s decode b=%d nq=%d nk=%d dk=%d dv=%d"):format(dt, c[1], c[2], c[3], c[4], c[5])
      for _, causal in ipairs{false, true} do
        same(label .. (causal and " causal" or ""), function(a, b, e)
          return qkv.attention(a, b, e, {causal = causal, weights = false})
        end, {q, k, v})
      end
    end
    -- grouped: 4 heads on one key/value head, expanded (stride 0)
    local q, k, v = values({2, 4, 1, 32}, dt), values({2, 1, 500, 32}, dt), values({2, 1, 500, 32}, dt)
    same(dt .. " decode over broadcast heads", function(a, b, e)
      return qkv.attention(a, b:expand(2, 4, 500, 32), e:expand(2, 4, 500, 32), {weights = false})
    end, {q, k, v})
    -- a NaN in one key spoils every row; the rows before it under causal
    -- do not keep it
    local kn = values({1, 400, 16}, dt)
    kn[{1, 400, 1}] = 0 / 0
    same(dt .. " decode NaN key", function(a, b, e)
      return qkv.attention(a, b, e, {causal = true, weights = false})
    end, {values({1, 3, 16}, dt), kn, values({1, 400, 16}, dt)})
    -- the backward reads the decode kernel's log-sum-exps
    local g = values({1, 4, 64}, dt)
    same(dt .. " decode backward", function(a, b, e, go)
      local x, y, z = a:detach():requires_grad_(), b:detach():requires_grad_(), e:detach():requires_grad_()
      qkv.attention(x, y, z, {causal = true, weights = false}):backward(go)
      return x.grad, y.grad, z.grad
    end, {values({1, 4, 64}, dt) / 3, values({1, 900, 64}, dt) / 3, values({1, 900, 64}, dt), g})
  end
end

function TestCudaAttention:testMasksBroadcastHeadsAndEmptyRows()
  need()
  local q, k, v = values({2, 4, 9, 32}, "float32"), values({2, 4, 11, 32}, "float32"),
                  values({2, 4, 11, 32}, "float32")
  -- a padding mask (2, 1, 1, 11) broadcast over heads and queries
  local pad = qkv.padding({7, 11}):view(2, 1, 1, 11)
  same("padding mask", function(a, b, e, w) return qkv.attention(a, b, e, {mask = w, weights = false}) end,
       {q, k, v, pad})
  -- K and V shared by the heads (stride-0 batch dims)
  same("shared K, V", function(a, b, e)
    return qkv.attention(a, b:expand(2, 4, 11, 32), e:expand(2, 4, 11, 32), {weights = false})
  end, {q, k:narrow(2, 1, 1), v:narrow(2, 1, 1)})
  -- rows with no key left give zeros
  local none = qkv.zeros(9, 11, "bool")
  none:narrow(1, 1, 4):fill_(true)
  same("fully masked rows", function(a, b, e, w) return qkv.attention(a, b, e, {mask = w, weights = false}) end,
       {q, k, v, none})
  -- each query's log-sum-exp, which the forward leaves for the backward:
  -- -inf for a row with no key, and for every row when there is no key
  for _, dt in ipairs(FLOATS) do
    same(dt .. " lse, mask + causal", function(a, b, e, w)
      return qkv._attention_lse(a, b, e, w, true, 0.3)
    end, {q:to(dt), k:to(dt), v:to(dt), none})
    same(dt .. " lse, no keys", function(a, b, e) return qkv._attention_lse(a, b, e, nil, false, 1) end,
         {q:to(dt), k:narrow(3, 1, 0):to(dt), v:narrow(3, 1, 0):to(dt)})
  end
  -- weights, as the unfused path gives them
  same("with weights", function(a, b, e) return qkv.attention(a, b, e, {weights = true}) end,
       {q, k, v})
  same("heads and merge", function(x) return qkv.merge(qkv.heads(x, 4)) end, {values({3, 10, 32}, "float32")})
end

-- float16 and bfloat16 on the tensor cores (vm/cuda/attention_mma.cu; head
-- sizes 64 and 128): the CPU's float32 result to the dtype's tolerance in
-- every layout, and against float64 within twice the CPU's own error
-- (which is only the output's rounding; the GPU also rounds P)
local function rel64(x, want)
  local d = x:cpu():double() - want
  return math.sqrt((d * d):sum():item() / (want * want):sum():item())
end

function TestCudaAttention:testHalvesOnTheTensorCores()
  need()
  local cases = {{1, 2, 70, 50, 64, false}, {2, 1, 64, 64, 128, true}, {1, 1, 33, 100, 64, true},
                 {1, 2, 130, 129, 128, false}, {1, 1, 100, 40, 64, true}}
  for _, dt in ipairs{"bfloat16", "float16"} do
    for _, c in ipairs(cases) do
      local q, k, v = values({c[1], c[2], c[3], c[5]}, dt), values({c[1], c[2], c[4], c[5]}, dt),
                      values({c[1], c[2], c[4], c[5]}, dt)
      local m = values({c[3], c[4]}, "bool")
      m:narrow(1, 1, 3):fill_(false)                        -- rows with no key: zeros
      local label = ("%s %d x %d d %d%s"):format(dt, c[3], c[4], c[5], c[6] and " causal" or "")
      same(label, function(a, b, e)
        return qkv.attention(a, b, e, {causal = c[6], weights = false})
      end, {q, k, v})
      same(label .. " mask, scale", function(a, b, e, w)
        return qkv.attention(a, b, e, {causal = c[6], mask = w, scale = 0.3, weights = false})
      end, {q, k, v, m})
      local opts = {causal = c[6], mask = m, weights = false}
      local got = qkv.attention(q:cuda(), k:cuda(), v:cuda(), {causal = c[6], mask = m:cuda(),
                                                               weights = false})
      if qkv.cuda.attention_backend() ~= "cpu" then        -- build/fakecuda.so runs the CPU's
        lu.assertEquals(qkv.cuda.attention_backend(), "mma", label)
      end
      lu.assertEquals(got:narrow(3, 1, 3):cpu():abs():max():item(), 0, label .. ": masked rows")
      local want = qkv.attention(q:double(), k:double(), v:double(), opts)
      local cpu, gpu = rel64(qkv.attention(q, k, v, opts), want), rel64(got, want)
      lu.assertTrue(gpu <= 2 * cpu, ("%s: error %.3g against float64, the CPU's %.3g"):format(
        label, gpu, cpu))
    end
  end
  -- other head sizes are computed in float32 on the CUDA cores (without a
  -- mask cuDNN takes them, where the plugin has it: test_cudnn.lua)
  local q = values({1, 1, 20, 32}, "bfloat16")
  local m32 = qkv.ones(20, 20, "bool")
  same("bfloat16 d 32", function(a, w) return qkv.attention(a, a, a, {weights = false, mask = w}) end,
       {q, m32})
  if qkv.cuda.attention_backend() ~= "cpu" then
    lu.assertEquals(qkv.cuda.attention_backend(), "fp32")
    -- and QKV_CUDA_ATTENTION=fp32 sends every half there
    local out, code = S.sh("QKV_CUDA_ATTENTION=fp32 " .. S.quote(EXE) .. " -e " .. S.quote(
      "local x = qkv.randn(1, 8, 64, 'cuda'):to('float16'); " ..
      "qkv.attention(x, x, x, {weights = false}); io.write(qkv.cuda.attention_backend())"))
    lu.assertEquals(code, 0, out)
    lu.assertEquals(out, "fp32")
  end
end

-- the Hopper forward on wgmma (vm/cuda/attention_wgmma.cu), forced: taken
-- only when asked until it has run on a GPU, on compute capability 9.0
-- (the simulation says 9.0). Against float64 within twice the CPU's own
-- error and against the mma kernel within the dtype's tolerance: one and
-- two warpgroups' rows, key tiles cut by n_k, causal in both alignments,
-- masks with rows that keep no key, heads as strided views, lse through a
-- backward (mma's, reading the wgmma forward's lse); and
-- tests/helpers/mma_variants.lua's cases on it in each tile of keys and
-- each load and schedule, TMA by a producer warpgroup with the two
-- consumers taking turns and overlapping their own P V and softmax (the
-- default), taking turns alone or neither, or cp.async (rows
-- it cannot read 16 bytes at a time, or batch dims a tensor map cannot
-- hold: an error naming the forced path)
function TestCudaAttention:testHalvesOnWgmma()
  need()
  local x = qkv.randn(1, 8, 64, "cuda"):to("bfloat16")
  if not pcall(qkv.cuda.attention_backend, "wgmma") then lu.skip("no wgmma path in this plugin") end
  local ok, err = pcall(qkv.attention, x, x, x, {weights = false})
  local ran = qkv.cuda.attention_backend("auto")
  if ran == "cpu" then lu.skip("build/fakecuda.so runs the CPU's") end
  if not ok and tostring(err):find("compute capability 9.0", 1, true) then
    lu.skip("wgmma not taken here: " .. tostring(err))
  end
  lu.assertTrue(ok, tostring(err))
  lu.assertEquals(ran, "wgmma")
  local cases = {{1, 1, 1, 1, 64, false}, {1, 2, 70, 50, 64, false}, {2, 1, 130, 300, 128, true},
                 {1, 1, 300, 129, 64, true}, {1, 2, 64, 256, 128, false}, {1, 1, 200, 64, 64, true}}
  for _, dt in ipairs{"bfloat16", "float16"} do
    for _, c in ipairs(cases) do
      -- [b, n, h, d] seen as [b, h, n, d]: rows h d apart
      local function heads(n) return values({c[1], n, c[2], c[5]}, dt):transpose(2, 3) end
      local q, k, v = heads(c[3]), heads(c[4]), heads(c[4])
      local m = values({c[3], c[4]}, "bool")
      m:narrow(1, 1, math.min(3, c[3])):fill_(false)
      local label = ("%s %d x %d d %d%s"):format(dt, c[3], c[4], c[5], c[6] and " causal" or "")
      local all = {{causal = c[6], weights = false}}
      if c[3] > 3 then all[2] = {causal = c[6], mask = m, scale = 0.3, weights = false} end
      for _, opts in ipairs(all) do
        local gopts = {causal = opts.causal, scale = opts.scale, weights = false,
                       mask = opts.mask and opts.mask:cuda()}
        qkv.cuda.attention_backend("wgmma")
        local got = qkv.attention(q:cuda(), k:cuda(), v:cuda(), gopts)
        lu.assertEquals(qkv.cuda.attention_backend("mma"), "wgmma", label)
        local mma = qkv.attention(q:cuda(), k:cuda(), v:cuda(), gopts)
        qkv.cuda.attention_backend("auto")
        local what = label .. (opts.mask and " mask" or "")
        C.compare(mma:cpu(), got, what .. ": against mma", C.TOL[dt])
        local want = qkv.attention(q:double(), k:double(), v:double(), opts)
        local cpu, gpu = rel64(qkv.attention(q, k, v, opts), want), rel64(got, want)
        lu.assertTrue(gpu <= 2 * cpu, ("%s: error %.3g against float64, the CPU's %.3g"):format(
          what, gpu, cpu))
        if opts.mask then
          lu.assertEquals(got:narrow(3, 1, math.min(3, c[3])):cpu():abs():max():item(), 0, what)
        end
      end
    end
  end
  -- the backward reads the wgmma forward's lse
  local q, k, v = values({1, 2, 90, 64}, "bfloat16"), values({1, 2, 150, 64}, "bfloat16"),
                  values({1, 2, 150, 64}, "bfloat16")
  local go = values({1, 2, 90, 64}, "bfloat16")
  local function grads(dev, dt)
    local a, b, e = q:to(dev, dt):requires_grad_(), k:to(dev, dt):requires_grad_(),
                    v:to(dev, dt):requires_grad_()
    qkv.attention(a, b, e, {causal = true, weights = false}):backward(go:to(dev, dt))
    return {a.grad:cpu():double(), b.grad:cpu():double(), e.grad:cpu():double()}
  end
  qkv.cuda.attention_backend("wgmma")
  local ok2, g = pcall(grads, "cuda", "bfloat16")
  lu.assertEquals(qkv.cuda.attention_backend("auto"), "mma", "the backward is mma's")
  lu.assertTrue(ok2, tostring(g))
  local want, cpu = grads("cpu", "float64"), grads("cpu", "bfloat16")
  for i = 1, 3 do
    local function rel(x) return math.sqrt(((x - want[i]) ^ 2):sum():item() / (want[i] ^ 2):sum():item()) end
    lu.assertTrue(rel(g[i]) <= 2 * rel(cpu[i]) + 1e-3, ("gradient %d: %.3g, the CPU's %.3g"):format(
      i, rel(g[i]), rel(cpu[i])))
  end
  -- three batch dims that no two strides join: the tensor maps' 5 dims
  local b3 = values({50, 2, 3, 2, 64}, "bfloat16")
  local p3 = b3:cuda():permute(4, 3, 2, 1, 5)
  qkv.cuda.attention_backend("wgmma")
  local got3 = qkv.attention(p3, p3, p3, {causal = true, weights = false})
  lu.assertEquals(qkv.cuda.attention_backend("auto"), "wgmma")
  local c3, w3 = b3:permute(4, 3, 2, 1, 5), b3:permute(4, 3, 2, 1, 5):double()
  local want3 = qkv.attention(w3, w3, w3, {causal = true, weights = false})
  local cpu3 = rel64(qkv.attention(c3, c3, c3, {causal = true, weights = false}), want3)
  lu.assertTrue(rel64(got3, want3) <= 2 * cpu3, ("3 batch dims: %.3g, the CPU's %.3g"):format(
    rel64(got3, want3), cpu3))
  -- batch dims the TMA kernel's maps cannot hold (four that no two
  -- strides join): an error naming the forced path
  local b4 = values({50, 2, 2, 2, 2, 64}, "bfloat16"):cuda():permute(5, 4, 3, 2, 1, 6)
  qkv.cuda.attention_backend("wgmma")
  local ok3, err3 = pcall(qkv.attention, b4, b4, b4, {weights = false})
  qkv.cuda.attention_backend("auto")
  lu.assertFalse(ok3)
  lu.assertStrContains(tostring(err3), "wgmma")
  lu.assertStrContains(tostring(err3), "TMA")
  -- mma_variants.lua's cases (lse included) in each tile of keys and each
  -- way of loading them (on the simulation also with TMA copies landed at
  -- once, SIM_TMA=early, beside its default, at the last moment), a
  -- process each; a tile or a load that is not built is an error
  local runs = {"", "QKV_CUDA_WGMMA_LOAD=tma-pingpong", "QKV_CUDA_WGMMA_LOAD=tma-serial",
                "QKV_CUDA_WGMMA_LOAD=cp.async"}
  if qkv.cuda.device_name():find("cudasim", 1, true) then table.insert(runs, 2, "SIM_TMA=early") end
  for _, run in ipairs(runs) do
    for _, bk in ipairs{"64", "128"} do
      local out, code = S.sh(run .. " QKV_CUDA_ATTENTION=wgmma QKV_CUDA_WGMMA_BK=" .. bk .. " " ..
                             S.quote(EXE) .. " tests/helpers/mma_variants.lua")
      lu.assertEquals(code, 0, run .. " " .. out)
      lu.assertStrContains(out, "ok ", bk)
    end
  end
  local x16 = S.quote("local x = qkv.randn(1, 8, 64, 'cuda'):to('float16'); qkv.attention(x, x, x, {weights = false})")
  local out, code = S.sh("QKV_CUDA_ATTENTION=wgmma QKV_CUDA_WGMMA_BK=96 " .. S.quote(EXE) .. " -e " .. x16)
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(out, "not 64 or 128")
  out, code = S.sh("QKV_CUDA_ATTENTION=wgmma QKV_CUDA_WGMMA_LOAD=bulk " .. S.quote(EXE) .. " -e " .. x16)
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(out, "not tma, tma-pingpong, tma-serial or cp.async")
end

-- each variant of the tensor-core kernel (QKV_CUDA_MMA_VARIANT: rows a
-- warp and keys a tile, vm/cuda/attention_mma.cu), and the default, in a
-- process of its own, the mma path forced (not cuDNN's):
-- tests/helpers/mma_variants.lua; a name that is none is an error
function TestCudaAttention:testHalvesInEveryVariant()
  need()
  local x = qkv.randn(1, 8, 64, "cuda"):to("bfloat16")
  local forced = pcall(qkv.cuda.attention_backend, "mma")
  pcall(qkv.attention, x, x, x, {weights = false})
  local ran = qkv.cuda.attention_backend("auto")
  if not forced or ran ~= "mma" then lu.skip("no tensor-core path here") end
  for _, v in ipairs{"", "r16k64", "r32k32", "r32k64", "r32k128"} do
    local out, code = S.sh("QKV_CUDA_MMA_VARIANT=" .. v .. " " .. S.quote(EXE) ..
                           " tests/helpers/mma_variants.lua")
    lu.assertEquals(code, 0, out)
    lu.assertStrContains(out, "ok ", v)
  end
  local out, code = S.sh("QKV_CUDA_ATTENTION=mma QKV_CUDA_MMA_VARIANT=r99 " .. S.quote(EXE) .. " -e " .. S.quote(
    "local x = qkv.randn(1, 8, 64, 'cuda'):to('float16'); qkv.attention(x, x, x, {weights = false})"))
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(out, "not one of r16k64")
end

function TestCudaAttention:testBackwardGivesTheCpusGradients()
  need()
  require "qkv.autograd"
  local cases = {{2, 9, 13, 16, 8, false}, {1, 33, 33, 64, 64, true}, {3, 1, 70, 32, 32, false},
                 {1, 130, 66, 40, 24, true}}
  for _, dt in ipairs(FLOATS) do
    for _, c in ipairs(cases) do
      local q, k, v = qkvs(c[1], c[2], c[3], c[4], c[5], dt)
      local g = values({c[1], c[2], c[5]}, dt)
      local m = values({c[2], c[3]}, "bool")
      -- weights = false: the fused backward (attention_backward)
      local grads = function(a, b, e, go, w)
        local x, y, z = a:detach():requires_grad_(), b:detach():requires_grad_(), e:detach():requires_grad_()
        qkv.attention(x, y, z, {causal = c[6], mask = w, weights = false}):backward(go)
        return x.grad, y.grad, z.grad
      end
      same(("%s attention backward %d %d %d"):format(dt, c[2], c[3], c[4]), grads, {q, k, v, g, m})
      same(("%s attention backward no mask %d"):format(dt, c[2]), function(a, b, e, go)
        return grads(a, b, e, go, nil)
      end, {q, k, v, g})
      -- weights = true: the composed forward (qkv_attention_weights, causal
      -- through tri) and its analytic backward, with a loss on out and W
      same(("%s attention with weights backward %d %d %d"):format(dt, c[2], c[3], c[4]),
           function(a, b, e, go, w)
        local x, y, z = a:detach():requires_grad_(), b:detach():requires_grad_(), e:detach():requires_grad_()
        local out, W = qkv.attention(x, y, z, {causal = c[6], mask = w})
        ;((out * go):sum() + (W * W):sum()):backward()
        return out:detach(), W:detach(), x.grad, y.grad, z.grad
      end, {q, k, v, g, m})
    end
  end
  -- float16 and bfloat16, weights = false: the GPU's half forward (the
  -- tensor cores' at d = 64) and the float32 backward kernel on float32
  -- copies; each gradient in the input's dtype, against float64 within
  -- three times the CPU's own error (which computes the forward in float32)
  for _, dt in ipairs{"float16", "bfloat16"} do
    for _, c in ipairs{{2, 40, 50, 64, 64, true}, {1, 70, 33, 16, 8, false}} do
      local q, k, v = qkvs(c[1], c[2], c[3], c[4], c[5], dt)
      local g = values({c[1], c[2], c[5]}, dt)
      local m = values({c[2], c[3]}, "bool")
      local function grads(dev, cast)
        local x, y, z = cast(q):to(dev):detach():requires_grad_(),
                        cast(k):to(dev):detach():requires_grad_(),
                        cast(v):to(dev):detach():requires_grad_()
        qkv.attention(x, y, z, {causal = c[6], mask = m:to(dev), weights = false})
          :backward(cast(g):to(dev))
        return {x.grad, y.grad, z.grad}
      end
      local same_dt = function(x) return x end
      local want = grads("cpu", function(x) return x:double() end)
      local cpu, gpu = grads("cpu", same_dt), grads("cuda", same_dt)
      check_grads(gpu, cpu, want, dt, ("%s %d x %d d %d attention backward"):format(dt, c[2],
                                                                                    c[3], c[4]), 3)
    end
  end
end

-- grouped keys: dK and dV of grouped-query heads (H 6 on H_kv 2) and of K
-- and V shared by every batch item come back in K's and V's own batch dims
-- (the CPU sums each group in its kernel, the GPU's dispatch sums a whole
-- one), with the values of K and V repeated per group
function TestCudaAttention:testGroupedKeysBackward()
  need()
  require "qkv.autograd"
  for _, dt in ipairs(FLOATS) do
    local q = (values({2, 6, 9, 16}, "float64") / 3):to(dt)
    local k, v = (values({2, 2, 13, 16}, "float64") / 3):to(dt), (values({2, 2, 13, 8}, "float64") / 3):to(dt)
    local g = values({2, 6, 9, 8}, dt)
    for _, causal in ipairs{false, true} do
      local grads = function(a, b, e, go)
        local x, y, z = a:detach():requires_grad_(), b:detach():requires_grad_(), e:detach():requires_grad_()
        qkv.attention(x, y, z, {enable_gqa = true, causal = causal, weights = false}):backward(go)
        return x.grad, y.grad, z.grad
      end
      same(("%s grouped-query backward causal %s"):format(dt, causal), grads, {q, k, v, g})
    end
    -- K and V (n_k, d) shared by all 12 items: their gradients (1, 1, n_k, d)
    local k2, v2 = k[{1, 1}], v[{1, 1}]
    same(dt .. " shared keys backward", function(a, b, e, go)
      local dq, dk, dv = qkv._attention_backward(a, b, e, qkv.attention(a, b, e, {weights = false}),
                                                 go, nil, false, 0.25)
      lu.assertEquals(dk.shape, {1, 1, 13, 16})
      lu.assertEquals(dv.shape, {1, 1, 13, 8})
      return dq, dk, dv
    end, {q, k2, v2, g})
  end
end

-- float16 and bfloat16 gradients on the tensor cores (vm/cuda/
-- attention_mma_bwd.cu, head sizes 64 and 128): qkv._attention_lse's out
-- and lse in the dtype, then _attention_backward in it, given lse and not;
-- each gradient in the dtype, against float64 (the CPU's float64 backward
-- on the same inputs) within three times the CPU's own error. Masks with
-- rows of no key (whose dQ is 0), causal with n_q < n_k and n_q > n_k,
-- sizes off the 64-key and query tiles, K, V and the mask broadcast
function TestCudaAttention:testHalfBackwardOnTheTensorCores()
  need()
  local x = qkv.zeros(1, 4, 64, "float16")
  if not pcall(qkv._attention_lse, x, x, x, nil, false, 1) then
    lu.skip("_attention_lse takes no float16 yet (the dispatch's half gradients)")
  end
  local cases = {  -- Q's batch, K and V's, n_q, n_k, d, causal, mask
    {{1, 2}, {1, 2}, 70, 50, 64, false, "rows"}, {{2, 1}, {2, 1}, 40, 130, 128, true},
    {{1, 1}, {1, 1}, 100, 33, 64, true, "rows"}, {{2, 3}, {2, 1}, 65, 64, 128, false, "heads"},
    {{3}, {3}, 129, 200, 64, true, "rows"},
    -- one query of five keys: 16 of them, since with so few elements the
    -- error is one draw of dS's rounding to the dtype (before dS K and
    -- dS^T Q), which took dQ to 3.3 times the CPU's error in one bfloat16
    -- draw (1.3 times, 2.1 at worst, over 20 draws of one)
    {{16}, {16}, 1, 5, 128, false},
  }
  -- the tensor cores' own backward: cuDNN would take the cases without a
  -- mask where the plugin has it
  qkv.cuda.attention_backend("mma")
  local ok, err = pcall(function()
    for _, dt in ipairs{"bfloat16", "float16"} do
      for _, c in ipairs(cases) do
        local nq, nk, d = c[3], c[4], c[5]
        local function u(shape, n)
          local sh = {table.unpack(shape)}
          sh[#sh + 1], sh[#sh + 2] = n, d
          return (values(sh, "float64") / 3):to(dt)
        end
        local q, k, v = u(c[1], nq), u(c[2], nk), u(c[2], nk)
        local m
        if c[7] == "rows" then
          m = values({nq, nk}, "bool")
          m:narrow(1, 1, 3):fill_(false)                    -- no key: zeros, and dQ 0
        elseif c[7] == "heads" then
          m = values({c[1][1], 1, nq, nk}, "bool")          -- over the heads
        end
        local scale = 1 / math.sqrt(d)
        local label = ("%s %d x %d d %d%s%s"):format(dt, nq, nk, d, c[6] and " causal" or "",
                                                     c[7] and " mask " .. c[7] or "")
        local function grads(dev, cast, with_lse)
          local a, b, e = cast(q):to(dev), cast(k):to(dev), cast(v):to(dev)
          local w = m and m:to(dev)
          local out, lse = qkv._attention_lse(a, b, e, w, c[6], scale)
          local g = (values(out.shape, "float64") / 3)
          g = cast(g:to(dt)):to(dev)
          return {qkv._attention_backward(a, b, e, out, g, w, c[6], scale, with_lse and lse or nil)}, lse
        end
        qkv.seed(11)
        local want, lse64 = grads("cpu", function(t) return t:double() end, true)
        qkv.seed(11)
        local cpu = grads("cpu", function(t) return t end, false)
        for _, with_lse in ipairs{true, false} do
          qkv.seed(11)
          local gpu, lse = grads("cuda", function(t) return t end, with_lse)
          -- the forward's lse (float32; -inf where no key is kept)
          lu.assertEquals(lse.dtype, "float32", label)
          local none = lse64:eq(-1 / 0)
          t.assertTensorEqual(lse:cpu():eq(-1 / 0), none)
          lu.assertTrue(rel64(lse:cpu():masked_fill(none, 0), lse64:masked_fill(none, 0)) < 1e-6, label)
          if qkv.cuda.attention_backend() ~= "cpu" then      -- build/fakecuda.so runs the CPU's
            lu.assertEquals(qkv.cuda.attention_backend(), "mma", label)
          end
          for i, name in ipairs{"dQ", "dK", "dV"} do
            local what = ("%s %s%s"):format(label, name, with_lse and "" or " (no lse)")
            lu.assertEquals({gpu[i].dtype, gpu[i].device}, {dt, "cuda"}, what)
            lu.assertEquals(gpu[i].shape, want[i].shape, what)
            local ec, eg = rel64(cpu[i], want[i]), rel64(gpu[i], want[i])
            lu.assertTrue(eg <= 3 * ec, ("%s: error %.3g against float64, the CPU's %.3g"):format(
              what, eg, ec))
          end
          if c[7] == "rows" then
            lu.assertEquals(gpu[1]:narrow(-2, 1, 3):cpu():abs():max():item(), 0, label .. ": empty rows")
          end
        end
      end
    end
  end)
  qkv.cuda.attention_backend("auto")
  if not ok then error(err, 0) end
end
