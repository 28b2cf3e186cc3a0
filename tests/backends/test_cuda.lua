-- test_cuda.lua: the cross-backend suite (as ggml's test-backend-ops). Every
-- entry of the backend table (vm/core/backend.h, listed by qkv._backend_entries)
-- runs on random inputs of many shapes and layouts (contiguous, transposed,
-- offset views, broadcast, size 1, empty, n not a multiple of any tile) on
-- the CPU and on the GPU, and the GPU's result must be the CPU's: exact for
-- integers, bools and copies, ||gpu - cpu|| / ||cpu|| < 1e-5 for float32
-- (TF32 off), 1e-12 for float64, with NaN and inf in the same places. Also
-- the device plumbing: moves, printing, mixed devices, numbers with GPU
-- tensors, Philox parity, out of memory, memory that stays flat, nn modules
-- and autograd on the GPU. Without a GPU only the checks that need none
-- run: every entry has a test here, and x:cuda() says why it cannot.
local lu = require "luaunit"
local t = qkv.test
local S = dofile("tests/helpers/shell.lua")
local check_grads = dofile("tests/helpers/half_grads.lua")
local D = dofile("tests/helpers/documents.lua")
local EXE = arg[-1]

qkv.set_default_device("cpu")     -- `qkv test --device cuda` sets the GPU
local GPU, WHY = qkv.cuda_available()
local inf, nan = math.huge, 0 / 0

local function need() if not GPU then lu.skip("needs CUDA: " .. tostring(WHY)) end end

---------------------------------------------------------------- comparing

local TOL = {float32 = 1e-5, float64 = 1e-12, float16 = 2e-3, bfloat16 = 1e-2}

-- x with NaN and inf replaced by 0, as float64 on the host
local function finite(x)
  local d = x:double()
  return d:masked_fill(d:ne(d), 0):masked_fill(d:abs():eq(inf), 0)
end

-- the GPU's result got against the CPU's ref
local function compare(ref, got, what, tol)
  if not qkv.is_tensor(ref) then
    lu.assertEquals(got, ref, what)
    return
  end
  lu.assertTrue(qkv.is_tensor(got), what .. ": no tensor from the GPU")
  lu.assertEquals(got.device, ref.device == "cpu" and "cuda" or ref.device, what .. ": device")
  lu.assertEquals(got.dtype, ref.dtype, what .. ": dtype")
  lu.assertEquals(got.shape, ref.shape, what .. ": shape")
  local g = got:cpu()
  if ref.dtype ~= "float32" and ref.dtype ~= "float64" and ref.dtype ~= "float16"
     and ref.dtype ~= "bfloat16" then
    t.assertTensorEqual(g, ref)
    return
  end
  if ref:numel() == 0 then return end
  local R, G = ref:double(), g:double()
  t.assertTensorEqual(G:ne(G), R:ne(R))                 -- NaN in the same places
  local ri = R:masked_fill(R:ne(R), 0):masked_fill(R:abs():lt(inf), 0)
  local gi = G:masked_fill(G:ne(G), 0):masked_fill(G:abs():lt(inf), 0)
  t.assertTensorEqual(gi, ri)                           -- the same infinities
  local fr, fg = finite(R), finite(G)
  local d = fr - fg
  local num, den = math.sqrt((d * d):sum():item()), math.sqrt((fr * fr):sum():item())
  local rel = den > 0 and num / den or num
  lu.assertTrue(rel <= (tol or TOL[ref.dtype]),
    ("%s: ||gpu - cpu|| / ||cpu|| = %.3g"):format(what, rel))
end

-- the same view of x on its own device: contiguous, transposed (the last
-- two dims' strides swapped), or at an offset inside a bigger storage
local LAYOUTS = {
  contiguous = function(x) return x:clone() end,
  transposed = function(x)
    if x:dim() < 2 then return x:clone() end
    return x:transpose(-1, -2):contiguous():transpose(-1, -2)
  end,
  offset = function(x)
    if x:dim() == 0 or x:size(1) == 0 then return x:clone() end
    local shape = x.shape
    shape[1] = shape[1] + 2
    local big = qkv.zeros(shape, x.dtype, x.device)
    return big:narrow(1, 2, x:size(1)):copy_(x)
  end,
}

local function move(args, layout, gpu)
  local out = {n = args.n or #args}
  for i = 1, out.n do
    local a = args[i]
    if qkv.is_tensor(a) then
      out[i] = layout(gpu and a:cuda() or a)
    else
      out[i] = a
    end
  end
  return out
end

-- f on the CPU and on the GPU, in each layout; every result compared
local function same(what, f, args, tol)
  args.n = args.n or #args
  for name, layout in pairs(LAYOUTS) do
    local c, g = move(args, layout, false), move(args, layout, true)
    local ref = table.pack(f(table.unpack(c, 1, c.n)))
    local got = table.pack(f(table.unpack(g, 1, g.n)))
    lu.assertEquals(got.n, ref.n, what)
    for i = 1, ref.n do compare(ref[i], got[i], what .. " [" .. name .. ", result " .. i .. "]", tol) end
  end
end

qkv.seed(7)
local SHAPES = {{}, {0}, {1}, {5}, {3, 1}, {2, 3, 4}, {7, 33}, {1, 1, 1}, {2, 0, 3}, {257}, {3, 130}}

local function values(shape, dt)
  local x = qkv.randn(shape, "float64") * 3
  if dt == "bool" then return x:gt(0) end
  if dt == "int64" or dt == "int32" then return x:long():to(dt) end
  return x:to(dt)
end

local FLOATS = {"float32", "float64"}
local ALL = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"}

---------------------------------------------------------------- coverage

-- which tests below cover each entry of the backend table: an entry added
-- to vm/core/backend.h without a cross-backend test here fails this suite
local COVER = {
  alloc = "TestCudaMemory", free = "TestCudaMemory", copy = "TestCudaCopy",
  fill = "TestCudaCopy", binary = "TestCudaElementwise", unary = "TestCudaElementwise",
  reduce = "TestCudaReduce", matmul = "TestCudaMatmul", masked_fill = "TestCudaElementwise",
  random = "TestCudaRandom", softmax = "TestCudaSoftmax", attention = "TestCudaAttention",
  where = "TestCudaSelect", gather = "TestCudaSelect", sort = "TestCudaSelect",
  attention_backward = "TestCudaAttention", scatter_add = "TestCudaSelect",
  softmax_backward = "TestCudaSoftmax", log_softmax = "TestCudaSoftmax",
  layer_norm = "TestCudaSoftmax", layer_norm_backward = "TestCudaSoftmax", cumsum = "TestCudaReduce", tri = "TestCudaSelect",
  adam = "TestCudaOptim",
}

TestCudaCoverage = {}

function TestCudaCoverage:testEveryEntryHasACrossBackendTest()
  local entries = qkv._backend_entries()
  lu.assertTrue(#entries >= 20)
  for _, e in ipairs(entries) do
    lu.assertTrue(e.cpu, "the CPU lacks " .. e.name)
    lu.assertNotNil(COVER[e.name], "no cross-backend test covers entry " .. e.name)
    lu.assertEquals(type(_G[COVER[e.name]]), "table", COVER[e.name])
  end
end

function TestCudaCoverage:testTheGpuFillsEveryEntry()
  need()
  for _, e in ipairs(qkv._backend_entries()) do
    lu.assertTrue(e.cuda, "the CUDA backend lacks entry " .. e.name)
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

---------------------------------------------------------------- memory

TestCudaMemory = {}

-- (64 KiB a temporary: one kept an iteration would be 19 MiB, well over
-- the 8 MiB allowed; small enough that the host simulation, which runs
-- each GPU thread, takes a second and not a minute)
function TestCudaMemory:testLoopOfTemporariesStaysFlat()
  need()
  local x = qkv.randn(64, 256, "cuda")
  collectgarbage()
  local base = qkv.cuda.memory().allocated
  for _ = 1, 300 do local y = (x * 2 + 1):exp() y = nil end
  collectgarbage()
  lu.assertTrue(qkv.cuda.memory().allocated <= base + (8 << 20),
    "allocated grew from " .. base .. " to " .. qkv.cuda.memory().allocated)
  local m = qkv.cuda.memory()
  lu.assertTrue(m.total > 0 and m.free <= m.total and m.peak >= m.allocated)
  qkv.cuda.empty_cache()
  lu.assertEquals(qkv.cuda.memory().cached, 0)
end

function TestCudaMemory:testOutOfMemoryIsAnErrorAndTheDeviceGoesOn()
  need()
  local total = qkv.cuda.memory().total
  local ok, err = pcall(qkv.zeros, total // 2, "float64", "cuda")   -- 4x the card
  lu.assertFalse(ok)
  lu.assertStrContains(err, "cuda: out of memory: tried to allocate")
  lu.assertStrContains(err, "free)")
  lu.assertEquals(qkv.ones(3, "cuda"):sum():item(), 3)
end

function TestCudaMemory:testDeviceNameAndTf32Switch()
  need()
  lu.assertTrue(#qkv.cuda.device_name() > 0)
  lu.assertFalse(qkv.cuda.allow_tf32())                -- off by default
  lu.assertFalse(qkv.cuda.allow_tf32(true))
  lu.assertTrue(qkv.cuda.allow_tf32(false))
  qkv.cuda.synchronize()
end

---------------------------------------------------------------- events

TestCudaEvents = {}

-- the GPU's time between two marks lies inside the host's time around
-- them, and is the same read either way round
function TestCudaEvents:testElapsedTimeIsInsideTheHostsTime()
  need()
  local x = qkv.randn(256, 256, "cuda")
  local a, b = qkv.cuda.Event(), qkv.cuda.Event()
  qkv.cuda.synchronize()
  local t0 = qkv.clock()
  lu.assertIs(a:record(), a)
  for _ = 1, 20 do x = (x:matmul(x) / 256):tanh() end
  b:record()
  local ms = a:elapsed_time(b)               -- waits for b
  local host = (qkv.clock() - t0) * 1e3
  lu.assertTrue(b:query())
  lu.assertTrue(ms > 0 and ms <= host + 0.01, ("GPU %.4f ms, host %.4f ms"):format(ms, host))
  lu.assertAlmostEquals(b:elapsed_time(a), -ms, 1e-6)
  -- recording again moves the mark: a now comes after b
  a:record()
  a:synchronize()
  lu.assertTrue(a:query())
  lu.assertTrue(b:elapsed_time(a) >= 0)
  lu.assertTrue(qkv.cuda.Event():query())    -- never recorded: nothing to wait for
  qkv.cuda.Event():synchronize()
  lu.assertStrContains(tostring(a), "qkv.cuda.Event(recorded)")
end

function TestCudaEvents:testMisuseIsAnErrorNamingTheMethod()
  need()
  local a, b = qkv.cuda.Event(), qkv.cuda.Event()
  local function fails(want, f, ...)
    local ok, err = pcall(f, ...)
    lu.assertFalse(ok, want)
    lu.assertStrContains(err, want)
  end
  fails("Event:elapsed_time: self was never recorded", a.elapsed_time, a, b)
  a:record()
  fails("Event:elapsed_time: stop was never recorded", a.elapsed_time, a, b)
  fails("Event:elapsed_time: stop must be a qkv.cuda.Event, got number", a.elapsed_time, a, 3)
  fails("Event:record: self must be a qkv.cuda.Event, got table", a.record, {})
  fails("Event:record: takes 1 argument, got 2", a.record, a, 1)
  local plain = qkv.cuda.Event{enable_timing = false}
  plain:record()
  plain:synchronize()
  lu.assertTrue(plain:query())
  lu.assertStrContains(tostring(plain), "enable_timing = false")
  fails("Event:elapsed_time: stop was made with enable_timing = false", a.elapsed_time, a, plain)
  fails("Event:elapsed_time: self was made with enable_timing = false", plain.elapsed_time, plain, a)
  fails("qkv.cuda.Event: unknown option 'enable_timeing' (did you mean 'enable_timing'?)",
        qkv.cuda.Event, {enable_timeing = true})
  fails("qkv.cuda.Event: enable_timing must be a boolean, got number", qkv.cuda.Event,
        {enable_timing = 1})
  fails("qkv.cuda.Event: takes 1 argument, got 2", qkv.cuda.Event, {}, {})
  fails("qkv.cuda.Event: opts must be a table, got number", qkv.cuda.Event, 6)
end

-- docs/cuda.md's timing example runs and prints what it says
function TestCudaEvents:testTheDocsExample()
  need()
  lu.assertEquals(D.run_block("docs/cuda.md", "Timing"), {"true true"})
end

---------------------------------------------------------------- copies

TestCudaCopy = {}

function TestCudaCopy:testRoundTripsAreExactInEveryDtype()
  need()
  for _, dt in ipairs(ALL) do
    for _, s in ipairs(SHAPES) do
      local x = values(s, dt)
      local g = x:cuda()
      lu.assertEquals(g.device, "cuda")
      t.assertTensorEqual(g:cpu(), x)
      t.assertTensorEqual(x:to("cuda"):to("cpu"), x)
      lu.assertTrue(rawequal(g:cuda(), g))
    end
  end
end

function TestCudaCopy:testConversionsOnTheDevice()
  need()
  local x = qkv.tensor{0, -0.5, 1.5, 2.5, -3.7, 1e10, -1e10, 70000, 1e-8, inf, -inf, nan}:double()
  -- values every dtype turns into one that the ints hold, where an int is
  -- made from a float (the others are errors: testFloatToIntErrorsOnTheDevice)
  local fit = qkv.tensor{0, -0.5, 1.5, 2.5, -3.7, 60000, 1e-8, -65504}:double()
  local int = {int64 = true, int32 = true}
  for _, from in ipairs(ALL) do
    for _, to in ipairs(ALL) do
      local v = (int[from] or int[to]) and fit or x
      same(from .. " -> " .. to, function(w) return w:to(to) end, {v:to(from)}, 0)
    end
  end
end

-- f(args) on the CPU and on the GPU raise the same error (messages that
-- name an element are built from the values, not from the backend)
local function same_error(what, f, args)
  local c, g = move(args, LAYOUTS.contiguous, false), move(args, LAYOUTS.contiguous, true)
  local okc, ec = pcall(f, table.unpack(c))
  local okg, eg = pcall(f, table.unpack(g))
  lu.assertFalse(okc, what .. ": no error on the CPU")
  lu.assertFalse(okg, what .. ": no error on the GPU")
  lu.assertEquals(eg, ec, what)
  return ec
end

-- NaN, ±inf and out-of-range floats into an int raise on the GPU as on
-- the CPU (the kernel's flag), at any place in a big tensor, and a failed
-- copy_ leaves the GPU tensor as it was
function TestCudaCopy:testFloatToIntErrorsOnTheDevice()
  need()
  local bad = {{nan, "nan"}, {inf, "inf"}, {-inf, "-inf"}, {3e38, "3e+38"}}
  for _, from in ipairs{"float32", "float64", "float16", "bfloat16"} do
    for _, to in ipairs{"int64", "int32"} do
      for _, b in ipairs(bad) do
        for _, n in ipairs{1, 7, 70001} do
          local x = qkv.zeros(n, "float64")
          x[n] = b[1]
          local e = same_error(from .. " " .. b[2] .. " -> " .. to .. " at " .. n,
                               function(v) return v:to(to) end, {x:to(from)})
          lu.assertStrContains(e, "at [" .. n .. "] to " .. to)
        end
      end
      local o = qkv.full({2, 3}, 5, to):cuda()
      lu.assertFalse(pcall(o.copy_, o, qkv.tensor({1, nan, 2}, from):cuda()))
      t.assertTensorEqual(o:cpu(), qkv.full({2, 3}, 5, to))
    end
  end
  local x = qkv.tensor({1, 2^31}, "float64")
  same_error("float64 2^31 -> int32", function(v) return v:int() end, {x})
  t.assertTensorEqual(qkv.arange(2^53, 2^53 + 4, 1, "int64", "cuda"):cpu(),
                      qkv.arange(2^53, 2^53 + 4, 1, "int64"))
end

function TestCudaCopy:testStridedCopiesAndFills()
  need()
  for _, dt in ipairs(ALL) do
    same(dt .. " contiguous of a transpose", function(v) return v:t():contiguous() end,
         {values({5, 7}, dt)})
    same(dt .. " copy_ into a narrow", function(v, w)
      local o = v:clone()
      o:narrow(2, 2, 3):copy_(w)
      return o
    end, {values({4, 6}, dt), values({4, 3}, dt)})
    same(dt .. " copy_ broadcast", function(v, w) return v:clone():copy_(w) end,
         {values({3, 4}, dt), values({4}, dt)})
    same(dt .. " fill_ a column", function(v)
      local o = v:clone()
      o:select(2, 2):fill_(1)
      return o
    end, {values({3, 4}, dt)})
  end
  for _, f in ipairs{"zeros", "ones"} do
    t.assertTensorEqual(qkv[f](3, 5, "cuda"):cpu(), qkv[f](3, 5))
  end
  t.assertTensorEqual(qkv.full({2, 3}, 2.5, "float64", "cuda"):cpu(), qkv.full({2, 3}, 2.5, "float64"))
  t.assertTensorEqual(qkv.eye(3, 4, "cuda"):cpu(), qkv.eye(3, 4))
  t.assertTensorEqual(qkv.arange(0, 10, 3, "int64", "cuda"):cpu(), qkv.arange(0, 10, 3, "int64"))
  t.assertTensorEqual(qkv.tensor{1, 2}:cuda():cpu(), qkv.tensor{1, 2})
end

function TestCudaCopy:testPrintingItemAndTolist()
  need()
  local x = qkv.tensor{{1.5, -2}, {3, 4}}
  local g = x:cuda()
  lu.assertStrContains(tostring(g), "device='cuda'")
  lu.assertEquals(tostring(g):gsub(", device='cuda'", ""), tostring(x))
  lu.assertEquals(g:tolist(), x:tolist())
  lu.assertEquals(g[2][1], 3)
  lu.assertEquals(g:sum():item(), 6.5)
  lu.assertStrContains(tostring(qkv.zeros(2, "int64", "cuda")), "device='cuda'")
  -- an expanded dim crosses to the host once: 2^40 elements print at once
  lu.assertEquals(tostring(qkv.ones(1, "cuda"):expand(2^40)),
                  "tensor([1., 1., 1.,  ..., 1., 1., 1.], device='cuda')")
  lu.assertEquals(g:expand(3, 2, 2):tolist()[3], x:tolist())
end

function TestCudaCopy:testMixedDevicesAreAnErrorNamingBoth()
  need()
  local a, b = qkv.ones(2), qkv.ones(2):cuda()
  for what, f in pairs{
    add = function() return a + b end,
    matmul = function() return qkv.ones(2, 2):matmul(b:view(2, 1)) end,
    attention = function() return qkv.attention(b:view(1, 2), a:view(1, 2), a:view(1, 2)) end,
  } do
    local ok, err = pcall(f)
    lu.assertFalse(ok, what)
    lu.assertStrContains(err, what)
    lu.assertStrContains(err, "cuda")
    lu.assertStrContains(err, "cpu")
  end
  -- a number is fine with a GPU tensor, as in PyTorch
  t.assertTensorEqual((b + 1):cpu(), qkv.full({2}, 2))
  t.assertTensorEqual((2 * b):cpu(), qkv.full({2}, 2))
  t.assertTensorEqual(b:masked_fill(b:gt(0), 5):cpu(), qkv.full({2}, 5))
end

---------------------------------------------------------------- elementwise

TestCudaElementwise = {}

local BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                "eq", "ne", "lt", "le", "gt", "ge"}

function TestCudaElementwise:testBinaryWithBroadcasting()
  need()
  local pairs_ = {{{2, 3, 4}, {2, 3, 4}}, {{3, 1}, {1, 4}}, {{5}, {}}, {{0, 3}, {3}},
                  {{7, 33}, {33}}, {{1}, {257}}, {{2, 1, 3}, {4, 1}}}
  for _, dt in ipairs{"float32", "float64", "int64", "bool"} do
    for _, op in ipairs(BINARY) do
      for _, sh in ipairs(pairs_) do
        local a, b = values(sh[1], dt), values(sh[2], dt)
        if op == "pow" and dt ~= "float32" and dt ~= "float64" then b = b:abs() end
        local ok = pcall(qkv[op], a, b)
        if ok then
          same(("%s %s %s %s"):format(dt, op, table.concat(sh[1], "x"), table.concat(sh[2], "x")),
               qkv[op], {a, b})
        end
      end
    end
  end
end

function TestCudaElementwise:testSpecialValues()
  need()
  local a = qkv.tensor{0, -0.0, 1, -1, inf, -inf, nan, 2, 1e-30, 88}
  local b = qkv.tensor{0, 0, nan, 2, inf, 1, 3, -inf, 0.5, -88}
  for _, op in ipairs(BINARY) do
    for _, dt in ipairs(FLOATS) do same(dt .. " " .. op, qkv[op], {a:to(dt), b:to(dt)}) end
  end
  local ia, ib = qkv.tensor({7, -7, 7, -7, 0, 5}, "int64"), qkv.tensor({2, 2, -2, -2, 3, 0}, "int64")
  for _, op in ipairs{"add", "sub", "mul", "maximum", "minimum", "lt"} do
    same("int64 " .. op, qkv[op], {ia, ib})
  end
  same("int64 pow", qkv.pow, {ia, ib:abs()})
end

local UNARY = {"neg", "exp", "log", "sqrt", "abs", "tanh", "gelu", "sigmoid", "relu",
               "silu", "sin", "cos"}

function TestCudaElementwise:testUnary()
  need()
  for _, op in ipairs(UNARY) do
    for _, dt in ipairs{"float32", "float64", "float16", "bfloat16"} do
      for _, s in ipairs(SHAPES) do
        same(("%s %s %s"):format(dt, op, table.concat(s, "x")), function(v) return v[op](v) end,
             {values(s, dt)})
      end
      same(dt .. " " .. op .. " special", function(v) return v[op](v) end,
           {qkv.tensor{0, -0.0, 1, -1, inf, -inf, nan, 1e-30, 88, -88, 3.5}:to(dt)})
    end
    same("int64 " .. op, function(v) return v[op](v) end, {values({4, 5}, "int64")})
  end
end

-- the binary op QKV_GELU_GRAD, reached through qkv._gelu_backward (autograd's
-- gelu rule)
function TestCudaElementwise:testGeluBackward()
  need()
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs(SHAPES) do
      same(("%s gelu_backward %s"):format(dt, table.concat(s, "x")), qkv._gelu_backward,
           {values(s, dt), values(s, dt)})
    end
    same(dt .. " gelu_backward special", qkv._gelu_backward,
         {qkv.tensor{0, -0.0, 1, -1, inf, -inf, nan, 1e-30, 88, -88, 3.5, -14.5}:to(dt),
          qkv.tensor{1, 2, -1, 0.5, 1, 1, 1, 3, 2, 2, -1, 1}:to(dt)})
  end
end

function TestCudaElementwise:testMaskedFillAndClamp()
  need()
  for _, dt in ipairs{"float32", "float64", "int64", "bool", "float16"} do
    local x, m = values({4, 7}, dt), values({4, 7}, "bool")
    same(dt .. " masked_fill", function(v, w) return v:masked_fill(w, 1) end, {x, m})
    same(dt .. " masked_fill broadcast", function(v, w) return v:masked_fill(w, 0) end,
         {x, values({7}, "bool")})
  end
  same("masked_fill -inf", function(v, w) return v:masked_fill(w, -inf) end,
       {values({3, 5}, "float32"), values({3, 5}, "bool")})
  same("clamp", function(v) return v:clamp(-1, 0.5) end, {values({6, 6}, "float32")})
  same("tril/triu", function(v) return v:tril() + v:triu(1) * 2 end, {values({5, 7}, "float32")})
end

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

---------------------------------------------------------------- reductions

TestCudaReduce = {}

function TestCudaReduce:testAlongEachDimAndOverAll()
  need()
  local shapes = {{5}, {3, 4}, {2, 3, 4}, {1, 300}, {300, 1}, {4, 2000}, {0, 3}, {3, 0}, {64, 65}}
  for _, dt in ipairs{"float32", "float64", "int64", "bool"} do
    for _, s in ipairs(shapes) do
      local x = values(s, dt)
      local label = dt .. " " .. table.concat(s, "x")
      for _, op in ipairs{"sum", "mean", "max", "min", "var", "std", "argmax", "argmin"} do
        local float_only = op == "mean" or op == "var" or op == "std"
        if not float_only or dt == "float32" or dt == "float64" then
          if x:numel() > 0 or op == "sum" or op == "mean" then
            same(label .. " " .. op .. "()", function(v) return v[op](v) end, {x})
          end
          for d = 1, #s do
            if s[d] > 0 or op == "sum" or op == "mean" then
              same(("%s %s(%d)"):format(label, op, d), function(v) return v[op](v, d) end, {x})
              same(("%s %s(%d, keep)"):format(label, op, d), function(v) return v[op](v, d, true) end, {x})
            end
          end
        end
      end
    end
  end
end

function TestCudaReduce:testCumsumAlongEachDim()
  need()
  for _, dt in ipairs{"float32", "float64", "int64", "bool", "float16"} do
    for _, s in ipairs{{}, {7}, {3, 1000}, {1000, 3}, {2, 3, 4}, {0, 5}} do
      local x = values(s, dt)
      for d = 1, math.max(#s, 1) do
        same(("%s %s cumsum(%d)"):format(dt, table.concat(s, "x"), d),
             function(v) return v:cumsum(#s == 0 and 1 or d) end, {x})
      end
    end
  end
end

function TestCudaReduce:testNaNTiesAndLongSums()
  need()
  local x = qkv.tensor{{1, nan, 3}, {2, 2, 1}, {-inf, -inf, 0}}
  for _, op in ipairs{"max", "min", "argmax", "argmin", "sum", "mean"} do
    same("nan/ties " .. op, function(v) return v[op](v, 2) end, {x})
  end
  -- 2^24 + many ones: a float32 accumulator would lose them all
  local big = qkv.ones(1 << 22)
  big[1] = 16777216
  same("long float32 sum", function(v) return v:sum() end, {big})
  same("long float32 mean of a column", function(v) return v:mean(1) end, {qkv.randn(100000, 3)})
  same("any/all", function(v) return v:any(), v:all(2) end, {values({4, 9}, "bool")})
end

---------------------------------------------------------------- matmul

TestCudaMatmul = {}

function TestCudaMatmul:testShapesLayoutsAndBatches()
  need()
  local cases = {
    {{3, 4}, {4, 5}}, {{1, 1}, {1, 1}}, {{7}, {7, 3}}, {{6, 7}, {7}}, {{5}, {5}},
    {{2, 3, 4}, {4, 5}}, {{2, 3, 4}, {2, 4, 5}}, {{1, 3, 4}, {6, 4, 2}},
    {{2, 1, 33, 17}, {3, 17, 65}}, {{0, 4}, {4, 3}}, {{3, 0}, {0, 2}}, {{130, 257}, {257, 129}},
  }
  for _, dt in ipairs(FLOATS) do
    for _, c in ipairs(cases) do
      same(("%s %s @ %s"):format(dt, table.concat(c[1], "x"), table.concat(c[2], "x")),
           qkv.matmul, {values(c[1], dt), values(c[2], dt)})
    end
    same(dt .. " a:t() @ b:t()", function(a, b) return a:t():matmul(b:t()) end,
         {values({9, 5}, dt), values({4, 9}, dt)})
    same(dt .. " broadcast batch (stride 0)", function(a, b) return a:expand(4, 3, 5):matmul(b) end,
         {values({1, 3, 5}, dt), values({4, 5, 2}, dt)})
    same(dt .. " scores", function(q, k) return qkv.scores(q, k) end,
         {values({2, 9, 16}, dt), values({2, 11, 16}, dt)})
    same(dt .. " project", function(x, w, b) return qkv.project(x, w, b) end,
         {values({3, 5, 8}, dt), values({8, 6}, dt), values({6}, dt)})
  end
end

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

---------------------------------------------------------------- softmax family

TestCudaSoftmax = {}

function TestCudaSoftmax:testSoftmaxAlongEveryDim()
  need()
  local shapes = {{5}, {3, 4}, {2, 3, 17}, {2, 5000}, {1, 70000}, {4, 1}, {0, 3}}
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs(shapes) do
      local x = values(s, dt)
      for d = 1, #s do
        same(("%s softmax %s dim %d"):format(dt, table.concat(s, "x"), d),
             function(v) return qkv.softmax(v, d) end, {x})
        same(("%s log_softmax %s dim %d"):format(dt, table.concat(s, "x"), d),
             function(v) return v:log_softmax(d) end, {x})
      end
    end
    -- a row all -inf: softmax gives zeros, log_softmax -inf
    local m = qkv.tensor{{1, 2, 3}, {-inf, -inf, -inf}, {0, -inf, 5}}:to(dt)
    same(dt .. " masked rows", function(v) return qkv.softmax(v), v:log_softmax() end, {m})
  end
end

function TestCudaSoftmax:testLayerNorm()
  need()
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs{{4, 8}, {2, 3, 384}, {5, 1}, {3, 1000}, {2, 3000}} do
      local x = values(s, dt) * 5 + 100
      local n = s[#s]
      same(dt .. " layer_norm " .. table.concat(s, "x"),
           function(v, w, b) return qkv.layer_norm(v, {n}, w, b), qkv.layer_norm(v, {n}) end,
           {x, values({n}, dt), values({n}, dt)})
    end
    same(dt .. " layer_norm over 2 dims", function(v) return qkv.layer_norm(v, {3, 4}) end,
         {values({2, 3, 4}, dt)})
  end
end

-- rows of a thread, a warp and a block; the sums over rows (gw, gb) with
-- and without w, and none asked for
function TestCudaSoftmax:testLayerNormBackward()
  need()
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs{{4, 8}, {2, 3, 384}, {5, 1}, {3, 1000}, {2, 3000}, {0, 6}} do
      local n = s[#s]
      same(dt .. " layer_norm backward " .. table.concat(s, "x"),
           function(v, g, w)
             local a, b, c = qkv._layer_norm_backward(v:contiguous(), g:contiguous(), n,
                                                      w:contiguous(), 1e-5, true, true)
             local d, e = qkv._layer_norm_backward(v:contiguous(), g:contiguous(), n, nil, 1e-3,
                                                   false, true)
             local f = qkv._layer_norm_backward(v:contiguous(), g:contiguous(), n)
             return a, b, c, d, e, f
           end, {values(s, dt) * 5 + 100, values(s, dt), values({n}, dt)})
    end
  end
end

function TestCudaSoftmax:testBackwardThroughAutograd()
  need()
  require "qkv.autograd"
  for _, dt in ipairs(FLOATS) do
    local grads = function(x, g)
      local v = x:detach():requires_grad_()
      local y = qkv.softmax(v * 2, 2) + v:log_softmax(2) * 0.5 + qkv.layer_norm(v, {x:size(2)})
      y:backward(g)
      return v.grad
    end
    same(dt .. " softmax/log_softmax/layer_norm backward", grads,
         {values({6, 37}, dt), values({6, 37}, dt)})
  end
end

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

---------------------------------------------------------------- selection

TestCudaSelect = {}

function TestCudaSelect:testWhereGatherScatter()
  need()
  for _, dt in ipairs{"float32", "float64", "int64", "bool"} do
    same(dt .. " where", qkv.where, {values({4, 7}, "bool"), values({4, 7}, dt), values({7}, dt)})
    same(dt .. " where number", function(c, a) return qkv.where(c, a, 0) end,
         {values({3, 5}, "bool"), values({3, 5}, dt)})
    local idx = (qkv.rand(5, 3) * 6):long() + 1
    same(dt .. " gather", function(a, i) return a:gather(2, i) end, {values({5, 6}, dt), idx})
  end
  for _, dt in ipairs{"float32", "float64", "int64"} do
    local idx = (qkv.rand(9, 4) * 3):long() + 1
    same(dt .. " scatter_add_ (repeated positions)", function(o, i, s)
      return o:clone():scatter_add_(1, i, s)
    end, {values({3, 4}, dt), idx, values({9, 4}, dt)})
    same(dt .. " index_add_", function(o, i, s) return o:clone():index_add_(1, i, s) end,
         {values({3, 4}, dt), qkv.tensor({1, 3, 1, 2, 3}, "int64"), values({5, 4}, dt)})
    same(dt .. " embedding", function(i, w) return qkv.embedding(i, w) end,
         {qkv.tensor({{1, 4}, {2, 2}}, "int64"), values({4, 6}, dt)})
  end
end

function TestCudaSelect:testSortIsStableWithNaNOnTop()
  need()
  local x = qkv.tensor{{3, 1, nan, 2, 1, -inf, inf, 2, -0.0, 0}, {5, 5, 5, 1, 1, 1, nan, nan, 0, 0}}
  for _, dt in ipairs{"float32", "float64"} do
    for _, desc in ipairs{false, true} do
      same(dt .. " sort desc=" .. tostring(desc), function(v) return v:sort(2, desc) end, {x:to(dt)})
    end
  end
  for _, dt in ipairs{"float32", "float64", "int64", "bool"} do
    for _, s in ipairs{{1}, {0}, {7}, {4, 100}, {3, 5000}, {2, 3, 9}} do
      for _, desc in ipairs{false, true} do
        same(("%s sort %s desc=%s"):format(dt, table.concat(s, "x"), tostring(desc)),
             function(v) return v:sort(-1, desc) end, {values(s, dt)})
      end
    end
    same(dt .. " sort dim 1", function(v) return v:sort(1) end, {values({6, 4}, dt)})
    same(dt .. " topk", function(v) return v:topk(3) end, {values({5, 20}, dt)})
  end
end

-- tril and triu (the backend's tri): every dtype, since the kernel moves
-- elements of 1, 2, 4 or 8 bytes whatever they hold; batched; bands past
-- either edge; and the masks made with it on the device, causal (in
-- place) and padding, as the CPU makes them
function TestCudaSelect:testTriangles()
  need()
  for _, dt in ipairs(ALL) do
    for _, s in ipairs{{3, 1}, {2, 3, 4}, {7, 33}, {2, 0, 3}, {3, 130}, {1, 1, 1}} do
      for _, k in ipairs{-40, -2, 0, 1, 40} do
        same(("%s tril/triu %s k = %d"):format(dt, table.concat(s, "x"), k),
             function(v) return v:tril(k), qkv.triu(v, k) end, {values(s, dt)})
      end
    end
  end
  local function on_gpu(f, ...)
    qkv.set_default_device("cuda")
    local r = table.pack(pcall(f, ...))
    qkv.set_default_device("cpu")
    if not r[1] then error(r[2], 0) end
    return table.unpack(r, 2, r.n)
  end
  for _, c in ipairs{{4, 4}, {3, 7}, {7, 3}, {0, 5}, {5, 0}, {1, 300}} do
    compare(qkv.causal(c[1], c[2]), on_gpu(qkv.causal, c[1], c[2]),
            ("causal(%d, %d)"):format(c[1], c[2]))
  end
  for _, c in ipairs{{{3, 0, 2}}, {{3, 0, 2}, 6}, {{}}, {{0, 0}, 0}, {{130, 7}}} do
    compare(qkv.padding(c[1], c[2]), on_gpu(qkv.padding, c[1], c[2]),
            "padding {" .. table.concat(c[1], ", ") .. "}")
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
