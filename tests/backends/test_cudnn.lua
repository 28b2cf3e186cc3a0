-- test_cudnn.lua -- the halves' attention through cuDNN (vm/cuda/cudnn.cpp)
-- on a real GPU: forward and backward against float64, each within twice
-- (forward) or three times (backward) the CPU's own error on the same
-- half inputs; the cases it takes and those it leaves to the tensor-core
-- kernel; QKV_CUDA_ATTENTION forcing either. Skips without a GPU, and
-- where the plugin was built without cuDNN's headers or no libcudnn is
-- found (the reason is printed: QKV_CUDA_ATTENTION=cudnn makes it an error).

local lu = require "luaunit"
local S = dofile("tests/helpers/shell.lua")
local check_grads = dofile("tests/helpers/half_grads.lua")
local D = dofile("tests/helpers/documents.lua")
local EXE = arg[-1]

local GPU, WHY = qkv.cuda_available()
-- the references are made on the CPU, also under --device cuda
qkv.set_default_device("cpu")

-- a subprocess's attention on one (1, 2, 64, 64) bfloat16 case under
-- QKV_CUDA_ATTENTION=path: its output (the path it reports, or the error)
-- and status
local function forced(path, opts)
  return S.sh("QKV_CUDA_ATTENTION=" .. path .. " " .. S.quote(EXE) .. " -e " .. S.quote(
    "local x = qkv.randn(1, 2, 64, 64, 'cuda'):to('bfloat16'); " ..
    "qkv.attention(x, x, x, {weights = false" .. (opts or "") .. "}); " ..
    "io.write(qkv.cuda.attention_backend())"))
end

-- whether cuDNN runs here: a skip where it is not there at all (a plugin
-- built without its headers, build/fakecuda.so's CPU, no libcudnn found);
-- an error where it is there and fails
local CUDNN, NOT
local function need()
  if not GPU then lu.skip("needs CUDA: " .. tostring(WHY)) end
  if CUDNN == nil then
    local out, code = forced("cudnn")
    CUDNN = code == 0 and out == "cudnn"
    NOT = out
    if not CUDNN and not (out == "cpu" or out:find("no libcudnn", 1, true) or
                          out:find("without cuDNN", 1, true) or out:find("QKV_CUDNN=0", 1, true)) then
      error("cuDNN is there but fails: " .. out)
    end
  end
  if not CUDNN then lu.skip("cuDNN's attention not in this plugin or not found: " .. NOT) end
end

local function rel64(x, want)
  local d = x:cpu():double() - want
  return math.sqrt((d * d):sum():item() / (want * want):sum():item())
end

local function draw(shape, dt) return (qkv.randn(shape, "float64") / 2):to(dt) end

-- batch, heads, n_q, n_k, d, causal
local CASES = {{2, 3, 64, 64, 64, false}, {1, 2, 100, 130, 128, true}, {2, 1, 37, 37, 64, true},
               {1, 4, 128, 90, 128, false}, {3, 2, 16, 200, 32, true}}

TestCudnn = {}

function TestCudnn:testForwardAgainstFloat64()
  need()
  qkv.seed(3)
  for _, dt in ipairs{"bfloat16", "float16"} do
    for _, c in ipairs(CASES) do
      local q, k, v = draw({c[1], c[2], c[3], c[5]}, dt), draw({c[1], c[2], c[4], c[5]}, dt),
                      draw({c[1], c[2], c[4], c[5]}, dt)
      local label = ("%s %s causal %s"):format(dt, table.concat(c, "x", 1, 5), c[6])
      local opts = {causal = c[6], weights = false, scale = 0.1}
      local got = qkv.attention(q:cuda(), k:cuda(), v:cuda(), opts)
      lu.assertEquals(qkv.cuda.attention_backend(), "cudnn", label)
      lu.assertEquals({got.dtype, got.device}, {dt, "cuda"}, label)
      local want = qkv.attention(q:double(), k:double(), v:double(), opts)
      local cpu, gpu = rel64(qkv.attention(q, k, v, opts), want), rel64(got, want)
      lu.assertTrue(gpu <= 2 * cpu, ("%s: error %.3g against float64, the CPU's %.3g"):format(
        label, gpu, cpu))
      -- the log-sum-exps it leaves, against float64's
      local _, lse = qkv._attention_lse(q:cuda(), k:cuda(), v:cuda(), nil, c[6], 0.1)
      local _, l64 = qkv._attention_lse(q:double(), k:double(), v:double(), nil, c[6], 0.1)
      lu.assertEquals(lse.dtype, "float32")
      local e = (lse:cpu():double() - l64):abs():max():item()
      lu.assertTrue(e < 1e-3, ("%s: lse off by %.3g"):format(label, e))
    end
  end
end

function TestCudnn:testBackwardAgainstFloat64()
  need()
  require "qkv.autograd"
  qkv.seed(4)
  for _, dt in ipairs{"bfloat16", "float16"} do
    for _, c in ipairs(CASES) do
      local q, k, v = draw({c[1], c[2], c[3], c[5]}, dt), draw({c[1], c[2], c[4], c[5]}, dt),
                      draw({c[1], c[2], c[4], c[5]}, dt)
      local g = draw({c[1], c[2], c[3], c[5]}, dt)
      local function grads(dev, cast)
        local x, y, z = cast(q):to(dev):detach():requires_grad_(),
                        cast(k):to(dev):detach():requires_grad_(),
                        cast(v):to(dev):detach():requires_grad_()
        qkv.attention(x, y, z, {causal = c[6], weights = false}):backward(cast(g):to(dev))
        return {x.grad, y.grad, z.grad}
      end
      local same = function(x) return x end
      local want = grads("cpu", function(x) return x:double() end)
      local cpu, gpu = grads("cpu", same), grads("cuda", same)
      lu.assertEquals(qkv.cuda.attention_backend(), "cudnn")
      check_grads(gpu, cpu, want, dt, ("%s %s causal %s"):format(dt, table.concat(c, "x", 1, 5),
                                                                 c[6]), 3)
    end
  end
end

-- a mask, or a causal n_q > n_k (rows with no key), go to the tensor cores
function TestCudnn:testWhatItLeaves()
  need()
  local q = draw({1, 2, 80, 64}, "bfloat16"):cuda()
  local k = draw({1, 2, 50, 64}, "bfloat16"):cuda()
  local m = qkv.ones(80, 50, "bool")
  m:narrow(1, 1, 2):fill_(false)
  local out = qkv.attention(q, k, k, {mask = m:cuda(), weights = false})
  lu.assertEquals(qkv.cuda.attention_backend(), "mma")
  lu.assertEquals(out:narrow(3, 1, 2):cpu():abs():max():item(), 0)
  out = qkv.attention(q, k, k, {causal = true, weights = false})
  lu.assertEquals(qkv.cuda.attention_backend(), "mma")
  lu.assertEquals(out:narrow(3, 1, 30):cpu():abs():max():item(), 0)
  -- QKV_CUDA_ATTENTION forces a path; cudnn on what cuDNN leaves is an error
  lu.assertEquals({forced("mma")}, {"mma", 0})
  lu.assertEquals({forced("fp32")}, {"fp32", 0})
  local msg, code = forced("cudnn", ", mask = qkv.ones(64, 64, 'bool'):cuda()")
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(msg, "the forced path cudnn")
  lu.assertStrContains(msg, "a mask")
end

-- qkv.cuda.attention_backend(path) forces the next calls' path in process
-- (any GPU plugin, the host simulation's too): fp32 for the halves, mma
-- where it runs and an error where it does not, auto back to the first
-- that runs; a name that is no path is an error naming the function
function TestCudnn:testForcingInProcess()
  if not GPU then lu.skip("needs CUDA: " .. tostring(WHY)) end
  local x = draw({1, 2, 40, 64}, "float16"):cuda()
  qkv.attention(x, x, x, {weights = false})
  if qkv.cuda.attention_backend() == "cpu" then lu.skip("build/fakecuda.so: the CPU's one path") end
  local want = qkv.attention(x:double(), x:double(), x:double(), {weights = false})
  local ok, err = pcall(function()
    qkv.cuda.attention_backend("fp32")
    local a = qkv.attention(x, x, x, {weights = false})
    lu.assertEquals(qkv.cuda.attention_backend(), "fp32")
    lu.assertTrue(rel64(a, want:cpu()) < 1e-3)
    lu.assertEquals(qkv.cuda.attention_backend("mma"), "fp32")
    local b = qkv.attention(x, x, x, {weights = false})
    lu.assertEquals(qkv.cuda.attention_backend(), "mma")
    lu.assertTrue(rel64(b, want:cpu()) < 1e-3)
    local y = x:narrow(4, 1, 32)
    local okm, msg = pcall(qkv.attention, y, y, y, {weights = false})
    lu.assertFalse(okm)
    lu.assertStrContains(msg, "the forced path mma")
    qkv.cuda.attention_backend("auto")              -- a mask: not cuDNN's; d 32: not mma's
    qkv.attention(y, y, y, {weights = false, mask = qkv.ones(40, 40, "bool"):cuda()})
    lu.assertEquals(qkv.cuda.attention_backend(), "fp32")
  end)
  qkv.cuda.attention_backend("auto")
  if not ok then error(err, 0) end
  local okb, msg = pcall(qkv.cuda.attention_backend, "tensorcores")
  lu.assertFalse(okb)
  lu.assertStrContains(msg, 'qkv.cuda.attention_backend: path tensorcores is none of "auto"')
end

-- docs/cuda.md's example runs as it says (cudnn, or mma without cuDNN; then mma)
function TestCudnn:testTheDocsExample()
  if not GPU then lu.skip("needs CUDA: " .. tostring(WHY)) end
  local ok, printed = pcall(D.run_block, "docs/cuda.md", "Half precision: cuDNN and the tensor cores")
  qkv.cuda.attention_backend("auto")
  if not ok then error(printed, 0) end
  if printed[1] == "cpu" then lu.skip("build/fakecuda.so: the CPU's one path") end
  lu.assertEquals(printed[2], "mma")
  lu.assertTrue(printed[1] == (CUDNN and "cudnn" or "mma") or (CUDNN == nil and printed[1] == "cudnn"),
                "first path " .. tostring(printed[1]))
end
