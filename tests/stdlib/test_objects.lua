-- test_objects.lua: what every object and namespace of the Lua library
-- shares (stdlib/qkv/methods.lua, qkv._strict in bindings/lopts.c):
-- each method of each object (modules, optimizers, schedulers, hook
-- handles, dist's Work and DDP, BertModel, Tokenizer, the CUDA event)
-- called with '.' says so and how to call it; and every public namespace
-- reachable from qkv refuses a name it does not have, naming the nearest.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")

local fails = R.fails
local nn, optim = qkv.nn, qkv.optim

-- every class of qkv.nn (its own methods) and Module (the shared ones)
local function nn_classes()
  local out = {{nn.Module, "m"}}
  for name, c in pairs(nn) do
    local mt = type(c) == "table" and getmetatable(c)
    if type(name) == "string" and mt and mt.__call then out[#out + 1] = {c, "m"} end
  end
  return out
end

-- {class table, receiver}: the objects a script gets, found from instances
-- where the class is not public
local function classes()
  local out = nn_classes()
  local p = qkv.ones(2):requires_grad_()
  local sgd = optim.SGD({p})
  out[#out + 1] = {optim.Optimizer, "opt"}
  out[#out + 1] = {getmetatable(sgd), "opt"}
  out[#out + 1] = {getmetatable(optim.Adam({p})), "opt"}
  out[#out + 1] = {getmetatable(optim.AdamW({p})), "opt"}
  local S = optim.lr_scheduler
  out[#out + 1] = {S.LRScheduler, "sched"}
  out[#out + 1] = {getmetatable(S.StepLR(sgd, 2)), "sched"}
  out[#out + 1] = {getmetatable(S.SequentialLR(sgd, {S.StepLR(sgd, 2), S.StepLR(sgd, 3)}, {2})), "sched"}
  out[#out + 1] = {getmetatable(p:register_post_accumulate_grad_hook(print)), "handle"}
  if pcall(require, "qkv.mpi") then       -- dist's objects where Open MPI's module loads
    out[#out + 1] = {getmetatable(qkv.dist.all_reduce(qkv.ones(1), "sum", {async_op = true})), "work"}
    out[#out + 1] = {getmetatable(qkv.dist.DDP(nn.Linear(2, 2))), "ddp"}
  end
  out[#out + 1] = {qkv.bert.BertModel, "model"}
  out[#out + 1] = {qkv.wordpiece.Tokenizer, "tok"}
  return out
end

TestDotCalls = {}

-- every public method of every class, called with '.', names itself and
-- the ':' call, at the script's line
function TestDotCalls:testEveryMethodSaysSo()
  local n = 0
  for _, c in ipairs(classes()) do
    local cls, recv = c[1], c[2]
    for k, f in pairs(cls) do
      if type(k) == "string" and k:sub(1, 1) ~= "_" and type(f) == "function" then
        local msg = fails(k .. ": called with '.', use " .. recv .. ":" .. k .. "()",
                          function() local r = f(); return r end)
        lu.assertStrContains(msg, "test_objects.lua:")
        n = n + 1
      end
    end
  end
  lu.assertTrue(n > 40, n .. " methods")
end

function TestDotCalls:testTheCommonOnes()
  local m = nn.Linear(2, 3)
  fails("parameters: called with '.', use m:parameters()", m.parameters)
  fails("to: called on a string, not a module (called with '.'?): use m:to()", m.to, "float64")
  fails("forward: called on a tensor, not a Linear (called with '.'?): use m:forward()",
        m.forward, qkv.ones(2))
  local l = nn.ModuleList()
  fails("append: called on a Linear, not a ModuleList (called with '.'?): use m:append()",
        l.append, m)
  local opt = optim.SGD(m, {lr = 0.1})
  fails("step: called with '.', use opt:step()", opt.step)
  fails("zero_grad: called with '.', use opt:zero_grad()", opt.zero_grad)
  fails("step: called on a number, not an optimizer (called with '.'?): use opt:step()", opt.step, 1)
  local h = m.weight:register_post_accumulate_grad_hook(print)
  fails("remove: called with '.', use handle:remove()", h.remove)
  local w = pcall(require, "qkv.mpi") and qkv.dist.all_reduce(qkv.ones(1), "sum", {async_op = true})
  if w then
    fails("wait: called with '.', use work:wait()", w.wait)
    fails("is_completed: called with '.', use work:is_completed()", w.is_completed)
  end
  -- the ':' calls still work
  lu.assertIs(m:to("float64"), m)
  h:remove()
  if w then lu.assertTrue(w:is_completed()) end
end

-- the CUDA event's methods (C) say the same; there is no event without a
-- GPU, so they are called on nothing
function TestDotCalls:testTheEventToo()
  local E = qkv.cuda._Event
  for _, k in ipairs{"record", "synchronize", "query", "elapsed_time"} do
    fails("Event:" .. k .. ": called with '.', use event:" .. k .. "()", E[k])
  end
end

---------------------------------------------------------------- namespaces
TestNamespaces = {}

-- a table that is a class or a metatable (instances read through its
-- __index) is not a namespace: a missing field there reads as nil
local function is_class(t)
  return rawget(t, "__index") ~= nil
end

-- every namespace reachable from qkv by public names, with its path
local function namespaces()
  for _, k in ipairs(qkv._lazy) do local _ = qkv[k] end
  local out, seen = {}, {}
  local function walk(t, path)
    if seen[t] then return end
    seen[t] = true
    out[#out + 1] = {t, path}
    for k, v in next, t do
      if type(k) == "string" and k:sub(1, 1) ~= "_" and type(v) == "table" and not is_class(v) then
        walk(v, path .. "." .. k)
      end
    end
  end
  walk(qkv, "qkv")
  walk(require "qkv.autograd", "qkv.autograd")
  return out
end

function TestNamespaces:testEveryOneRefusesAMisspeltName()
  local paths = {}
  for _, e in ipairs(namespaces()) do
    local t, path = e[1], e[2]
    paths[#paths + 1] = path
    local ok, msg = pcall(function() return t.zzqx_not_there end)
    lu.assertFalse(ok, path .. ".zzqx_not_there read as " .. tostring(msg))
    lu.assertStrContains(msg, path .. " has no ")
    lu.assertStrContains(msg, "'zzqx_not_there'")
    -- a name one letter off one it has is named
    local name
    for k in next, t do
      if type(k) == "string" and k:sub(1, 1) ~= "_" and #k >= 6 and (name == nil or k < name) then name = k end
    end
    if name then
      ok, msg = pcall(function() return t[name .. "x"] end)
      lu.assertFalse(ok, path .. "." .. name .. "x")
      lu.assertStrContains(msg, "(did you mean '" .. name .. "'?)")
    end
    -- internal names (starting with '_') and non-string keys stay nil
    lu.assertNil(t._zzqx)
    lu.assertNil(t[1])
  end
  table.sort(paths)
  for _, want in ipairs{"qkv", "qkv.autograd", "qkv.bert", "qkv.cuda", "qkv.dist", "qkv.nn",
                        "qkv.nn.functional", "qkv.optim", "qkv.optim.lr_scheduler", "qkv.plot",
                        "qkv.repl", "qkv.test", "qkv.wordpiece"} do
    lu.assertTrue(table.concat(paths, " "):find(want, 1, true) ~= nil, want .. " not reached")
  end
end

-- qkv.test is LuaUnit's names too: they read through, a near one is named
function TestNamespaces:testQkvTestReadsThroughToLuaUnit()
  lu.assertIs(qkv.test.assertEquals, lu.assertEquals)
  lu.assertIs(qkv.test.assertClose ~= nil, true)
  fails("qkv.test has no function 'assertEqual' (did you mean 'assertEquals'?)",
        function() return qkv.test.assertEqual end)
  fails("qkv.cuda has no function 'synchronise' (did you mean 'synchronize'?)",
        function() return qkv.cuda.synchronise end)
  fails("qkv.dist has no function 'allreduce' (did you mean 'all_reduce'?)",
        function() return qkv.dist.allreduce end)
  fails("qkv.optim.lr_scheduler has no class or function 'StepLr' (did you mean 'StepLR'?)",
        function() return qkv.optim.lr_scheduler.StepLr end)
end

os.exit(lu.LuaUnit.run(), true)
