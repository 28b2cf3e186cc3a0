-- test_random.lua: the cross-backend suite's random numbers (the backend's
-- random): Philox gives the CPU's numbers on the GPU, draws interleave
-- across devices, dropout
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local t = qkv.test
local C = dofile("tests/helpers/cuda_suite.lua")
local need, compare, values, FLOATS = C.need, C.compare, C.values, C.FLOATS

---------------------------------------------------------------- random

TestCudaRandom = {}

function TestCudaRandom:testPhiloxGivesTheCpusNumbers()
  need()
  for _, n in ipairs{1, 3, 4, 5, 1000, 65537} do
    for _, dt in ipairs(FLOATS) do
      qkv.seed(n)
      local cu, cn = qkv.rand(n, dt), qkv.randn(n, dt)
      qkv.seed(n)
      local gu, gn = qkv.rand(n, dt, "cuda"), qkv.randn(n, dt, "cuda")
      -- uniform: bit for bit
      t.assertTensorEqual(gu:cpu(), cu)
      -- normal: Box-Muller's log, sin and cos are the GPU's own, in float64:
      -- within an ulp of a float32, four of a float64
      local ulp = dt == "float32" and 2 ^ -23 or 2 ^ -50
      local d = (gn:cpu():double() - cn:double()):abs()
      local bound = cn:double():abs() * ulp + 1e-300
      lu.assertEquals(d:gt(bound):sum():item(), 0, dt .. " randn " .. n)
    end
  end
  -- the offset advances the same on both devices: draws interleave
  qkv.seed(5)
  local a, b = qkv.rand(10), qkv.rand(7, "cuda")
  qkv.seed(5)
  local c, d = qkv.rand(10, "cuda"), qkv.rand(7)
  t.assertTensorEqual(c:cpu(), a)
  t.assertTensorEqual(b:cpu(), d)
end

function TestCudaRandom:testDropoutOnTheGpuMatchesTheCpu()
  need()
  local x = values({8, 50}, "float32")
  qkv.seed(11)
  local ref = qkv.dropout(x, 0.3, true)
  qkv.seed(11)
  compare(ref, qkv.dropout(x:cuda(), 0.3, true), "dropout")
end
