-- test_device.lua: the cross-backend suite's device itself (the backend's
-- alloc and free): memory that stays flat over a loop of temporaries, out
-- of memory as an error the device survives, the device's name and the
-- TF32 switch; qkv.cuda.Event's timing and its errors
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local D = dofile("tests/helpers/documents.lua")
local C = dofile("tests/helpers/cuda_suite.lua")
local need = C.need

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
