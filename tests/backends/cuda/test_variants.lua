-- test_variants.lua: the cross-backend suite's attention variants
-- (score_mod, mask_mod, block masks: stdlib/qkv/variants/). The GPU runs
-- them fused (vm/cuda/mods.cu: the program as code compiled at run time,
-- else an interpreter of it; block kinds are made on the CPU,
-- test_coverage.lua's LATER), and must give the
-- CPU's fused values: both paths of the library's variants and of mods
-- with captured tensors, the weights, and the gradients to q, k, v and a
-- captured bias
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local C = dofile("tests/helpers/cuda_suite.lua")
local S = dofile("tests/helpers/shell.lua")
local need, same, values, FLOATS = C.need, C.same, C.values, C.FLOATS
local V = setmetatable({}, {__index = function(_, k) return qkv.variants[k] end})

TestCudaVariants = {}

-- each case's options, made on the device of q (captured tensors live there)
local CASES = {
  window = function() return {mask_mod = V.sliding_window(7)} end,
  window_softcap = function() return {mask_mod = V.sliding_window(9, {causal = false}),
                                      score_mod = V.softcap(1.5)} end,
  alibi_causal = function(q) return {score_mod = V.alibi(qkv.alibi_slopes(3):to(q.device)),
                                     causal = true} end,
  document = function(q)
    local ids = qkv.tensor({1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5,
                            5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6}, "int64"):to(q.device)
    return {mask_mod = V.document(ids)}
  end,
  bias = function(q)
    local bias = (qkv.arange(0, 3 * 79, "float64"):reshape(3, 79) / 50):to(q.dtype):to(q.device)
    return {score_mod = function(s, b, h, i, j) return s + bias[{h, j - i + 40}] end,
            mask_mod = V.prefix_lm(5)}
  end,
}

function TestCudaVariants:testVariantsBothPaths()
  need()
  for _, dt in ipairs(FLOATS) do
    local q, k, v = values({2, 3, 40, 8}, dt), values({2, 3, 40, 8}, dt), values({2, 3, 40, 4}, dt)
    for name, opts in pairs(CASES) do
      same(dt .. " " .. name .. " fused", function(a, b, c)
        local o = opts(a)
        o.weights = false
        return qkv.attention(a, b, c, o)
      end, {q, k, v})
      same(dt .. " " .. name .. " weights", function(a, b, c)
        return qkv.attention(a, b, c, opts(a))
      end, {q, k, v})
    end
  end
end

function TestCudaVariants:testBlockMaskOnEitherDevice()
  need()
  local bm = qkv.block_mask(V.sliding_window(5), nil, nil, 70, 70, {block = 16})
  local q, k, v = values({1, 2, 70, 8}, "float64"), values({1, 2, 70, 8}, "float64"),
                  values({1, 2, 70, 8}, "float64")
  same("block_mask", function(a, b, c)
    return qkv.attention(a, b, c, {block_mask = bm, weights = false})
  end, {q, k, v})
  -- a block mask made from a tensor on the GPU: its kinds are the CPU's
  local ids = qkv.tensor({1, 1, 2, 2, 2, 3}, "int64")
  local a = qkv.block_mask(V.document(ids), nil, nil, 6, 6, {block = 2})
  local b = qkv.block_mask(V.document(ids:cuda()), nil, nil, 6, 6, {block = 2})
  lu.assertEquals(b.kinds:tolist(), a.kinds:tolist())
end

function TestCudaVariants:testGradients()
  need()
  for _, dt in ipairs(FLOATS) do
    local q, k, v = values({2, 3, 24, 8}, dt), values({2, 3, 24, 8}, dt), values({2, 3, 24, 4}, dt)
    local bias = values({3, 47}, dt)
    local g = values({2, 3, 24, 4}, dt)
    same(dt .. " gradients", function(a, b, c, t, w)
      a, b, c, t = a:detach():requires_grad_(), b:detach():requires_grad_(),
                   c:detach():requires_grad_(), t:detach():requires_grad_()
      local out = qkv.attention(a, b, c, {weights = false, mask_mod = V.sliding_window(6),
        score_mod = function(s, bb, h, i, j) return s + t[{h, j - i + 24}] end})
      out:backward(w)
      return a.grad, b.grad, c.grad, t.grad
    end, {q, k, v, bias, g})
  end
end

-- the fused kernels' own cases (vm/cuda/mods.cu): causal with n_q ≠ n_k
-- and a mask tensor, masks by (b, h), block masks by head and by batch
-- item at the smallest and largest blocks, rows with no key
function TestCudaVariants:testFusedCases()
  need()
  local bh = qkv.block_mask(function(b, h, i, j) return (i - j):abs():lt(h * 7) end, nil, 3, 37, 53,
                            {block = {8, 16}})
  local bb = qkv.block_mask(function(b, h, i, j) return (i - j):abs():lt(b * 7) end, 2, nil, 37, 53,
                            {block = {128, 256}})
  local cases = {
    causal_mask = function(m) return {causal = true, mask = m, score_mod = V.softcap(2)} end,
    by_b_h = function() return {mask_mod = function(b, h, i, j) return (i - j):abs():lt(h * 5 + b * 3) end} end,
    block_heads = function() return {block_mask = bh} end,
    block_items = function() return {block_mask = bb, score_mod = V.softcap(3)} end,
    no_key = function() return {mask_mod = function(b, h, i, j) return j:gt(i + 60) end} end,
  }
  for _, dt in ipairs(FLOATS) do
    local q, k, v = values({2, 3, 37, 5}, dt), values({2, 3, 53, 5}, dt), values({2, 3, 53, 7}, dt)
    local mask = values({2, 1, 37, 53}, "bool")
    for name, opts in pairs(cases) do
      same(dt .. " " .. name, function(a, b, c, m)
        local o = opts(m)
        o.weights = false
        return qkv.attention(a, b, c, o)
      end, {q, k, v, mask})
    end
    same(dt .. " gradients, causal and a mask", function(a, b, c, m, t)
      a, b, c, t = a:detach():requires_grad_(), b:detach():requires_grad_(),
                   c:detach():requires_grad_(), t:detach():requires_grad_()
      local out = qkv.attention(a, b, c, {weights = false, causal = true, mask = m,
        score_mod = function(s, bb, h, i, j) return (s + t[{h, j - i + 40}]):tanh() end})
      out:sum():backward()
      return a.grad, b.grad, c.grad, t.grad
    end, {q, k, v, mask, values({3, 100}, dt)})
  end
end

-- an index outside a captured tensor is the CPU's error, found on the GPU
-- (float16 at d 64: the tensor cores' kernel)
function TestCudaVariants:testIndexOutOfRange()
  need()
  for _, c in ipairs{{{3, 20, 4}, "float64"}, {{1, 3, 20, 64}, "float16"}} do
    local q = (values(c[1], "float64") / 3):to(c[2])
    local t = values({2, 30}, c[2])
    local function f(a, x)
      return qkv.attention(a, a, a, {weights = false, score_mod = function(s, b, h, i, j) return s + x[{h, j}] end})
    end
    local ok1, e1 = pcall(f, q, t)
    local ok2, e2 = pcall(f, q:cuda(), t:cuda())
    lu.assertFalse(ok1)
    lu.assertFalse(ok2)
    lu.assertStrContains(e2, "index 1 of the captured tensor (2, 30) is 3")
    lu.assertEquals(e2, e1)
  end
end

-- which kernels ran: the program compiled as code (NVRTC on a GPU, the
-- host's compiler on the simulation), or the interpreter where
-- QKV_CUDA_JIT=0 (the simulation's second pass) or no NVRTC is found
function TestCudaVariants:testCompiledOrInterpreted()
  need()
  local q = values({2, 6, 4}, "float32"):cuda()
  qkv.attention(q, q, q, {weights = false, score_mod = V.softcap(2)})
  local ran = qkv.cuda.attention_backend()
  if ran == "cpu" then return end                 -- build/fakecuda.so runs the CPU's
  local sim = (os.getenv("QKV_CUDA_PLUGIN") or ""):find("simcuda") ~= nil
  if os.getenv("QKV_CUDA_JIT") == "0" then
    lu.assertEquals(ran, "mods")
  elseif ran == "mods" and not sim then
    lu.skip("no libnvrtc on the library path: the interpreter ran")
  else
    lu.assertEquals(ran, "mods-jit")
  end
end

-- a program longer than the interpreter's short form (32 values a
-- thread), forward and backward, with a captured tensor in it
function TestCudaVariants:testLongProgram()
  need()
  local function mod(t)
    return function(s, b, h, i, j)
      local x = s
      for n = 1, 12 do x = x + ((i * n - j) / (n + 1)):sin() * 0.1 end
      return x + t[{h, j}]
    end
  end
  for _, dt in ipairs({"float32", "float64"}) do
    local q, k, v = values({2, 3, 21, 4}, dt), values({2, 3, 21, 4}, dt), values({2, 3, 21, 4}, dt)
    same(dt .. " long program", function(a, b, c, t)
      a, b, c, t = a:detach():requires_grad_(), b:detach():requires_grad_(),
                   c:detach():requires_grad_(), t:detach():requires_grad_()
      local out = qkv.attention(a, b, c, {weights = false, score_mod = mod(t), causal = true})
      out:sum():backward()
      return out, a.grad, b.grad, c.grad, t.grad
    end, {q, k, v, values({3, 21}, dt)})
  end
end

-- script run by qkv in a process of its own under the environment env
-- (what says how the GPU's kernels cut the work): it exits 0 and writes
-- "worst x"; returns x and what it wrote
local function worst_of(env, script, what)
  local out, code = S.sh(env .. " " .. S.quote(C.EXE) .. " -e " .. S.quote(script))
  lu.assertEquals(code, 0, what .. ": " .. out)
  local worst = tonumber(out:match("worst (%S+)"))
  lu.assertNotNil(worst, what .. ": " .. out)
  return worst, out
end

-- float16 and bfloat16 at head sizes 64 and 128 run on the tensor cores
-- with the program compiled into them (vm/cuda/attention_mma_kernel.cuh):
-- the CPU's values (computed in float32) to the dtype's tolerance, within
-- twice the CPU's error against float64, rows with no key zeros, the
-- index error, and the gradients (their backward is float32's)
local function rel64(x, want)
  local d = x:cpu():double() - want
  return math.sqrt((d * d):sum():item() / (want * want):sum():item())
end

function TestCudaVariants:testHalvesOnTheTensorCores()
  need()
  local slopes = qkv.alibi_slopes(2)
  local ids = qkv.tensor({1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5}, "int64")
                :repeat_interleave(7)                          -- 140 tokens, 5 documents
  local bias = qkv.arange(0, 2 * 279, "float64"):reshape(2, 279) / 100
  local cases = {
    -- name, n_q, n_k, d, options (q's dtype, its device)
    {"window causal", 140, 140, 64, function() return {mask_mod = V.sliding_window(20)} end},
    {"window block mask", 140, 140, 128, function()
      return {block_mask = qkv.block_mask(V.sliding_window(20), nil, nil, 140, 140, {block = 16})}
    end},
    {"documents, softcap", 140, 140, 64, function(dt, dev)
      return {mask_mod = V.document(ids:to(dev)), score_mod = V.softcap(4)}
    end},
    {"alibi causal, n_q < n_k", 70, 140, 128, function(dt, dev)
      return {score_mod = V.alibi(slopes:to(dev)), causal = true}
    end},
    {"captured bias, prefix", 100, 140, 64, function(dt, dev)
      local t = bias:to(dt):to(dev)
      return {score_mod = function(s, b, h, i, j) return s + t[{h, j - i + 140}] end,
              mask_mod = V.prefix_lm(9)}
    end},
    {"no key for early rows", 90, 90, 64, function()
      return {mask_mod = function(b, h, i, j) return j:le(i - 40) end}
    end},
  }
  for _, dt in ipairs{"bfloat16", "float16"} do
    for _, c in ipairs(cases) do
      local name, nq, nk, d, opts = c[1], c[2], c[3], c[4], c[5]
      local q = (values({1, 2, nq, d}, "float64") / 3):to(dt)
      local k, v = (values({1, 2, nk, d}, "float64") / 3):to(dt), values({1, 2, nk, d}, dt)
      local label = ("%s %s d %d"):format(dt, name, d)
      same(label, function(a, b, e)
        local o = opts(dt, a.device)
        o.weights = false
        return qkv.attention(a, b, e, o)
      end, {q, k, v})
      local o = opts(dt, "cuda")
      o.weights = false
      local got = qkv.attention(q:cuda(), k:cuda(), v:cuda(), o)
      local ran = qkv.cuda.attention_backend()
      if ran ~= "cpu" and os.getenv("QKV_CUDA_JIT") ~= "0" then   -- the simulation's second pass
        lu.assertEquals(ran, "mods-mma", label)
      end
      local o64 = opts("float64", "cpu")
      o64.weights = false
      local want = qkv.attention(q:double(), k:double(), v:double(), o64)
      local oc = opts(dt, "cpu")
      oc.weights = false
      local cpu, gpu = rel64(qkv.attention(q, k, v, oc), want), rel64(got, want)
      lu.assertTrue(gpu <= 2 * cpu, ("%s: error %.3g against float64, the CPU's %.3g"):format(
        label, gpu, cpu))
      if name == "no key for early rows" then
        lu.assertEquals(got:narrow(3, 1, 40):cpu():abs():max():item(), 0, label .. ": rows with no key")
        lu.assertTrue(got:narrow(3, 41, 50):cpu():abs():min():item() > 0, label)
      end
    end
    -- the gradients: the tensor cores' backward with the program in it
    local q, k, v = values({1, 2, 80, 64}, dt) / 3, values({1, 2, 80, 64}, dt) / 3,
                    values({1, 2, 80, 64}, dt)
    same(dt .. " gradients", function(a, b, e, t)
      a, b, e, t = a:detach():requires_grad_(), b:detach():requires_grad_(),
                   e:detach():requires_grad_(), t:detach():requires_grad_()
      local out = qkv.attention(a, b, e, {weights = false, mask_mod = V.sliding_window(30),
        score_mod = function(s, bb, h, i, j) return s + t[{h, j - i + 80}] end})
      out:sum():backward()
      return out, a.grad, b.grad, e.grad, t.grad
    end, {q, k, v, (values({2, 160}, "float64") / 10):to(dt)}, dt == "float16" and 4e-3 or 2e-2)
  end
  -- an index outside a captured tensor: the CPU's error
  -- kinds by batch item and head, causal with a mask tensor and n_q > n_k,
  -- grouped-query heads: forward and gradients
  local bh = qkv.block_mask(function(b, h, i, j) return (i - j):abs():lt(h * 7 + b * 5) end, 2, 3,
                            37, 53, {block = {16, 32}})
  local shaped = {
    {"block mask by (b, h)", {2, 3, 37, 64}, {2, 3, 53, 64}, function()
      return {block_mask = bh, score_mod = V.softcap(3)}
    end},
    {"causal, a mask, n_q > n_k", {2, 3, 70, 128}, {2, 3, 45, 128}, function(m)
      return {causal = true, mask = m, score_mod = V.softcap(2)}
    end},
    {"grouped heads", {1, 4, 50, 64}, {1, 2, 50, 64}, function()
      return {enable_gqa = true, mask_mod = V.sliding_window(9),
              score_mod = function(s, b, h, i, j) return s - h * 0.25 end}
    end},
  }
  for _, dt in ipairs{"bfloat16", "float16"} do
    for _, c in ipairs(shaped) do
      local q = (values(c[2], "float64") / 3):to(dt)
      local k, v = (values(c[3], "float64") / 3):to(dt), values(c[3], dt)
      local m = values({c[2][1], 1, c[2][3], c[3][3]}, "bool")
      same(dt .. " " .. c[1], function(a, b, e, w)
        a, b, e = a:detach():requires_grad_(), b:detach():requires_grad_(), e:detach():requires_grad_()
        local o = c[4](w)
        o.weights = false
        local out = qkv.attention(a, b, e, o)
        out:sum():backward()
        return out, a.grad, b.grad, e.grad
      end, {q, k, v, m}, dt == "float16" and 4e-3 or 2e-2)
      if qkv.cuda.attention_backend() ~= "cpu" and os.getenv("QKV_CUDA_JIT") ~= "0" then
        lu.assertEquals(qkv.cuda.attention_backend(), "mods-mma", dt .. " " .. c[1])
      end
    end
  end
end

-- the gradients of float16 and bfloat16 through the tensor cores'
-- backward with the program compiled in (attention_mma_bwd_kernel.cuh):
-- q's, k's, v's and a captured bias's, each against float64 within three
-- times the CPU's own error (the CPU computes in float32 copies; the GPU
-- also rounds P and dS to the dtype before their products), with a block
-- mask's query tiles skipped, a derivative by the score (softcap), rows
-- with no key, head sizes 64 and 128
function TestCudaVariants:testHalfGradientsOnTheTensorCores()
  need()
  local ids = qkv.tensor({1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3}, "int64"):repeat_interleave(8)
  local cases = {
    -- name, n, d, options (q's dtype, its device, the captured bias or nil)
    {"window block mask, causal, bias", 96, 64, function(dt, dev, t)
      return {block_mask = qkv.block_mask(V.sliding_window(17), nil, nil, 96, 96, {block = 16}),
              score_mod = function(s, b, h, i, j) return s + t[{h, j - i + 96}] end}
    end, true},
    {"documents, softcap", 96, 128, function(dt, dev)
      return {mask_mod = V.document(ids:to(dev)), score_mod = V.softcap(3)}
    end},
    {"no key for early rows, alibi", 70, 64, function(dt, dev)
      return {mask_mod = function(b, h, i, j) return j:le(i - 30) end,
              score_mod = V.alibi(qkv.alibi_slopes(2):to(dev))}
    end},
  }
  local function rel(x, want)
    local d = x:cpu():double() - want
    return math.sqrt((d * d):sum():item() / math.max((want * want):sum():item(), 1e-300))
  end
  for _, dt in ipairs{"bfloat16", "float16"} do
    for _, c in ipairs(cases) do
      local name, n, d, opts, biased = c[1], c[2], c[3], c[4], c[5]
      qkv.seed(5)
      local q, k = (values({1, 2, n, d}, "float64") / 3):to(dt), (values({1, 2, n, d}, "float64") / 3):to(dt)
      local v, g = values({1, 2, n, d}, dt), values({1, 2, n, d}, dt)
      local bias = (values({2, 2 * n}, "float64") / 10):to(dt)
      local function grads(dev, cast)
        local function leaf(x) return cast(x):to(dev):detach():requires_grad_() end
        local a, b, e, t = leaf(q), leaf(k), leaf(v), leaf(bias)
        local o = opts(a.dtype, dev, t)
        o.weights = false
        qkv.attention(a, b, e, o):backward(cast(g):to(dev))
        return {a.grad, b.grad, e.grad, biased and t.grad or nil}, qkv.cuda.attention_backend()
      end
      local label = ("%s %s d %d"):format(dt, name, d)
      local want = grads("cpu", function(x) return x:double() end)
      local cpu = grads("cpu", function(x) return x end)
      local gpu, ran = grads("cuda", function(x) return x end)
      if ran ~= "cpu" and os.getenv("QKV_CUDA_JIT") ~= "0" then
        lu.assertEquals(ran, "mods-mma", label)
      end
      for w = 1, #want do
        lu.assertEquals(gpu[w].dtype, dt, label)
        local ec, eg = rel(cpu[w], want[w]), rel(gpu[w], want[w])
        lu.assertTrue(eg <= 3 * ec + 1e-6, ("%s: gradient %d's error %.3g against float64, the CPU's %.3g")
          :format(label, w, eg, ec))
      end
      if name:find("no key") then                 -- rows with no key send nothing to q
        lu.assertEquals(gpu[1]:narrow(3, 1, 30):cpu():abs():max():item(), 0, label)
      end
    end
  end
end

-- float32 and float64 gradients under a block mask take each chunk of
-- query rows over its key window only (vm/cuda/attention_bwd.cu); with
-- chunks of 16 rows (QKV_CUDA_BWD_ROWS, in a process of its own) a window,
-- documents and a mask whose early rows keep no key must give the CPU's
-- gradients, q's, k's, v's and a captured bias's
function TestCudaVariants:testBackwardInKeyWindows()
  need()
  local script = [[
    local V = qkv.variants
    local ids = qkv.tensor({1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3}, "int64"):repeat_interleave(8)
    local cases = {
      window = function(dev) return {block_mask = qkv.block_mask(V.sliding_window(13), nil, nil, 96, 96, {block = 16})} end,
      documents = function(dev) return {mask_mod = V.document(ids:to(dev))} end,
      late = function(dev) return {mask_mod = function(b, h, i, j) return j:le(i - 40) end} end,
    }
    local worst = 0
    for _, dt in ipairs{"float64", "float32"} do
      for name, opts in pairs(cases) do
        qkv.seed(3)
        local q, k, v, g = qkv.randn(2, 2, 96, 8, dt), qkv.randn(2, 2, 96, 8, dt), qkv.randn(2, 2, 96, 5, dt), qkv.randn(2, 2, 96, 5, dt)
        local bias = qkv.randn(2, 192, dt)
        local function grads(dev)
          local function leaf(x) return x:to(dev):detach():requires_grad_() end
          local a, b, e, t = leaf(q), leaf(k), leaf(v), leaf(bias)
          local o = opts(dev)
          o.weights = false
          o.score_mod = function(s, bb, h, i, j) return s + t[{h, j - i + 96}] end
          qkv.attention(a, b, e, o):backward(g:to(dev))
          return {a.grad, b.grad, e.grad, t.grad}
        end
        local want, got = grads("cpu"), grads("cuda")
        for w = 1, 4 do
          local d = (got[w]:cpu():double() - want[w]:double()):abs():max():item()
          local r = d / math.max(want[w]:double():abs():max():item(), 1e-300)
          worst = math.max(worst, dt == "float64" and r * 1e5 or r)
        end
      end
    end
    io.write(("worst %.3g"):format(worst))
  ]]
  local worst, out = worst_of("QKV_CUDA_BWD_ROWS=16", script, "16-row chunks")
  -- float32 within 1e-5 of the CPU's, float64 within 1e-10 (scaled by 1e5)
  lu.assertTrue(worst <= 1e-5, out)
end

-- the tensor cores' forward with a program at every tiling
-- QKV_CUDA_MMA_VARIANT names (two m-tiles a warp take the program's loops
-- other paths than the default r16k64's), each in a process of its own:
-- the CPU's values, bfloat16, a window with a soft-cap at d 64
function TestCudaVariants:testHalvesInEveryTiling()
  need()
  local script = [[
    local V = qkv.variants
    qkv.seed(4)
    local q, k = (qkv.randn(1, 2, 150, 64) / 3):to("bfloat16"), (qkv.randn(1, 2, 150, 64) / 3):to("bfloat16")
    local v = qkv.randn(1, 2, 150, 64):to("bfloat16")
    local bm = qkv.block_mask(V.sliding_window(40), nil, nil, 150, 150, {block = 16})
    local worst = 0
    for _, o in ipairs{{block_mask = bm, score_mod = V.softcap(2)}, {mask_mod = V.sliding_window(40), score_mod = V.softcap(2)}} do
      o.weights = false
      local want = qkv.attention(q, k, v, o):double()
      local got = qkv.attention(q:cuda(), k:cuda(), v:cuda(), o)
      io.write(qkv.cuda.attention_backend(), " ")
      local d = got:cpu():double() - want
      worst = math.max(worst, math.sqrt((d * d):sum():item() / (want * want):sum():item()))
    end
    io.write(("worst %.3g"):format(worst))
  ]]
  for _, variant in ipairs{"r16k64", "r32k32", "r32k64", "r32k128"} do
    local worst, out = worst_of("QKV_CUDA_MMA_VARIANT=" .. variant, script, variant)
    if not out:find("cpu") and os.getenv("QKV_CUDA_JIT") ~= "0" then
      lu.assertStrContains(out, "mods-mma mods-mma", false, variant)
    end
    lu.assertTrue(worst <= 1e-2, variant .. ": " .. out)
  end
end
