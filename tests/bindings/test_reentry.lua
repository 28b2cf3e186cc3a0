-- test_reentry.lua: Lua code that runs in the middle of a qkv call cannot
-- crash it or change its answer behind its back. Argument tables whose
-- metamethods close a tensor, drop one for the collector or lie; finalizers
-- and coroutines that close a tensor while a call holds its data; cyclic
-- and over-deep nested tables. Every case either gives the value the same
-- call gives with plain arguments, or a Lua error naming the function (the
-- ASan run of this suite checks the memory side).
local lu = require "luaunit"
local t = qkv.test
local R = dofile("tests/helpers/attn_ref.lua")

local function close(x) getmetatable(x).__close(x) end

-- a proxy for the plain table `real`: every read goes through __index and
-- __len, and `hook(key)` runs first at each one
local function proxy(real, hook)
  return setmetatable({}, {
    __index = function(_, k) hook(k); return real[k] end,
    __len = function() hook("#"); return #real end,
  })
end

-- the message of the error f(...) raises
local function err(f, ...)
  local ok, e = pcall(f, ...)
  lu.assertFalse(ok, "no error")
  return tostring(e)
end

local function big(...) qkv.seed(7); return qkv.randn(...) end   -- > 1 KiB: own storage

---------------------------------------------------------------- options

TestOptions = {}

function TestOptions:testAttentionOptionsCloseQ()
  local Q, K, V = big(64, 32), big(64, 32), big(64, 32)
  local opts = proxy({causal = true}, function(k) if k == "causal" then close(Q) end end)
  lu.assertStrContains(err(qkv.attention, Q, K, V, opts),
                       "bad argument #1 to 'qkv.attention' (tensor was closed)")
end

function TestOptions:testAttentionOptionsCloseKAndV()
  for _, weights in ipairs{true, false} do
    local Q, K, V = big(8, 32), big(64, 32), big(64, 32)
    local opts = proxy({weights = weights}, function(k)
      if k == "weights" then close(K) elseif k == "mask" then close(V) end
    end)
    lu.assertStrContains(err(qkv.attention, Q, K, V, opts), "(tensor was closed)")
  end
end

-- a mask made fresh by __index, with the collector run on every read
function TestOptions:testFreshMaskSurvivesTheCollector()
  local Q, K, V = big(16, 8), big(40, 8), big(40, 8)
  local m = qkv.rand(16, 40):gt(0.3)
  for _, weights in ipairs{true, false} do
    local opts = proxy({}, function() collectgarbage() end)
    getmetatable(opts).__index = function(_, k)
      collectgarbage()
      if k == "mask" then return m:clone() end
      if k == "weights" then return weights end
    end
    local got = qkv.attention(Q, K, V, opts)
    t.assertClose(got, (qkv.attention(Q, K, V, {mask = m})), {rtol = 1e-5, atol = 1e-6})
  end
end

function TestOptions:testScoresScaleClosesK()
  local Q, K = big(8, 16), big(8, 16)
  local opts = proxy({scale = 2}, function() close(K) end)
  lu.assertStrContains(err(qkv.scores, Q, K, opts),
                       "bad argument #2 to 'qkv.scores' (tensor was closed)")
end

---------------------------------------------------------------- lists

TestLists = {}

-- each read returns a new copy and runs the collector: the copies are kept
-- alive until the call is done, and the answer is the plain one
function TestLists:testCatStackOfFreshTensors()
  local parts = {big(300, 4), big(100, 4), big(200, 4)}
  local function fresh()
    return setmetatable({}, {
      __len = function() collectgarbage(); return #parts end,
      __index = function(_, i) collectgarbage(); return parts[i] and parts[i]:clone() end,
    })
  end
  t.assertTensorEqual(qkv.cat(fresh()), qkv.cat(parts))
  local same = {parts[1], parts[1]:clone(), parts[1] * 2}
  local function fresh2()
    return setmetatable({}, {__len = function() return 3 end,
      __index = function(_, i) collectgarbage(); return same[i]:clone() end})
  end
  t.assertTensorEqual(qkv.stack(fresh2(), 2), qkv.stack(same, 2))
end

function TestLists:testCatListClosesAnItem()
  local a, b = big(300, 4), big(300, 4)
  local list = proxy({a, b}, function(k) if k == 2 then close(a) end end)
  lu.assertStrContains(err(qkv.cat, list), "cat: item 1 of the list is a closed tensor")
end

function TestLists:testAlignWeightsFreshAndClosing()
  local x, W1, b1, W2, b2 = big(5, 16), big(16, 32), big(32), big(32, 8), big(8)
  local w = {W1, b1, W2, b2}
  local fresh = setmetatable({}, {__len = function() return 4 end,
    __index = function(_, i) collectgarbage(); return w[i]:clone() end})
  t.assertClose(qkv.align(x, fresh), qkv.align(x, w))
  local closing = proxy(w, function(k) if k == 4 then close(x) end end)
  lu.assertStrContains(err(qkv.align, x, closing), "(tensor was closed)")
  x = big(5, 16)
  closing = proxy(w, function(k) if k == 4 then close(W1) end end)
  lu.assertStrContains(err(qkv.align, x, closing), "align: item 1 of the weights is a closed tensor")
end

-- lengths that change between reads: read once, the mask agrees with them
function TestLists:testPaddingLengthsThatLie()
  local reads = 0
  local lengths = setmetatable({}, {
    __len = function() return 3 end,
    __index = function(_, i) reads = reads + 1; return reads <= 3 and i or 99 end,
  })
  local m = qkv.padding(lengths)
  lu.assertEquals(m.shape, qkv.zeros(3, 1, 3).shape)
  lu.assertEquals(m:sum(-1):reshape(3):tolist(), {1, 2, 3})
  lu.assertEquals(reads, 3)
end

---------------------------------------------------------------- sizes

TestSizes = {}

function TestSizes:testViewsOfATensorClosedBySizes()
  for _, name in ipairs{"view", "reshape", "expand", "permute"} do
    local x = big(4, 1, 64)
    local real = name == "permute" and {3, 2, 1} or name == "expand" and {4, 5, 64} or {64, 4}
    local sizes = proxy(real, function() close(x) end)
    lu.assertStrContains(err(x[name], x, sizes), "tensor was closed", name)
  end
end

function TestSizes:testZerosWithLyingSizes()
  local n = 0
  local sizes = setmetatable({}, {__len = function() n = n + 1; return n == 1 and 2 or 7 end,
                                  __index = function(_, i) return i * 3 end})
  local z = qkv.zeros(sizes)
  lu.assertEquals(z.shape, qkv.zeros(3, 6).shape)
end

---------------------------------------------------------------- nested tables

TestNested = {}

function TestNested:testCycles()
  local t1 = {}
  t1[1] = t1
  lu.assertEquals(err(qkv.tensor, t1), "tensor: the nested table contains itself")
  local a, b = {}, {}
  a[1], b[1] = b, a
  lu.assertEquals(err(qkv.tensor, a), "tensor: the nested table contains itself")
  local row = {1, 2}
  t.assertTensorEqual(qkv.tensor{row, row}, qkv.tensor{{1, 2}, {1, 2}})   -- shared, not cyclic
  lu.assertEquals(err(qkv.tensor, {{{{{{{{{1}}}}}}}}}), "tensor: nested deeper than 8 levels")
end

function TestNested:testLyingRows()
  local calls = 0
  local row = setmetatable({}, {__len = function() calls = calls + 1; return calls == 1 and 2 or 3 end,
                                __index = function(_, i) return i end})
  lu.assertStrContains(err(qkv.tensor, {row}), "tensor: ragged nested table")
  local shape = setmetatable({}, {__len = function() return -1 end})
  lu.assertStrContains(err(qkv.tensor, shape), "negative length")
end

-- a shape table is the user's to change: printing and comparing it stay
-- bounded and never read past what is there
function TestNested:testShapesChangedByTheUser()
  local s = qkv.ones(2, 3).shape
  s[1] = {}
  lu.assertStrMatches(tostring(s), "%(table: 0x%x+, 3%)")
  s[1] = nil
  lu.assertEquals(tostring(s), "(nil, 3)")
  local long = setmetatable({}, getmetatable(s))
  for i = 1, 20 do long[i] = i end
  lu.assertEquals(tostring(long), "(1, 2, 3, 4, 5, 6, 7, 8, ...)")
  lu.assertFalse(long == setmetatable({table.unpack(long)}, getmetatable(s)))
  lu.assertTrue(qkv.ones(2, 3).shape == qkv.zeros(2, 3).shape)
end

---------------------------------------------------------------- finalizers, coroutines

TestFinalizers = {}

-- a finalizer that closes K, left as garbage before qkv.scores(Q, K),
-- runs while scores allocates its output, with a transposed view of K's
-- header in hand (made in C, holding no reference): the memory limit makes
-- that allocation fail once, and the full collection before the retry
-- frees G (making room) and runs the finalizer. The scores are then made
-- from K's data, which the deferred close keeps, and every byte is back
-- once the call is over. Small enough for qkv's own loops rather than
-- BLAS, so that ASan sees every read; K and the output large enough for
-- storages of their own.
function TestFinalizers:testCloseDuringAnAllocation()
  local _ <close> = R.cpu_only()          -- the host's memory limit forces the collection
  local Q, K = big(1, 2), big(300, 2)
  local want = qkv.scores(Q, K)
  local where
  collectgarbage()
  local before = qkv.memory()
  local G = qkv.zeros(600)
  setmetatable({}, {__gc = function()
    where = debug.traceback():match("in function 'qkv%.(%w+)'")
    close(K)
  end})
  G = nil
  local old = qkv._memory_limit(qkv.memory() + 1000)
  local ok, got = pcall(qkv.scores, Q, K)
  qkv._memory_limit(old)
  lu.assertEquals(where, "scores")
  lu.assertTrue(ok, got)
  t.assertTensorEqual(got, want)
  lu.assertStrContains(err(qkv.exp, K), "tensor was closed")
  got, want = nil, nil
  collectgarbage()
  lu.assertEquals(qkv.memory(), before - 300 * 4 - 300 * 2 * 4)   -- want's and K's bytes
end

-- a close inside a call keeps the bytes until a free made outside any call
function TestFinalizers:testDeferredUntilTheCallReturns()
  local _ <close> = R.cpu_only()          -- small tensors live inside their objects
  collectgarbage()
  local before = qkv.memory()
  local X = qkv.zeros(1000)                -- 4000 bytes of its own
  local during
  local opts = proxy({}, function(k)
    if k == "scale" then close(X); during = qkv.memory() end
  end)
  qkv.scores(qkv.ones(2, 4), qkv.ones(3, 4), opts)   -- small: inside their objects
  lu.assertEquals(during, before + 4000)
  lu.assertEquals(qkv.memory(), before + 4000)
  do local y <close> = qkv.zeros(1000) end
  lu.assertEquals(qkv.memory(), before)
end

-- a close from a coroutine is deferred: the call that resumed it may hold
-- the data, and no stack walk sees that far
function TestFinalizers:testCloseFromACoroutine()
  local Q, K, V = big(16, 8), big(300, 8), big(300, 8)
  local want = qkv.attention(Q, K, V, {weights = false})
  local opts = proxy({weights = false}, function(k)
    if k == "weights" then coroutine.wrap(function() close(V) end)() end
  end)
  lu.assertStrContains(err(qkv.attention, Q, K, V, opts), "(tensor was closed)")
  local V2 = big(300, 8)
  opts = proxy({weights = false}, function(k)
    if k == "mask" then coroutine.wrap(function() close(V2) end)() end
  end)
  lu.assertStrContains(err(qkv.attention, Q, K, V2, opts), "(tensor was closed)")
  t.assertClose(qkv.attention(Q, K, big(300, 8), {weights = false}), want)
end

-- closed outside any call: released at once, as before
function TestFinalizers:testPlainCloseFreesAtOnce()
  collectgarbage()
  local before = qkv.memory()
  local x = qkv.zeros(1000)
  lu.assertEquals(qkv.memory(), before + 4000)
  close(x)
  lu.assertEquals(qkv.memory(), before)
  lu.assertStrContains(err(qkv.exp, x), "tensor was closed")
  lu.assertEquals(tostring(x), "tensor(<closed>)")
end

---------------------------------------------------------------- the Lua libraries
TestLibraries = {}

-- qkv.plot, qkv.test and qkv.nn read a user's table raw, as the bindings
-- do: no metamethod of it runs, and one holding itself is an error naming
-- the function (the fuzzer's hostile tables found each of these)
function TestLibraries:testTablesAreReadRaw()
  local cyc = {}
  cyc[1] = cyc
  lu.assertStrContains(err(qkv.plot.hist, cyc), "hist: x nests deeper than 8 levels (or holds itself)")
  local trap = function() error("a metamethod ran") end
  local lying = setmetatable({}, {__index = trap, __len = trap})
  lu.assertStrContains(err(qkv.plot.colormap, lying, 0.5), "a cmap list needs 2 or more colours, got 0")
  t.assertShape(qkv.tensor(1), lying)       -- raw: no sizes, as a 0-d tensor has
  t.assertShape(qkv.ones(2), setmetatable({2}, {__len = trap}))
  local a, b = qkv.nn.Linear(2, 2), qkv.nn.Linear(2, 2)
  local sd = b:state_dict()
  close(sd.weight)
  lu.assertStrContains(err(a.load, a, sd), "load: the source's 'weight' is a closed tensor")
  local weight, bias = qkv.ones(2, 2), qkv.ones(2)
  local reads = 0
  local changing = setmetatable({}, {__pairs = trap, __index = function(_, k)
    reads = reads + 1
    return k == "weight" and (reads == 1 and weight or qkv.ones(3)) or bias
  end})
  lu.assertStrContains(err(a.load, a, changing), "load: the source has no tensor 'weight'")
  -- qkv.optim reads its list raw too, and names itself for a closed tensor
  local p = qkv.ones(2):requires_grad_()
  local closing = setmetatable({p}, {__index = function() close(p) end, __len = trap})
  local opt = qkv.optim.SGD(closing)
  lu.assertEquals(#opt.params, 1)
  close(p)
  lu.assertStrContains(err(qkv.optim.SGD, {p}), "SGD: parameter 1 is a closed tensor")
end

os.exit(lu.LuaUnit.run(), true)
