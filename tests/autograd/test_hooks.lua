-- test_hooks.lua: the hooks of qkv.autograd (docs/autograd.md, "Gradients")
-- that a data-parallel wrapper needs to reduce gradients while backward
-- still runs: x:register_post_accumulate_grad_hook(fn) (fires once per
-- backward, after x's last edge, with x.grad whole; in registration order;
-- handle:remove(); never for qkv.grad, nor for a leaf no gradient reached)
-- and queue_callback(fn) (after the last node, in queue order, only inside
-- a backward); the errors of both, and errors raised inside them.
local lu = require "luaunit"
local A = require "qkv.autograd"
local fails = dofile("tests/helpers/attn_ref.lua").fails

local function f64(t) return qkv.tensor(t, "float64") end

-- the values of a float64 tensor, against a list, exactly (the sums here
-- are of a few small binary fractions, so float64 holds them exactly)
local function same(got, want, what)
  lu.assertEquals(got:tolist(), want, what)
end

---------------------------------------------------------------- post-accumulate hooks
TestPostAccumulateGradHook = {}

-- w used by two ops: two contributions, one hook call, with the sum of both
function TestPostAccumulateGradHook:testFiresOnceWithTheWholeGradient()
  local w = f64{1, 2, 3}:requires_grad_()
  local x, z = f64{4, 5, 6}, f64{0.5, -1, 0.25}
  local seen = {}
  w:register_post_accumulate_grad_hook(function(p)
    lu.assertTrue(rawequal(p, w))
    seen[#seen + 1] = p.grad:tolist()
  end)
  ;(w * x + w * z):sum():backward()
  lu.assertEquals(seen, {{4.5, 4, 6.25}})        -- x + z
  -- used at two depths, w * (w * x): 2 w x, still once
  ;(w * (w * x)):sum():backward()
  lu.assertEquals(#seen, 2)
  lu.assertEquals(seen[2], {4.5 + 8, 4 + 20, 6.25 + 36}, "accumulated onto the first")
  -- x * x: one node with two edges into the same leaf
  w.grad = nil
  ;(w * w):sum():backward()
  lu.assertEquals(seen[3], {2, 4, 6})
  lu.assertEquals(#seen, 3)
end

function TestPostAccumulateGradHook:testHooksRunInRegistrationOrderAndRemove()
  local w = f64{1, -1}:requires_grad_()
  local calls = {}
  local h1 = w:register_post_accumulate_grad_hook(function() calls[#calls + 1] = "a" end)
  w:register_post_accumulate_grad_hook(function() calls[#calls + 1] = "b" end)
  local h3 = w:register_post_accumulate_grad_hook(function() calls[#calls + 1] = "c" end)
  ;(w * 3):sum():backward()
  lu.assertEquals(calls, {"a", "b", "c"})
  h1:remove()
  h1:remove()                                  -- a second remove does nothing
  ;(w * 3):sum():backward()
  lu.assertEquals(calls, {"a", "b", "c", "b", "c"})
  h3:remove()
  ;(w * 3):sum():backward()
  lu.assertEquals(calls, {"a", "b", "c", "b", "c", "b"})
  same(w.grad, {9, 9})
  -- a hook removed by an earlier one in the same firing is not called; one
  -- registered during it runs from the next backward on
  local v = f64{1}:requires_grad_()
  local log, later = {}, nil
  v:register_post_accumulate_grad_hook(function()
    log[#log + 1] = "first"
    if later then later:remove() end
    v:register_post_accumulate_grad_hook(function() log[#log + 1] = "new" end)
  end)
  later = v:register_post_accumulate_grad_hook(function() log[#log + 1] = "later" end)
  ;(v * 2):sum():backward()
  lu.assertEquals(log, {"first"})
  later = nil
  ;(v * 2):sum():backward()
  lu.assertEquals(log, {"first", "first", "new"})
end

-- hooks fire while backward runs, in the order it reaches the parameters:
-- the last layer's before the first layer's rule has run
function TestPostAccumulateGradHook:testFiresInTheOrderBackwardReachesParameters()
  qkv.seed(11)
  local m = qkv.nn.Sequential(qkv.nn.Linear(3, 4), qkv.nn.ReLU(), qkv.nn.Linear(4, 2)):double()
  local P = {}
  for name, p in m:named_parameters() do P[name] = p end
  lu.assertNotNil(P["1.weight"])
  lu.assertNotNil(P["3.weight"])
  local order, first_layer_grad = {}, {}
  for name, p in m:named_parameters() do
    p:register_post_accumulate_grad_hook(function(t)
      lu.assertNotNil(t.grad, name)
      order[#order + 1] = name
      first_layer_grad[name] = P["1.weight"].grad ~= nil
    end)
  end
  local x = qkv.randn(5, 3):double()
  m(x):sum():backward()
  lu.assertEquals(#order, 4)
  local pos = {}
  for i, name in ipairs(order) do pos[name] = i end
  for _, last in ipairs{"3.weight", "3.bias"} do
    for _, first in ipairs{"1.weight", "1.bias"} do
      lu.assertTrue(pos[last] < pos[first], table.concat(order, " "))
    end
    lu.assertFalse(first_layer_grad[last], last .. "'s hook ran after the first layer's rule")
  end
end

function TestPostAccumulateGradHook:testNoCallForALeafNoGradientReached()
  -- attention's weights alone: V's edge carries nil, V.grad stays nil
  qkv.seed(2)
  local Q = qkv.randn(1, 3, 4):double():requires_grad_()
  local K = qkv.randn(1, 3, 4):double():requires_grad_()
  local V = qkv.randn(1, 3, 4):double():requires_grad_()
  local calls = {}
  for name, t in pairs{Q = Q, K = K, V = V} do
    t:register_post_accumulate_grad_hook(function() calls[#calls + 1] = name end)
  end
  local _, W = qkv.attention(Q, K, V, {weights = true})
  ;(W * W):sum():backward()
  lu.assertNil(V.grad)
  lu.assertNotNil(Q.grad)
  table.sort(calls)
  lu.assertEquals(calls, {"K", "Q"})
  -- a node that received none: the rule after it returns nil for it
  local w, v = f64{1, 2}:requires_grad_(), f64{3, 4}:requires_grad_()
  local got = {}
  w:register_post_accumulate_grad_hook(function() got[#got + 1] = "w" end)
  v:register_post_accumulate_grad_hook(function() got[#got + 1] = "v" end)
  local s = w * 2
  local r = A.record("StopBackward", (s:detach() + v:detach()):sum(), {s, v},
                     function(g) return nil, qkv.ones(2, "float64") * g end)
  r:backward()
  lu.assertEquals(got, {"v"})
  lu.assertNil(w.grad)
  same(v.grad, {1, 1})
end

function TestPostAccumulateGradHook:testNotForQkvGrad()
  local w = f64{1, 2}:requires_grad_()
  local calls = 0
  w:register_post_accumulate_grad_hook(function() calls = calls + 1 end)
  local inner = 0
  local g = qkv.grad(function(a)
    -- qkv.grad's inputs are leaves that require grad: a hook on one is
    -- taken, and still not called
    a:register_post_accumulate_grad_hook(function() inner = inner + 1 end)
    return (a * a):sum()
  end, {w})
  same(g[1], {2, 4})
  lu.assertEquals(calls, 0)
  lu.assertEquals(inner, 0)
  ;(w * w):sum():backward()
  lu.assertEquals(calls, 1)
end

function TestPostAccumulateGradHook:testGradModeIsOffInAHook()
  local w = f64{1}:requires_grad_()
  local mode
  w:register_post_accumulate_grad_hook(function() mode = qkv.is_grad_enabled() end)
  ;(w * 2):sum():backward()
  lu.assertFalse(mode)
  lu.assertTrue(qkv.is_grad_enabled())
end

function TestPostAccumulateGradHook:testErrors()
  local w = f64{1, 2}:requires_grad_()
  local name = "register_post_accumulate_grad_hook"
  local line = debug.getinfo(1, "l").currentline + 1
  local msg = fails(name .. ": bad argument #2 (function expected, got number)", function() w:register_post_accumulate_grad_hook(3) end)
  lu.assertStrContains(msg, "test_hooks.lua:" .. line .. ": ")
  fails(name .. ": bad argument #2 (function expected, got nil)",
        function() w:register_post_accumulate_grad_hook() end)
  fails(name .. ": bad argument #1 (qkv.Tensor expected, got table)",
        w.register_post_accumulate_grad_hook, {}, print)
  fails(name .. ": x does not require grad",
        function() f64{1}:register_post_accumulate_grad_hook(print) end)
  fails(name .. ": x is the result of MulBackward, not a leaf",
        function() (w * 2):register_post_accumulate_grad_hook(print) end)
  fails(name .. ": x does not require grad",
        function() f64{1}:requires_grad_():requires_grad_(false):register_post_accumulate_grad_hook(print) end)
  -- the handle's method called with '.' says so, at the script's line
  local h = w:register_post_accumulate_grad_hook(print)
  line = debug.getinfo(1, "l").currentline + 1
  msg = fails("remove: called with '.', use handle:remove()", function() h.remove() end)
  lu.assertStrContains(msg, "test_hooks.lua:" .. line .. ": ")
  fails("remove: called on a tensor, not a hook handle (called with '.'?): use handle:remove()", h.remove, w)
  h:remove()
end

-- an error in a hook comes out of backward, at the hook's line; the graph
-- is left as a rule's error leaves it (the nodes gone back are freed)
function TestPostAccumulateGradHook:testAnErrorInAHookPropagates()
  local w = f64{1, 2}:requires_grad_()
  local ran = false
  local line = debug.getinfo(1, "l").currentline + 1
  w:register_post_accumulate_grad_hook(function() error("hook failed") end)
  w:register_post_accumulate_grad_hook(function() ran = true end)
  local y = (w * 3):sum()
  local msg = fails("hook failed", function() y:backward() end)
  lu.assertStrContains(msg, "test_hooks.lua:" .. line .. ": hook failed")
  lu.assertFalse(ran, "the hook after the failing one ran")
  same(w.grad, {3, 3})
  fails("graph was freed", function() y:backward() end)
  -- the callbacks queued before the error do not run, and none leaks out
  local cb = false
  local v = f64{1}:requires_grad_()
  v:register_post_accumulate_grad_hook(function()
    A.queue_callback(function() cb = true end)
    error("second")
  end)
  fails("second", function() (v * 2):sum():backward() end)
  lu.assertFalse(cb)
  fails("queue_callback: no backward is running", A.queue_callback, print)
end

---------------------------------------------------------------- queue_callback
TestQueueCallback = {}

-- a callback queued from the first hook runs after every hook, and sees
-- every gradient as the whole backward left it (the values of qkv.grad)
function TestQueueCallback:testRunsAfterAllHooksAndSeesAllGrads()
  qkv.seed(4)
  local m = qkv.nn.Sequential(qkv.nn.Linear(3, 4), qkv.nn.Tanh(), qkv.nn.Linear(4, 1)):double()
  local x = qkv.randn(6, 3):double()
  local params, names = {}, {}
  for name, p in m:named_parameters() do params[#params + 1], names[#names + 1] = p, name end
  local events, queued, at_callback = {}, false, nil
  for i, p in ipairs(params) do
    p:register_post_accumulate_grad_hook(function()
      events[#events + 1] = "hook " .. names[i]
      if not queued then
        queued = true
        A.queue_callback(function()
          events[#events + 1] = "callback"
          at_callback = {}
          for j, q in ipairs(params) do at_callback[j] = q.grad and q.grad:tolist() end
        end)
      end
    end)
  end
  m(x):sum():backward()
  lu.assertEquals(#events, #params + 1)
  lu.assertEquals(events[#events], "callback")
  -- the same gradients, computed apart
  local want = qkv.grad(function(...)
    local ps = {...}
    local h = (x:matmul(ps[1]:t()) + ps[2]):tanh()  -- qkv.nn.Linear's weight is (d_out, d_in)
    return (h:matmul(ps[3]:t()) + ps[4]):sum()
  end, params)
  lu.assertEquals(names, {"1.weight", "1.bias", "3.weight", "3.bias"})
  for j = 1, #params do
    lu.assertNotNil(at_callback[j], names[j])
    local err = (f64(at_callback[j]) - want[j]):abs():max():item()
    lu.assertTrue(err < 1e-12, names[j] .. " off by " .. err)
  end
end

-- in the order queued; one queued by a callback runs after; from a rule too
function TestQueueCallback:testOrderAndQueueFromACallbackAndFromARule()
  local w = f64{1, 2}:requires_grad_()
  local log = {}
  local s = w * 2
  local r = A.record("QueueBackward", s:detach():sum(), {s}, function(g)
    log[#log + 1] = "rule"
    A.queue_callback(function()
      log[#log + 1] = "c1"
      A.queue_callback(function() log[#log + 1] = "c3" end)
    end)
    A.queue_callback(function() log[#log + 1] = "c2" end)
    return qkv.ones(2, "float64") * g
  end)
  w:register_post_accumulate_grad_hook(function() log[#log + 1] = "hook" end)
  r:backward()
  lu.assertEquals(log, {"rule", "hook", "c1", "c2", "c3"})
  same(w.grad, {2, 2})
  -- the next backward starts with an empty queue
  ;(w * 1):sum():backward()
  lu.assertEquals(log, {"rule", "hook", "c1", "c2", "c3", "hook"})
end

-- a backward inside a hook has its own queue, run before it returns
function TestQueueCallback:testNestedBackwardHasItsOwnQueue()
  local w, v = f64{1}:requires_grad_(), f64{1}:requires_grad_()
  local log = {}
  w:register_post_accumulate_grad_hook(function()
    A.queue_callback(function() log[#log + 1] = "outer" end)
    v:register_post_accumulate_grad_hook(function()
      A.queue_callback(function() log[#log + 1] = "inner" end)
    end)
    -- grad mode is off in a hook: the inner forward asks for it
    qkv.enable_grad(function() return (v * 5):sum() end):backward()
    log[#log + 1] = "inner backward returned"
  end)
  ;(w * 2):sum():backward()
  lu.assertEquals(log, {"inner", "inner backward returned", "outer"})
  same(v.grad, {5})
end

function TestQueueCallback:testErrors()
  local line = debug.getinfo(1, "l").currentline + 1
  local msg = fails("queue_callback: no backward is running", function() A.queue_callback(print) end)
  lu.assertStrContains(msg, "test_hooks.lua:" .. line .. ": ")
  fails("queue_callback: bad argument #1 (function expected, got string)", A.queue_callback, "f")
  -- not inside qkv.grad, which is no backward (it fills no .grad)
  local function grad_that_queues()
    return qkv.grad(function(a)
      local s = a * 1
      return A.record("QueueBackward", s:detach():sum(), {s}, function(g)
        A.queue_callback(print)
        return qkv.ones(1, "float64") * g
      end)
    end, {f64{1}})
  end
  fails("queue_callback: no backward is running", grad_that_queues)
  -- nor inside a qkv.grad that a backward's hook calls
  local u = f64{1}:requires_grad_()
  local inside
  u:register_post_accumulate_grad_hook(function() inside = select(2, pcall(grad_that_queues)) end)
  ;(u * 2):sum():backward()
  lu.assertStrContains(inside, "queue_callback: no backward is running")
  -- an error in a callback comes out of backward; the next backward is clean
  local w = f64{1}:requires_grad_()
  local h = w:register_post_accumulate_grad_hook(function()
    A.queue_callback(function() error("callback failed") end)
  end)
  fails("callback failed", function() (w * 2):sum():backward() end)
  same(w.grad, {2})
  h:remove()
  ;(w * 2):sum():backward()
  same(w.grad, {4})
  fails("queue_callback: no backward is running", A.queue_callback, print)
end

os.exit(lu.LuaUnit.run(), true)
