-- test_modules.lua: the cross-backend suite's library on the GPU: the fused
-- Adam step (the backend's adam) under qkv.optim, nn modules moved to the
-- device, a training step, plots of GPU tensors
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local C = dofile("tests/helpers/cuda_suite.lua")
local need, compare, values, FLOATS = C.need, C.compare, C.values, C.FLOATS

---------------------------------------------------------------- optimizers

TestCudaOptim = {}

-- the fused Adam step (qkv._adam, under qkv.optim.Adam and AdamW): three
-- steps on the GPU give the CPU's parameters and state
function TestCudaOptim:testAdamStepsAsTheCpu()
  need()
  local variants = {{"Adam", {lr = 0.01}}, {"Adam", {lr = 0.01, amsgrad = true, weight_decay = 0.1}},
                    {"AdamW", {lr = 0.01, weight_decay = 0.05}}, {"Adam", {lr = 0.01, maximize = true}}}
  for _, var in ipairs(variants) do
    for _, dt in ipairs(FLOATS) do
      local what = ("%s %s %s"):format(dt, var[1], var[2].amsgrad and "amsgrad" or "")
      local pc = values({7, 33}, dt)
      local pg = pc:cuda():requires_grad_()
      pc:requires_grad_()
      local oc, og = qkv.optim[var[1]]({pc}, var[2]), qkv.optim[var[1]]({pg}, var[2])
      for _ = 1, 3 do
        local g = values({7, 33}, dt)
        pc.grad, pg.grad = g, g:cuda()
        oc:step()
        og:step()
      end
      compare(pc, pg, what .. ": p")
      compare(oc.state[1].m, og.state[1].m, what .. ": m")
      compare(oc.state[1].v, og.state[1].v, what .. ": v")
    end
  end
end

---------------------------------------------------------------- modules and scripts

TestCudaModules = {}

function TestCudaModules:testMultiHeadAttentionModuleOnTheGpu()
  need()
  qkv.seed(3)
  local m = qkv.nn.MultiHeadAttention(32, 4)
  local x = values({2, 9, 32}, "float32")
  local ref = m(x)
  m:cuda()
  for _, p in ipairs(m:parameters()) do lu.assertEquals(p[2].device, "cuda", p[1]) end
  compare(ref, m(x:cuda()), "MultiHeadAttention")
  m:cpu()
  compare(ref, (m(x)):cuda(), "back on the CPU")
end

function TestCudaModules:testTrainingStepOnTheGpu()
  need()
  require "qkv.autograd"
  local function step(dev)
    qkv.seed(9)
    local m = qkv.nn.Sequential(qkv.nn.Linear(8, 16), qkv.nn.GELU(), qkv.nn.Linear(16, 3)):to(dev)
    local opt = qkv.optim.Adam(m:parameters(), {lr = 0.01})
    local x = values({10, 8}, "float32"):to(dev)
    local y = qkv.tensor({1, 2, 3, 1, 2, 3, 1, 2, 3, 1}, "int64"):to(dev)
    local loss
    for _ = 1, 5 do
      opt:zero_grad()
      loss = qkv.nn.cross_entropy(m(x), y)
      loss:backward()
      opt:step()
    end
    return loss
  end
  compare(step("cpu"), step("cuda"), "5 Adam steps", 1e-5)
end

function TestCudaModules:testPlotsCopyToTheHost()
  need()
  local w = qkv.softmax(values({6, 6}, "float32"), 2)
  local a, b = os.tmpname() .. ".png", os.tmpname() .. ".png"
  qkv.plot.heatmap(w, {file = a})
  qkv.plot.heatmap(w:cuda(), {file = b})
  local fa, fb = io.open(a, "rb"), io.open(b, "rb")
  lu.assertEquals(fb:read("a"), fa:read("a"))
  fa:close() fb:close()
  os.remove(a) os.remove(b)
end
