-- test_threads.lua: the CPU kernels' threads (vm/cpu/parallel.c).
-- qkv.set_num_threads / get_num_threads and their errors, the environment
-- ($QKV_NUM_THREADS, then $OMP_NUM_THREADS), and every kernel that cuts
-- its work into chunks giving the float64 reference's values on 1 thread
-- and on more threads than this machine has cores (each chunk then waits
-- for a CPU, as on a busy machine).
local lu = require "luaunit"
qkv.set_default_device("cpu")

local shell = dofile("tests/helpers/shell.lua")
local exe = arg and arg[-1] or "build/qkv"

local function child(env, code)
  local out = shell.sh(env .. " " .. shell.quote(exe) .. " -e " .. shell.quote(code) .. " 2>&1")
  return (out:gsub("\n$", ""))
end

TestThreadsApi = {}

function TestThreadsApi:tearDown() qkv.set_num_threads(self.n or qkv.get_num_threads()) end

function TestThreadsApi:testSetAndGet()
  self.n = qkv.get_num_threads()
  lu.assertTrue(math.type(self.n) == "integer" and self.n >= 1)
  qkv.set_num_threads(3)
  lu.assertEquals(qkv.get_num_threads(), 3)
  qkv.set_num_threads(1)
  lu.assertEquals(qkv.get_num_threads(), 1)
end

function TestThreadsApi:testBadArgumentsAreErrors()
  self.n = qkv.get_num_threads()
  local function err(...)
    local ok, e = pcall(qkv.set_num_threads, ...)
    lu.assertFalse(ok)
    return e
  end
  lu.assertStrContains(err(0), "set_num_threads: n must be in [1, 256], got 0")
  lu.assertStrContains(err(257), "got 257")
  lu.assertStrContains(err(-1), "got -1")
  lu.assertStrContains(err(1.5), "set_num_threads")
  lu.assertStrContains(err("two"), "set_num_threads")
  lu.assertStrContains(err(), "set_num_threads")
  lu.assertStrContains(err(2, 2), "set_num_threads: takes 1 argument, got 2")
  lu.assertStrContains(select(2, pcall(qkv.get_num_threads, 1)), "get_num_threads")
  lu.assertEquals(qkv.get_num_threads(), self.n)   -- a refused call changes nothing
end

function TestThreadsApi:testEnvironment()
  local get = "print(qkv.get_num_threads())"
  lu.assertEquals(child("QKV_NUM_THREADS=3", get), "3")
  lu.assertEquals(child("QKV_NUM_THREADS=5 OMP_NUM_THREADS=2", get), "5")
  lu.assertEquals(child("env -u QKV_NUM_THREADS OMP_NUM_THREADS=4,2", get), "4")
  -- not a positive integer: said on stderr, and the next source used
  local out = child("QKV_NUM_THREADS=lots OMP_NUM_THREADS=2", get)
  lu.assertStrContains(out, "QKV_NUM_THREADS=lots is not a positive integer; ignored")
  lu.assertStrContains(out, "\n2")
end

-- the workers exist only once a loop wanted them, and as many as asked
function TestThreadsApi:testWorkersStartWhenNeeded()
  if not io.open("/proc/self/task") then lu.skip("no /proc/self/task") end
  local count = [[
    local x = qkv.rand(1000, 1000)
    local y = (x * 2 + 1):sum()
    print(io.open("/proc/self/status"):read("a"):match("Threads:%s*(%d+)"))]]
  lu.assertEquals(child("QKV_NUM_THREADS=1", count), "1")
  lu.assertEquals(child("QKV_NUM_THREADS=4", count), "4")
  -- a small script starts none
  lu.assertEquals(child("QKV_NUM_THREADS=4", [[local y = qkv.ones(3, 4) * 2
    print(io.open("/proc/self/status"):read("a"):match("Threads:%s*(%d+)"))]]), "1")
end

---------------------------------------------------------------- values

-- each case: its value on THREADS threads and on 1 against the float64
-- reference (the same ops on float64 copies, on 1 thread)
local THREADS = 5

local function on(n, f)
  local old = qkv.get_num_threads()
  qkv.set_num_threads(n)
  local ok, a, b, c = pcall(f)
  qkv.set_num_threads(old)
  if not ok then error(a, 0) end
  return a, b, c
end

local function close(got, want, tol, what)
  local err = (got:double() - want):abs():max():item()
  lu.assertTrue(err <= tol, ("%s: off by %g (tolerance %g)"):format(what, err, tol))
end

local function check(what, f, inputs, tol)
  local ref = {on(1, function() return f(table.unpack(inputs.f64)) end)}
  for _, n in ipairs{1, THREADS} do
    local got = {on(n, function() return f(table.unpack(inputs.f32)) end)}
    for i = 1, #ref do close(got[i], ref[i], tol, what .. " #" .. i .. " on " .. n .. " threads") end
  end
end

local function inputs(...)
  local f32, f64 = {}, {}
  for i, t in ipairs{...} do f32[i], f64[i] = t, t:double() end
  return {f32 = f32, f64 = f64}
end

TestThreadsValues = {}

function TestThreadsValues:setUp() qkv.seed(7) end

function TestThreadsValues:testElementwiseAndReductions()
  local x = qkv.randn(300, 1000)
  check("elementwise", function(a) return a * 2 + a:exp() end, inputs(x), 1e-4)
  check("sum by rows", function(a) return a:sum(2) end, inputs(x), 1e-3)
  check("sum by columns", function(a) return a:sum(1) end, inputs(x), 1e-3)
  -- runs of 64 outputs (reduce.c's tiles) across rows of 100: a tile's
  -- lanes split between two rows of outputs
  check("sum down the first of three dims", function(a) return a:reshape(30, 100, 100):sum(1) end,
        inputs(x), 1e-3)
  check("var down columns", function(a) return a:var(1) end, inputs(x), 1e-4)
  check("one long sum", function(a) return a:reshape(-1):sum() end, inputs(x), 2e-2)
  check("max", function(a) return (a:max(2)) end, inputs(x), 0)
  check("var", function(a) return a:var(2) end, inputs(x), 1e-4)
end

function TestThreadsValues:testRows()
  local x, w, b = qkv.randn(512, 256), qkv.randn(256), qkv.randn(256)
  check("softmax", function(a) return a:softmax(-1) end, inputs(x), 1e-6)
  check("log_softmax", function(a) return a:log_softmax() end, inputs(x), 1e-5)
  check("layer_norm", function(a, c, d) return qkv.layer_norm(a, 256, c, d) end,
        inputs(x, w, b), 1e-4)
  check("tril", function(a) return a:tril(3) end, inputs(x), 0)
end

function TestThreadsValues:testProducts()
  local a, b = qkv.randn(700, 300), qkv.randn(300, 500)
  check("matmul", function(p, q) return p:matmul(q) end, inputs(a, b), 1e-3)
  check("matmul, a transposed", function(p, q) return p.mT:matmul(p) end, inputs(a, b), 1e-3)
  -- every other column: no BLAS layout fits, so a is copied panel by panel
  local wide = qkv.randn(700, 600)
  check("matmul, a strided", function(p, q) return p:reshape(700, 300, 2):select(3, 1):matmul(q) end,
        inputs(wide, b), 1e-3)
  -- a batch of small products, and a batch whose b is copied per batch
  local x, y = qkv.randn(64, 20, 30), qkv.randn(64, 30, 40)
  check("bmm", function(p, q) return p:matmul(q) end, inputs(x, y), 1e-4)
  local yw = qkv.randn(64, 30, 80)
  check("bmm, b strided", function(p, q) return p:matmul(q:reshape(64, 30, 40, 2):select(4, 1)) end,
        inputs(x, yw), 1e-4)
end

function TestThreadsValues:testRandomIsTheSameOnAnyThreads()
  local a = on(1, function() qkv.seed(3) return qkv.randn(1000, 100) end)
  local b = on(THREADS, function() qkv.seed(3) return qkv.randn(1000, 100) end)
  lu.assertEquals((a - b):abs():max():item(), 0)
end

function TestThreadsValues:testAttentionAndItsGradients()
  local q, k, v = qkv.randn(2, 4, 200, 32), qkv.randn(2, 4, 300, 32), qkv.randn(2, 4, 300, 32)
  local function grads(Q, K, V)
    Q, K, V = Q:clone():requires_grad_(), K:clone():requires_grad_(), V:clone():requires_grad_()
    local out = qkv.attention(Q, K, V, {causal = true, weights = false})
    out:sum():backward()
    return out:detach(), Q.grad, K.grad
  end
  check("fused attention and dQ, dK", grads, inputs(q, k, v), 1e-4)
end

os.exit(lu.LuaUnit.run(), true)
