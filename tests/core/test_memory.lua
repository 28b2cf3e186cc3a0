-- test_memory.lua: tensor memory. Storage bytes are accounted to Lua's
-- collector (loops of temporaries stay flat in resident memory),
-- qkv.memory() counts live storage bytes exactly, __close frees at once,
-- tensors of at most 1 KiB live inside their Lua object (counted by Lua,
-- not by qkv.memory()) and views of them keep that object alive,
-- and an allocation that does not fit is a Lua error after one full
-- collection and retry, never a crash.
-- QKV_MEMORY_LOOP (make test-asan sets it) shrinks the loop of temporaries.
local lu = require "luaunit"
-- host memory (tensors inside Lua objects, the RAM limit and its
-- collect-and-retry): the GPU's caching allocator is cuda/test_device.lua's, so
-- this suite stays on the CPU under `qkv test --device cuda`
qkv.set_default_device("cpu")

local shell = dofile("tests/helpers/shell.lua")
local quote, sh = shell.quote, shell.sh
local exe = arg and arg[-1] or "build/qkv"
local MB = 2^20

local slurp = shell.read

local PAGE = tonumber((sh("getconf PAGESIZE"))) or 4096

-- resident memory in MB (Linux only: nil elsewhere)
local function rss_mb()
  local statm = slurp("/proc/self/statm")
  local resident = statm and tonumber(statm:match("^%d+%s+(%d+)"))
  return resident and resident * PAGE / MB
end

-- under AddressSanitizer freed blocks wait in its quarantine (256 MB unless
-- ASAN_OPTIONS says otherwise) before they are reused: 0 without it
local function quarantine_mb()
  local maps = slurp("/proc/self/maps") or ""
  if not (maps:find("libasan", 1, true) or maps:find("clang_rt.asan", 1, true)) then
    return 0
  end
  return tonumber((os.getenv("ASAN_OPTIONS") or ""):match("quarantine_size_mb=(%d+)")) or 256
end

-- when the returned value goes out of scope, the memory limit is put back
-- and the collector restarted, whatever the test did
local function guard()
  local old = qkv._memory_limit()
  return setmetatable({}, {__close = function()
    qkv._memory_limit(old)
    collectgarbage("restart")
  end})
end


TestResident = {}

-- 10^6 temporaries of 1000 floats, made as scripts make them (an operator
-- and a primitive). Without the accounting Lua sees only the small headers,
-- paces its collector by a 16 MB heap, and lets gigabytes of storage pile
-- up as garbage.
function TestResident:testTemporariesStayFlat()
  if not rss_mb() then lu.skip("no /proc/self/statm") end
  local n = math.tointeger(tonumber(os.getenv("QKV_MEMORY_LOOP")) or 1e6)
  local q = quarantine_mb()
  local ballast = {}
  for i = 1, 1e6 do ballast[i] = i + 0.5 end      -- a 16 MB Lua heap
  local x = qkv.rand(10, 100)
  collectgarbage()
  local start = rss_mb()
  -- the steady state: thread pools up, and ASan's quarantine full
  local warm_up = math.max(1e5, 1.5 * q * MB / 4000)
  for _ = 1, warm_up // 2 do
    local _, _ = x + 1, qkv.softmax(x)
  end
  local warm, peak = rss_mb(), 0
  for i = 1, n // 2 do
    local y = x + 1
    local s = qkv.softmax(y)
    if i % 5000 == 0 then peak = math.max(peak, rss_mb()) end
    if i == 1 then                     -- the loop computes what it should
      lu.assertAlmostEquals(s:sum():item(), 10, 1e-5)
    end
  end
  lu.assertEquals(#ballast, 1e6)
  lu.assertTrue(peak - warm < 8, ("grew from %.1f to %.1f MB"):format(warm, peak))
  -- a quarantined block keeps its redzones and shadow resident too: about
  -- 1.4 times q in a process whose quarantine starts empty, as each file's
  -- process under `qkv test` does
  lu.assertTrue(peak - start < 64 + 1.5 * q, ("%.1f MB above the start"):format(peak - start))
end


TestCounting = {}

function TestCounting:setUp()
  collectgarbage()
  self.base = qkv.memory()
end

function TestCounting:delta() return qkv.memory() - self.base end

function TestCounting:testNewTensorsCountTheirBytes()
  local a = qkv.zeros(1000, "float64")
  lu.assertEquals(self:delta(), 8000)
  local b = qkv.ones(30, 50)                    -- float32
  lu.assertEquals(self:delta(), 8000 + 6000)
  local bools, ints = {}, {}
  for i = 1, 2000 do bools[i] = i % 3 == 0 end
  for i = 1, 300 do ints[i] = i end
  local c = qkv.tensor(bools)
  local d = qkv.tensor(ints, "int64")
  lu.assertEquals(c.dtype, "bool")
  lu.assertEquals(d.dtype, "int64")
  lu.assertEquals(self:delta(), 8000 + 6000 + 2000 + 2400)
  local e = qkv.zeros(0, 7)                     -- no elements, no bytes
  lu.assertEquals(self:delta(), 8000 + 6000 + 2000 + 2400)
  lu.assertEquals(e:numel(), 0)
  local f = a + 1                               -- results count too
  lu.assertEquals(self:delta(), 2 * 8000 + 6000 + 2000 + 2400)
  local w = qkv.softmax(qkv.randn(40, 60))      -- the input is garbage by now,
  lu.assertEquals(self:delta(), 2 * 8000 + 6000 + 2000 + 2400 + 2 * 9600)
  lu.assertEquals(w:size(1) * w:size(2), 2400)  -- but still counted
  a, b, c, d, e, f, w = nil, nil, nil, nil, nil, nil, nil
  collectgarbage()
  lu.assertEquals(self:delta(), 0)
end

-- small tensors: their bytes are in Lua's heap, and nothing is left once
-- collected
function TestCounting:testSmallTensorsLiveInLuasHeap()
  collectgarbage()
  local lua0 = collectgarbage("count")
  local keep = {}
  for i = 1, 100 do keep[i] = qkv.zeros(256) end   -- 1 KiB each, the most
  lu.assertEquals(self:delta(), 0)
  lu.assertTrue(collectgarbage("count") - lua0 >= 100, "100 KiB in Lua's heap")
  local big = qkv.zeros(257)                        -- 1028 bytes: outside
  lu.assertEquals(self:delta(), 1028)
  keep, big = nil, nil
  collectgarbage()
  lu.assertEquals(self:delta(), 0)
  lu.assertTrue(collectgarbage("count") - lua0 < 10)
end

local function view_list(x)
  return {x:view(-1, 8), x:transpose(1, 3), x:narrow(2, 2, 3), x:select(1, 2),
          x[3], x:permute(3, 1, 2), x:unsqueeze(1), x:reshape(8, -1),
          qkv.heads(x, 2), x:narrow(3, 1, 1):squeeze(),
          x:narrow(1, 1, 1):expand(9, 6, 8), x:contiguous(), x:to("float32"),
          x:cpu(), x:transpose(2, 3):transpose(1, 2)}
end

function TestCounting:testViewsShareStorage()
  local x = qkv.randn(8, 6, 8)
  lu.assertEquals(self:delta(), 8 * 6 * 8 * 4)
  local views = view_list(x)
  lu.assertEquals(#views, 15)
  lu.assertEquals(self:delta(), 8 * 6 * 8 * 4)
  -- the last views are gone, the storage stays while one view holds it
  x = nil
  for i = 2, #views do views[i] = nil end
  collectgarbage()
  lu.assertEquals(self:delta(), 8 * 6 * 8 * 4)
  lu.assertEquals(views[1].shape, qkv.zeros(48, 8).shape)
  views = nil
  collectgarbage()
  lu.assertEquals(self:delta(), 0)
end

-- a view of a small tensor keeps the Lua object that holds the data: the
-- owner dropped and collected, every view (and views of views) still reads
-- the same values
function TestCounting:testViewsOfSmallTensorsKeepTheirOwner()
  local x = qkv.randn(4, 6, 8)                  -- 768 bytes
  local views, expect = view_list(x), {}
  for i, v in ipairs(views) do expect[i] = v:clone() end
  local vv = x:transpose(1, 2)[2]:narrow(1, 2, 2)  -- a view of views
  local vexpect = vv:clone()
  local bytes = self:delta()                    -- the clones of 9 x 6 x 8
  x = nil
  for _ = 1, 3 do collectgarbage() end
  for _ = 1, 2000 do local _ = qkv.randn(4, 6, 8) end  -- reuse freed memory
  collectgarbage()
  for i, v in ipairs(views) do qkv.test.assertTensorEqual(v, expect[i]) end
  qkv.test.assertTensorEqual(vv, vexpect)
  lu.assertEquals(self:delta(), bytes)
end

function TestCounting:testCopiesHaveTheirOwnBytes()
  local x = qkv.randn(50, 30)
  local copies = {x:clone(), x:t():contiguous(), x:to("float64"), x:t():reshape(1500)}
  lu.assertEquals(self:delta(), 6000 + 6000 + 6000 + 12000 + 6000)
  copies = nil
  collectgarbage()
  lu.assertEquals(self:delta(), 6000)
end

function TestCounting:testCloseFreesAtOnceAndIsSafeTwice()
  local y
  do
    local x <close> = qkv.ones(512)
    y = x
    lu.assertEquals(self:delta(), 2048)
  end
  lu.assertEquals(self:delta(), 0)              -- no collection needed
  local mt = getmetatable(y)
  mt.__close(y)                                 -- a second time does nothing
  mt.__gc(y)
  lu.assertEquals(tostring(y), "tensor(<closed>)")
  local ok, err = pcall(function() return y:sum() end)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "tensor was closed")
end

function TestCounting:testClosedTensorsViewKeepsTheStorage()
  local v, s
  do
    local x <close> = qkv.arange(600)           -- float32, 2400 bytes
    local small <close> = qkv.arange(6)         -- inside its Lua object
    v, s = x:view(20, 30), small:view(2, 3)
  end
  collectgarbage()
  lu.assertEquals(self:delta(), 2400)
  lu.assertEquals(v[20][30], 599)
  lu.assertEquals(v:sum():item(), 599 * 600 / 2)
  lu.assertEquals(s:tolist(), {{0, 1, 2}, {3, 4, 5}})
  local ok, err = pcall(getmetatable(s).__close, 1)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "qkv.Tensor expected")
end

-- errors raised half-way leave nothing behind once collected
function TestCounting:testFailedCallsLeaveNoBytes()
  local x, W = qkv.randn(30, 40), qkv.randn(50, 20)
  for _ = 1, 100 do
    lu.assertFalse(pcall(qkv.project, x, W))
    lu.assertFalse(pcall(qkv.tensor, {{1, 2}, {3}}))
    lu.assertFalse(pcall(qkv.tensor, {{1, 2}, {3, "x"}}))
    lu.assertFalse(pcall(qkv.attention, x, x, W))
    lu.assertFalse(pcall(qkv.cat, {x, W}, 2))
  end
  collectgarbage()
  lu.assertEquals(self:delta(), 4800 + 4000)
end


TestOutOfMemory = {}

local function assertOOM(pattern, f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok)
  lu.assertStrMatches(err, ".*" .. pattern .. ": out of memory: tried to allocate %d+ bytes")
  return err
end

-- sizes a machine cannot hold, through every way of allocating
function TestOutOfMemory:testTooLargeForTheMachine()
  collectgarbage()
  local base = qkv.memory()
  local err = assertOOM("zeros", qkv.zeros, 1e12)
  lu.assertStrContains(err, "tried to allocate 4000000000000 bytes")
  assertOOM("ones", qkv.ones, 1e6, 1e6)
  assertOOM("randn", qkv.randn, 1e6, 1e6)
  assertOOM("full", qkv.full, {1e6, 1e6}, 2)
  local big = qkv.ones(1):expand(1e6, 1e6)      -- a view: no bytes
  assertOOM("contiguous", big.contiguous, big)
  assertOOM("clone", big.clone, big)
  err = assertOOM("to", big.to, big, "float64")
  lu.assertStrContains(err, "tried to allocate 8000000000000 bytes")
  assertOOM("add", function() return big + 1 end)
  assertOOM("softmax", qkv.softmax, big)
  -- and the session goes on
  local y = qkv.ones(30, 40) * 2
  lu.assertEquals(y:sum():item(), 2400)
  big = nil
  collectgarbage()
  lu.assertEquals(qkv.memory() - base, 4800)
end

-- malloc itself failing (an address-space limit, or ASan's cap on one
-- allocation) takes the same path: a child process, so the limit is its own
function TestOutOfMemory:testFailedMallocIsAnError()
  local code = "print(pcall(qkv.zeros, 2^31)); print(pcall(qkv.ones, 2^31)); " ..
               "print(qkv.memory(), qkv.ones(3):sum():item())"
  local cmd
  if quarantine_mb() > 0 then                   -- ASan reserves terabytes: no ulimit
    cmd = "(ASAN_OPTIONS=" .. quote((os.getenv("ASAN_OPTIONS") or "") ..
          ":allocator_may_return_null=1:max_allocation_size_mb=4096") ..
          " " .. quote(exe) .. " -e " .. quote(code) .. " 2>/dev/null)"  -- its warnings
  else
    -- what a started qkv maps (thread stacks, BLAS buffers) plus 1 GB
    local vm = sh(quote(exe) .. " -e " ..
                  quote('print(io.open("/proc/self/status"):read("a"):match("VmSize:%s*(%d+)"))'))
    vm = assert(tonumber(vm), vm)
    cmd = ("ulimit -v %d && %s -e %s"):format(vm + (1 << 20), quote(exe), quote(code))
  end
  local out, status = sh(cmd)
  lu.assertEquals(status, 0, out)
  lu.assertEquals(out, "false\tzeros: out of memory: tried to allocate 8589934592 bytes\n" ..
                       "false\tones: out of memory: tried to allocate 8589934592 bytes\n" ..
                       "0\t3.0\n")
end

-- an allocation that fits only once the garbage is collected succeeds
function TestOutOfMemory:testCollectsAndRetries()
  local _ <close> = guard()
  collectgarbage()
  collectgarbage("stop")          -- only the allocator's own collection runs
  local base = qkv.memory()
  local g = qkv.zeros(2^19)       -- 2 MB
  g = nil
  lu.assertEquals(qkv.memory() - base, 2 * MB)  -- garbage, not yet collected
  qkv._memory_limit(base + 3 * MB)
  local ok, y = pcall(qkv.zeros, 2^19)
  lu.assertTrue(ok, y)
  lu.assertEquals(qkv.memory() - base, 2 * MB)  -- g went, y came
  lu.assertEquals(y:sum():item(), 0)
  -- the same for an operator's result
  y = nil
  collectgarbage()
  local x = qkv.ones(2^18)        -- 1 MB
  local z = x + 1                 -- 1 MB, garbage once dropped
  z = nil
  lu.assertEquals(qkv.memory() - base, 2 * MB)
  qkv._memory_limit(base + 2.5 * MB)
  local w = x * 3                 -- fits once z is gone
  lu.assertEquals(qkv.memory() - base, 2 * MB)
  lu.assertEquals(w:max():item(), 3)
end

-- and fails, with the message, when the live tensors really fill the limit
function TestOutOfMemory:testLiveTensorsFillTheLimit()
  local _ <close> = guard()
  collectgarbage()
  local base = qkv.memory()
  local keep = qkv.zeros(2^19)    -- 2 MB, alive
  qkv._memory_limit(base + 3 * MB)
  local err = assertOOM("zeros", qkv.zeros, 2^19)
  lu.assertStrContains(err, "tried to allocate 2097152 bytes")
  assertOOM("add", function() return keep + 1 end)
  local small = qkv.ones(2^17)    -- half a MB still fits
  lu.assertEquals(qkv.memory() - base, 2.5 * MB)
  keep = nil                      -- once it is dropped the limit has room
  local again = qkv.zeros(2^19)
  lu.assertEquals(again:numel() + small:numel(), 2^19 + 2^17)
end

function TestOutOfMemory:testLimitArgument()
  local ok, err = pcall(qkv._memory_limit, -1)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "bytes must be >= 0")
  local old = qkv._memory_limit()
  lu.assertEquals(qkv._memory_limit(0), old)   -- 0: the machine's RAM again
  lu.assertEquals(qkv._memory_limit(), old)
  lu.assertTrue(old > 0)
end

-- host blocks over 2 KiB are cached for reuse (vm/cpu/alloc.c): a reused
-- block is zeroed for what promises zeros, and its bytes still count
TestCache = {}

function TestCache:testReusedBlocksAreZeroedAndCounted()
  collectgarbage()
  local base = qkv.memory()
  for _, n in ipairs{1000, 70000, 1000000} do        -- 4 KB, 280 KB, 4 MB
    local x = qkv.full({n}, 7.5)
    x = nil
    collectgarbage()
    lu.assertEquals(qkv.memory(), base)
    local z = qkv.zeros(n)
    lu.assertEquals(qkv.memory() - base, 4 * n)
    lu.assertEquals(z:abs():max():item(), 0, "zeros of " .. n)
    local o = qkv.ones(n)                               -- the same class again
    lu.assertEquals(o:sum():item(), n)
    z, o = nil, nil
    collectgarbage()
  end
  lu.assertEquals(qkv.memory(), base)
end

os.exit(lu.LuaUnit.run(), true)
