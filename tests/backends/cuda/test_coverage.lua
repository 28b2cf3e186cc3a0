-- test_coverage.lua: the cross-backend suite's table of contents
-- (tests/helpers/cuda_suite.lua says what the suite checks): every entry of
-- the backend table has a test in some part of tests/backends/cuda/, and the
-- GPU fills every entry; without a GPU every use of it says why; a fault
-- inside a kernel marks the device lost; device arguments are checked
local lu = require "luaunit"
local t = qkv.test
local S = dofile("tests/helpers/shell.lua")
local C = dofile("tests/helpers/cuda_suite.lua")
local need, EXE = C.need, C.EXE

---------------------------------------------------------------- coverage

-- which test class covers each entry of the backend table, defined in one
-- of the parts (C.classes() reads them all): an entry added to
-- vm/core/backend.h without a cross-backend test fails this suite
local COVER = {
  alloc = "TestCudaMemory", free = "TestCudaMemory", copy = "TestCudaCopy",
  fill = "TestCudaCopy", binary = "TestCudaElementwise", unary = "TestCudaElementwise",
  reduce = "TestCudaReduce", matmul = "TestCudaMatmul", masked_fill = "TestCudaElementwise",
  random = "TestCudaRandom", softmax = "TestCudaSoftmax", attention = "TestCudaAttention",
  where = "TestCudaSelect", gather = "TestCudaSelect", sort = "TestCudaSelect",
  attention_backward = "TestCudaAttention", scatter_add = "TestCudaSelect",
  softmax_backward = "TestCudaSoftmax", log_softmax = "TestCudaSoftmax",
  layer_norm = "TestCudaSoftmax", layer_norm_backward = "TestCudaSoftmax", cumsum = "TestCudaReduce", tri = "TestCudaSelect",
  adam = "TestCudaOptim", rms_norm = "TestCudaSoftmax", rms_norm_backward = "TestCudaSoftmax",
  attention_mods = "TestCudaVariants", attention_mods_backward = "TestCudaVariants",
  attention_blocks = "TestCudaVariants", split_products = "TestCudaMatmul",
}

-- entries the GPU does not fill yet, and why; each must stay unfilled
-- until it leaves this list (so that the list stays true)
local LATER = {
  attention_blocks = "issue 48: block masks are built on the CPU, their kinds copied to the GPU",
  split_products = "by design: the GPU's float32 matmul precision is TF32 (cuBLAS's math mode)",
}

TestCudaCoverage = {}

function TestCudaCoverage:testEveryEntryHasACrossBackendTest()
  local entries = qkv._backend_entries()
  local classes = C.classes()
  lu.assertTrue(#entries >= 20)
  for _, e in ipairs(entries) do
    lu.assertTrue(e.cpu, "the CPU lacks " .. e.name)
    lu.assertNotNil(COVER[e.name], "no cross-backend test covers entry " .. e.name)
    lu.assertNotNil(classes[COVER[e.name]], COVER[e.name] .. ": no part of " .. C.DIR .. " defines it")
  end
end

function TestCudaCoverage:testTheGpuFillsEveryEntry()
  need()
  -- the fake device (tests/tools/fakecuda.c) is the CPU's table, every entry
  -- filled: LATER speaks of the real plugin (and the simulation, its code)
  local fake = qkv.cuda.device_name():find("fakecuda", 1, true) ~= nil
  for _, e in ipairs(qkv._backend_entries()) do
    if LATER[e.name] and not fake then
      lu.assertFalse(e.cuda, e.name .. " is filled now: take it off the list LATER")
    else
      lu.assertTrue(e.cuda, "the CUDA backend lacks entry " .. e.name)
    end
  end
end

-- without a GPU (here: a plugin path that holds none, in a child process,
-- so that this runs on a GPU machine too) every use of it says why
function TestCudaCoverage:testWithoutAGpuEveryUseSaysWhy()
  local out, code = S.sh("QKV_CUDA_PLUGIN=/nonexistent/qkv_cuda.so " .. S.quote(EXE) .. " -e " ..
    S.quote([[
      local ok, why = qkv.cuda_available()
      assert(not ok and type(why) == "string" and #why > 0, "available")
      local x = qkv.ones(2)
      for what, f in pairs{
        cuda = function() return x:cuda() end, to = function() return x:to("cuda") end,
        zeros = function() return qkv.zeros(2, "cuda") end,
        randn = function() return qkv.randn(2, "float64", "cuda") end,
        memory = function() return qkv.cuda.memory() end,
        synchronize = function() return qkv.cuda.synchronize() end,
        ["qkv.cuda.Event"] = function() return qkv.cuda.Event() end,
      } do
        local ok, err = pcall(f)
        assert(not ok, what)
        assert(err:find(what .. ": cuda is not available: " .. why, 1, true), err)
      end
      -- the default device is lazy: the first tensor made there says why
      qkv.set_default_device("cuda")
      local ok, err = pcall(qkv.ones, 3)
      assert(not ok and err:find("cuda is not available", 1, true), err)
      print("checked: " .. why)]]))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, "checked: ")
  lu.assertStrContains(out, "/nonexistent/qkv_cuda.so")
end

-- a fault inside a kernel kills the CUDA context: every later use is an
-- error naming the first call that saw it, out of memory never, and the
-- process goes on (the host simulation's SIM_FAULT_AT makes the third
-- launch fault; build/simcuda.so is made by `make test-cudasim`)
function TestCudaCoverage:testAFaultMarksTheDeviceLost()
  local sim = EXE:gsub("[^/]*$", "") .. "simcuda.so"
  if not io.open(sim) then lu.skip("needs " .. sim .. " (make test-cudasim)") end
  local out, code = S.sh("SIM_FAULT_AT=3 QKV_CUDA_PLUGIN=" .. S.quote(sim) .. " " ..
    S.quote(EXE) .. " -e " .. S.quote([[
      local x = qkv.randn(4, 4, "cuda")                 -- launch 1
      for _, f in ipairs{
        function() return (x + 1):sum():item() end,     -- a fill, then the fault
        function() return x:matmul(x) end,
        function() return qkv.zeros(1 << 20, "cuda") end,
        function() return x:cpu() end,
        function() return qkv.cuda.synchronize() end,
        function() return qkv.cuda.Event():record() end,
      } do
        local ok, err = pcall(f)
        assert(not ok, "no error")
        print(err)
      end
      print(qkv.ones(2):sum():item())]]))
  if out:find("built from other headers", 1, true) then     -- the sim of an older tree
    lu.skip(sim .. " is older than the headers (make test-cudasim rebuilds it)")
  end
  lu.assertEquals(code, 0, out)
  local n = 0
  for line in out:gmatch("[^\n]+") do
    if line:find("device lost", 1, true) then
      n = n + 1
      lu.assertStrContains(line, "cuda: device lost: an illegal memory access was encountered " ..
        "(first seen by launch of binary_kernel at vm/cuda/elementwise.cu:")
      lu.assertNotStrContains(line, "out of memory")
    end
  end
  lu.assertEquals(n, 6, out)
  lu.assertStrContains(out, "\n2.0\n")                  -- the CPU goes on
end

function TestCudaCoverage:testDeviceArgumentsAreChecked()
  lu.assertEquals(qkv.zeros(2, "cpu").device, "cpu")
  lu.assertEquals(qkv.arange(3, "int64", "cpu").dtype, "int64")
  t.assertTensorEqual(qkv.full({2}, 3, "cpu"), qkv.tensor{3, 3})
  local ok, err = pcall(qkv.set_default_device, "gpu")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "invalid option 'gpu'")
  lu.assertEquals(qkv.default_device(), "cpu")
  ok, err = pcall(qkv.zeros, 2, "float32", "tpu")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "size, dtype or device expected")
end
