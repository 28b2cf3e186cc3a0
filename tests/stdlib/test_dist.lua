-- test_dist.lua: qkv.dist (stdlib/qkv/dist/init.lua, bindings/dist/lmpi.c).
-- A world of one in this process (every collective the identity, MPI never
-- started), the argument errors, and the scripts under dist/ run on 2 and
-- 4 ranks by Open MPI's mpirun (more ranks than cores: --oversubscribe),
-- whose checks print "ok <name>"; a rank that fails ends the job. Skipped,
-- with the reason, where mpirun or build/lib/qkv/mpi.so is missing.
local lu = require "luaunit"
local shell = dofile("tests/helpers/shell.lua")
local mpi = dofile("tests/helpers/mpi.lua")
qkv.set_default_device("cpu")

local exe = arg and arg[-1] or "build/qkv"
local d = qkv.dist

local function err(f, ...)
  local ok, e = pcall(f, ...)
  lu.assertFalse(ok)
  return tostring(e)
end

TestDistWorldOfOne = {}

-- the world of one still needs the module (qkv.dist loads it at its first
-- call): skipped with the reason where it is not built or libmpi is not
-- there (a GPU machine's bundle)
local function need_mpi()
  local ok, why = pcall(require, "qkv.mpi")
  if not ok then lu.skip("Open MPI's module does not load (`make deps`): " .. tostring(why):sub(1, 200)) end
end

function TestDistWorldOfOne:testRankAndSize()
  need_mpi()
  d.init()
  d.init()                      -- idempotent
  lu.assertTrue(d.is_initialized())
  lu.assertEquals(d.rank(), 0)
  lu.assertEquals(d.world_size(), 1)
  -- not started by a launcher: MPI itself was never initialized
  local maps = assert(io.open("/proc/self/maps")):read("a")
  -- (the executable's own build of the module: build-asan/ under test-asan)
  local lib = (exe:match("^(.*)/[^/]*$") or ".") .. "/lib/qkv/mpi.so"
  lu.assertEquals(maps:find("libmpi", 1, true) ~= nil, io.open(lib) ~= nil)
end

function TestDistWorldOfOne:testCollectivesAreIdentities()
  need_mpi()
  local t = qkv.tensor({{1, 2}, {3, 4}})
  lu.assertIs(d.all_reduce(t), t)
  lu.assertEquals(t:tolist(), {{1, 2}, {3, 4}})
  lu.assertEquals(d.all_reduce(t, "mean"):tolist(), {{1, 2}, {3, 4}})
  lu.assertIs(d.broadcast(t, 0), t)
  local g = d.all_gather(t)
  lu.assertEquals(tostring(g.shape), "(1, 2, 2)")
  lu.assertEquals(g:tolist(), {{{1, 2}, {3, 4}}})
  g:fill_(9)                             -- a new tensor, not a view of t
  lu.assertEquals(t:tolist(), {{1, 2}, {3, 4}})
  lu.assertEquals(d.reduce_scatter(t):tolist(), {{1, 2}, {3, 4}})
  lu.assertEquals(d.all_to_all(t, 1, 2):tolist(), {{1, 2}, {3, 4}})
  lu.assertEquals(d.all_to_all(t:t(), 2, 1):tolist(), {{1, 3}, {2, 4}})
  local w = d.all_reduce(t, "sum", {async_op = true})
  lu.assertTrue(w:is_completed())
  lu.assertIs(w:wait(), t)
  d.barrier()
  lu.assertTrue(d.barrier({async_op = true}):is_completed())
  -- its methods called with '.' say so
  local line = debug.getinfo(1, "l").currentline + 1
  local msg = err(function() w.wait() end)
  lu.assertStrContains(msg, "test_dist.lua:" .. line .. ": wait: called with '.', use work:wait()")
  lu.assertStrContains(err(w.is_completed), "is_completed: called with '.', use work:is_completed()")
end

function TestDistWorldOfOne:testBadArguments()
  need_mpi()
  local t = qkv.zeros(2)
  lu.assertStrContains(err(d.all_reduce, 5), "dist.all_reduce: bad argument #1 (t: qkv.Tensor expected, got number)")
  lu.assertStrContains(err(d.all_reduce, t, "avg"),
    'dist.all_reduce: bad argument #2 (op must be "sum", "mean", "max" or "min", got "avg")')
  lu.assertStrContains(err(d.all_reduce, qkv.zeros(2, "int64"), "mean"),
    'dist.all_reduce: op "mean" needs a float tensor, t is int64')
  lu.assertStrContains(err(d.all_reduce, t, "sum", {async = true}),
    "dist.all_reduce: unknown option 'async' (it has async_op)")
  lu.assertStrContains(err(d.all_reduce, t, "sum", {async_op = 1}),
    "dist.all_reduce: option 'async_op' must be a boolean, got number")
  lu.assertStrContains(err(d.broadcast, t, 1), "dist.broadcast: bad argument #2 (src must be a rank, an integer in [0, 0], got 1)")
  lu.assertStrContains(err(d.broadcast, t, 0.5), "src must be a rank")
  lu.assertStrContains(err(d.all_to_all, t, 2, 1), "dist.all_to_all: bad argument #2 (split_dim must be a dimension of t, in [1, 1] or [-1, -1], got 2)")
  lu.assertStrContains(err(d.reduce_scatter, qkv.tensor(1)), "dist.reduce_scatter: t's first dimension (none: t is a scalar)")
  lu.assertStrContains(err(d.all_gather, qkv.zeros(1, 1, 1, 1, 1, 1, 1, 2)),
    "dist.all_gather: t has 8 dims, and the result (world_size, ...) would have 9, more than a tensor's 8")
  lu.assertStrContains(err(d.send, t, 0), "dist.send: a world of one has no rank to send to")
  lu.assertStrContains(err(d.recv, t, 0), "dist.recv: a world of one has no rank to receive from")
  local c
  do
    local z <close> = qkv.zeros(2)
    c = z
  end
  lu.assertStrContains(err(d.all_gather, c), "dist.all_gather: bad argument #1 (t is a closed tensor)")
  -- the error points at the caller's line
  lu.assertStrContains(err(d.all_reduce, t, "avg"), "test_dist.lua:")
end

function TestDistWorldOfOne:testDDP()
  need_mpi()
  qkv.seed(3)
  local lin = qkv.nn.Linear(3, 2):double()
  local w0 = lin.weight:clone()
  local net = d.DDP(lin)
  lu.assertIs(net.module, lin)
  lu.assertEquals(#net:parameters(), 2)
  lu.assertEquals(net.weight, lin.weight)          -- reads through
  local x = qkv.ones(4, 3):double()
  lu.assertEquals(net(x), lin(x))
  lu.assertEquals(lin.weight, w0)                    -- rank 0's, unchanged
  net(x):sum():backward()                            -- a world of one: the grads as they are
  lu.assertEquals(lin.weight.grad:tolist(), {{4, 4, 4}, {4, 4, 4}})
  lu.assertStrContains(err(d.DDP, 5), "dist.DDP: bad argument #1 (a qkv.nn module expected, got number)")
  -- a table whose every field is an error (qkv itself) is not a module
  lu.assertStrContains(err(d.DDP, qkv), "dist.DDP: bad argument #1 (a qkv.nn module expected, got table)")
  lu.assertStrContains(err(d.DDP, lin, {bucket_cap = 1}), "dist.DDP: unknown option 'bucket_cap' (it has bucket_cap_mb)")
  lu.assertStrContains(err(d.DDP, lin, {bucket_cap_mb = 0}),
                       "dist.DDP: option 'bucket_cap_mb' must be a positive number, got 0")
  lu.assertStrContains(err(d.DDP, lin, 3), "dist.DDP: options must be a table, got number")
end

-- the wrapper is a Module whose child, "module", is the wrapped one, as
-- PyTorch's: train/eval, to/double, parameters, state_dict and optimizers
-- reach the wrapped module's tensors, the ones its forward uses
function TestDistWorldOfOne:testDDPIsAModule()
  need_mpi()
  local nn = qkv.nn
  qkv.seed(4)
  local inner = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Linear(4, 2))
  local net = d.DDP(inner)
  local names = {}
  for name, p in net:named_parameters() do
    names[#names + 1] = name
    lu.assertIs(p, inner:state_dict()[name:sub(8)])
  end
  lu.assertEquals(names, {"module.1.weight", "module.1.bias", "module.3.weight", "module.3.bias"})
  lu.assertEquals(net:nparams(), inner:nparams())
  lu.assertStrContains(tostring(net), "DDP(\n  (module): Sequential(\n    (1): Linear(")
  lu.assertIs(net[1], inner[1])                        -- fields read through
  -- eval reaches the wrapped module: its dropout is off
  lu.assertIs(net:eval(), net)
  lu.assertFalse(net.training)
  lu.assertFalse(inner[2].training)
  local x = qkv.randn(5, 3)
  lu.assertEquals(net(x), inner(x))
  lu.assertEquals(net(x), net(x))
  net:train()
  lu.assertTrue(inner[2].training)
  inner[2].p = 0
  -- double() converts the wrapped module's tensors; an optimizer made
  -- after it steps them
  lu.assertIs(net:double(), net)
  lu.assertEquals(inner[1].weight.dtype, "float64")
  lu.assertNil(rawget(net, "weight"))
  local opt = qkv.optim.SGD(net, {lr = 0.5})
  net(x:double()):sum():backward()
  local w, g = inner[1].weight:clone(), inner[1].weight.grad:clone()
  opt:step()
  lu.assertEquals(inner[1].weight, w - g * 0.5)
  net:zero_grad()
  lu.assertNil(inner[1].weight.grad)
  -- load and state_dict name the wrapped module's tensors as PyTorch's DDP does
  lu.assertIs(net:state_dict()["module.3.bias"], inner[3].bias)
  -- the wrapped module's own methods are called on it; its fields are set on it
  local list = d.DDP(nn.ModuleList{nn.Linear(2, 2)})
  lu.assertStrContains(err(function() list:append(nn.ReLU()) end),
                       "DDP: append is a method of the wrapped ModuleList: call ddp.module:append()")
  local lin = d.DDP(nn.Linear(2, 2))
  lu.assertStrContains(err(function() lin.weight = qkv.zeros(2, 2) end),
                       "DDP: ddp.weight = ... would not reach the wrapped module, whose weight it reads: "
                       .. "set ddp.module.weight")
  lu.assertStrContains(err(function() lin.module = nn.Linear(2, 2) end),
                       "DDP: 'module' is the wrapped module: wrap another with qkv.dist.DDP")
  local line = debug.getinfo(1, "l").currentline + 1
  lu.assertStrContains(err(function() lin.bias = nil end),
                       "test_dist.lua:" .. line .. ": DDP: ddp.bias = ...")
end

-- without Open MPI (no build/lib/qkv/mpi.so, or no libmpi for it), the
-- first call says what is missing and how to get it
function TestDistWorldOfOne:testWithoutOpenMPI()
  local out = shell.exe(exe, "-e", [[
package.preload["qkv.mpi"] = function()
  error("error loading module 'qkv.mpi': libmpi.so.40: cannot open shared object file")
end
local ok, e = pcall(qkv.dist.rank)
print(ok, e)]])
  lu.assertStrContains(out, "false")
  lu.assertStrContains(out, ":4: dist.rank: Open MPI is not available (error loading module 'qkv.mpi': " ..
                       "libmpi.so.40: cannot open shared object file); `make deps` installs " ..
                       "libopenmpi-dev and openmpi-bin")
end

function TestDistWorldOfOne:testNoMPIUnlessAsked()
  -- a script that does not use qkv.dist never loads Open MPI
  local out = shell.exe(exe, "-e", [[for l in io.lines("/proc/self/maps") do
    if l:find("libmpi", 1, true) then print("mpi loaded") return end end print("no mpi")]])
  lu.assertEquals(out, "no mpi\n")
end

TestDistRanks = {}

function TestDistRanks:setUp() mpi.need(lu, exe) end

local function collectives(n)
  local out, code = mpi.run(exe, n, "tests/stdlib/dist/collectives.lua", 300)
  mpi.check(lu, out, code, n, {"all_reduce sum bfloat16", "all_reduce mean float16",
    "all_reduce max keeps NaN float32", "all_reduce min keeps NaN float64",
    "all_reduce column", "reduce_scatter sum", "all_to_all", "send recv ring", "mismatch call",
    "mismatch kind", "own argument error on every rank", "in step after argument errors",
    "in step after an option error", "recv mismatch", "done"})
end

function TestDistRanks:testCollectivesOn2() collectives(2) end
function TestDistRanks:testCollectivesOn4() collectives(4) end

-- DDP: three SGD steps on slices equal three on the whole batch, the
-- buckets start while backward runs, unused parameters
local function ddp(n)
  local out, code = mpi.run(exe, n, "tests/stdlib/dist/ddp.lua", 300)
  mpi.check(lu, out, code, n, {"broadcast at wrap", "buckets", "grads step 3", "three steps",
    "bucket started during backward 1", "used by rank 0 alone", "unused everywhere",
    "buckets in one order on every rank",
    "double after wrapping", "eval reaches the module", "grads after double", "done"})
end

function TestDistRanks:testDDPOn2() ddp(2) end
function TestDistRanks:testDDPOn4() ddp(4) end

-- the ways a script ends under mpirun (dist/exit.lua): os.exit with
-- success, LuaUnit's os.exit(lu.LuaUnit.run()) among them, finalizes MPI
-- (status 0, and mpirun reports no abnormal end); another status passes
-- through mpirun as it is
local function ends(how)
  local out, code = mpi.run(exe, 2, "tests/stdlib/dist/exit.lua", 120, how)
  lu.assertNotEquals(code, 124, "timed out: " .. how .. "\n" .. out)
  return out, code
end

function TestDistRanks:testOsExitSucceeds()
  for _, how in ipairs{"luaunit", "zero", "true"} do
    local out, code = ends(how)
    lu.assertEquals(code, 0, how .. "\n" .. out)
    lu.assertNotStrContains(out, "exiting improperly")
    lu.assertEquals(mpi.oks(out)["end"], 2, how .. "\n" .. out)
  end
end

function TestDistRanks:testOsExitStatusPassesThrough()
  for how, want in pairs{three = 3, ["false"] = 1, three_close = 3} do
    local out, code = ends(how)
    lu.assertEquals(code, want, how .. "\n" .. out)
    lu.assertNotStrContains(out, "exiting improperly")
    lu.assertEquals(mpi.oks(out)["end"], 2, how .. "\n" .. out)
  end
end

-- a rank whose script ends while another waits in a collective: the other
-- gets an error naming it (it would wait forever in MPI's finalisation),
-- catchable, or ending the job if not caught
function TestDistRanks:testEndWhileOthersWait()
  local out, code = ends("early")
  lu.assertEquals(code, 0, out)
  lu.assertEquals(mpi.oks(out)["end"], 2, out)
  lu.assertEquals(mpi.oks(out).caught, 1, out)
  for _, how in ipairs{"early_raise", "early_exit"} do
    out, code = ends(how)
    lu.assertNotEquals(code, 0, how .. "\n" .. out)
    lu.assertStrContains(out, 'exit.lua:45: dist.all_reduce: the ranks disagree: rank 0 ended ' ..
                         'its script; rank 1 called it with float32 (3,), op "sum"')
  end
end

-- a rank that raises ends the whole job with its message and a non-zero
-- status, while the others wait in a collective (the time limit a
-- watchdog for a hang, not a bound)
function TestDistRanks:testRankErrorEndsTheJob()
  local dir = shell.tmpdir()
  local f = assert(io.open(dir .. "/fail.lua", "w"))
  f:write([[
local d = qkv.dist
if d.rank() == 2 then error("rank 2 gives up") end
d.all_reduce(qkv.zeros(4))
print("not reached")
]])
  f:close()
  local out, code = mpi.run(exe, 4, dir .. "/fail.lua", 60)
  os.execute("rm -rf " .. shell.quote(dir))
  lu.assertNotEquals(code, 0)
  lu.assertNotEquals(code, 124, "timed out: " .. out)    -- timeout's status
  lu.assertStrContains(out, "fail.lua:2: rank 2 gives up")
  lu.assertNotStrContains(out, "not reached")
end

-- Ctrl-C on mpirun ends every rank: one busy in Lua, one waiting in a
-- collective for it (within the 120 s watchdog, which catches a hang)
function TestDistRanks:testCtrlCEndsEveryRank()
  local dir = shell.tmpdir()
  local script = dir .. "/spin.lua"
  local f = assert(io.open(script, "w"))
  f:write([[
local d = qkv.dist
print("ready " .. d.rank())
io.stdout:flush()
if d.rank() == 0 then while true do end else d.barrier() end
]])
  f:close()
  local sh = ([[
cd %s
env %s mpirun -np 2 %s %s > %s/out 2>&1 & m=$!
for i in $(seq 1 300); do [ "$(grep -c ready %s/out 2>/dev/null)" = 2 ] && break; sleep 0.1; done
kill -INT $m
for i in $(seq 1 1200); do kill -0 $m 2>/dev/null || break; sleep 0.1; done
if kill -0 $m 2>/dev/null; then echo "hung"; kill -KILL $m; fi
wait $m; echo "status $?"
sleep 0.5
pgrep -xf %s >/dev/null && echo "ranks left" || echo "no ranks left"
kill -9 $m 2>/dev/null; pkill -9 -xf %s; true
]]):format(shell.quote(os.getenv("PWD") or "."), mpi.ENV, shell.quote(exe), shell.quote(script),
             shell.quote(dir), shell.quote(dir), shell.quote(exe .. " " .. script),
             shell.quote(exe .. " " .. script))
  local out = shell.sh(sh)
  local log = assert(io.open(dir .. "/out")):read("a")
  os.execute("rm -rf " .. shell.quote(dir))
  lu.assertStrContains(log, "ready 0")
  lu.assertStrContains(log, "ready 1")
  lu.assertStrContains(out, "no ranks left", out .. log)
  lu.assertNotStrContains(out, "status 0", out .. log)
  lu.assertNotStrContains(out, "hung", out .. log)
end

-- a rank killed with SIGKILL while the others are in a collective (each
-- in a loop of 4 MB all_reduces, dist/spin.lua): mpirun ends the job,
-- naming the rank, and no rank is left running. The wait is a watchdog for a hang
-- (120 s), not a bound: the time it took is printed for the record
function TestDistRanks:testKilledRankEndsTheJob()
  local dir = shell.tmpdir()
  local sh = ([[
cd %s
d=%s
env %s mpirun -np 3 %s tests/stdlib/dist/spin.lua "$d" > "$d/out" 2>&1 & m=$!
for i in $(seq 1 600); do [ -s "$d/pid.0" ] && [ -s "$d/pid.1" ] && [ -s "$d/pid.2" ] && break; sleep 0.1; done
for r in 0 1 2; do [ -s "$d/pid.$r" ] || echo "rank $r did not start"; done
t0=$(date +%%s.%%N)
kill -KILL "$(cat "$d/pid.1")"
for i in $(seq 1 1200); do kill -0 $m 2>/dev/null || break; sleep 0.1; done
if kill -0 $m 2>/dev/null; then echo "hung"; kill -KILL $m; fi
wait $m; echo "status $?"
echo "secs $(echo "$(date +%%s.%%N) - $t0" | bc)"
sleep 0.5
left=no
for r in 0 1 2; do
  p=$(cat "$d/pid.$r" 2>/dev/null) || continue
  s=$(cut -d" " -f3 "/proc/$p/stat" 2>/dev/null)      # Z: gone, not yet reaped
  [ -n "$s" ] && [ "$s" != Z ] && left="yes: rank $r" && kill -KILL "$p"
done
echo "ranks left: $left"
]]):format(shell.quote(os.getenv("PWD") or "."), shell.quote(dir), mpi.ENV, shell.quote(exe))
  local out = shell.sh(sh)
  local log = shell.read(dir .. "/out") or ""
  os.execute("rm -rf " .. shell.quote(dir))
  lu.assertNotStrContains(out, "did not start", out .. log)
  lu.assertNotStrContains(out, "hung", out .. log)
  lu.assertStrContains(out, "ranks left: no", out .. log)
  lu.assertNotStrContains(out, "status 0", out .. log)
  lu.assertStrContains(log, "process rank 1 with PID")
  lu.assertStrContains(log, "exited on signal 9")
  lu.assertNotStrContains(log, "ok spun")
end

-- 10,000 rounds of all_reduce (a new tensor, a view through a copy, an
-- async call; dist/soak.lua): each rank's resident memory stays within
-- 8 MB of its value after the warm-up, read every 1000 rounds (not judged
-- under AddressSanitizer, whose quarantine grows it)
function TestDistRanks:testSoakMemoryFlat()
  local out, code = mpi.run(exe, 2, "tests/stdlib/dist/soak.lua", 600)
  local maps = shell.read("/proc/self/maps") or ""      -- the ranks are this executable
  local asan = maps:find("libasan", 1, true) or maps:find("clang_rt.asan", 1, true)
  mpi.check(lu, out, code, 2, {asan and "soak unmeasured" or "soak flat"})
  for r = 0, 1 do lu.assertStrContains(out, ("rss %d 10000 "):format(r)) end
end
