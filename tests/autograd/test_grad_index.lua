-- test_grad_index.lua: x[i] that reads one element of a tensor autograd
-- tracks. qkv gives one element as a Lua number (DESIGN.md), which
-- carries no gradient: used in the graph (x * x[1]) it cut the path
-- through it without a word. It is an error now, naming the ways that
-- keep the gradient (x:select, x[{{i, i}}]) or read the value
-- (x:detach()[i], qkv.no_grad). And a copy to an integer dtype, which
-- leaves the graph as PyTorch's. Values written from PyTorch 2's.
local lu = require "luaunit"

local function f64(v) return qkv.tensor(v, "float64") end

TestGradIndex = {}

-- x = {1, 2}, y = sum(x * x[1]): PyTorch x.grad [4, 1] (x[0] + sum(x),
-- x[0]); qkv gave [1, 1], x[1] taken as the constant 1
function TestGradIndex:testOneElementOfATrackedTensorIsAnError()
  local x = f64{1, 2}:requires_grad_()
  local ok, err = pcall(function() return (x * x[1]):sum() end)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "test_grad_index.lua:")
  lu.assertStrContains(err, "index: x[1] is one element, a Lua number, and x requires grad")
  local m = f64{{1, 2}, {3, 4}}:requires_grad_()
  ok, err = pcall(function() return m[{2, 1}] end)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "index: x[{...}] is one element")
  ok, err = pcall(function() return (m * 2)[1][2] end)   -- an op's output too
  lu.assertFalse(ok)
  lu.assertStrContains(err, "index: x[2] is one element")
end

-- the ways the message names: select keeps the path (PyTorch [4, 1]);
-- x[{{1, 1}}] too; detach and no_grad read the number
function TestGradIndex:testTheWaysAroundIt()
  local x = f64{1, 2}:requires_grad_()
  ;(x * x:select(1, 1)):sum():backward()
  lu.assertEquals(x.grad:tolist(), {4, 1})
  x.grad = nil
  ;(x * x[{{1, 1}}]):sum():backward()
  lu.assertEquals(x.grad:tolist(), {4, 1})
  lu.assertEquals(x:detach()[2], 2)
  lu.assertEquals(qkv.no_grad(function() return x[2] end), 2)
  -- a row (a tensor) of a tracked 2-D x stays differentiable: PyTorch
  -- m.grad of sum(m[0] * 3) is [[3, 3], [0, 0]]
  local m = f64{{1, 2}, {3, 4}}:requires_grad_()
  ;(m[1] * 3):sum():backward()
  lu.assertEquals(m.grad:tolist(), {{3, 3}, {0, 0}})
end

-- a copy to an integer or bool dtype leaves the graph, as PyTorch's:
-- x = {1.5, 2.7}, y = x.to(int64) does not require grad, and
-- (y.to(float64) * x).sum() gives x.grad [1, 2]; qkv recorded the copy and
-- sent x's gradient back through int64: {2, 4}
function TestGradIndex:testIntegerCopyLeavesTheGraph()
  local x = f64{1.5, 2.7}:requires_grad_()
  local y = x:to("int64")
  lu.assertFalse(y.requires_grad)
  lu.assertFalse(x:to("bool").requires_grad)
  lu.assertTrue(x:to("float32").requires_grad)
  ;(y:to("float64") * x):sum():backward()
  lu.assertEquals(x.grad:tolist(), {1, 2})
end
