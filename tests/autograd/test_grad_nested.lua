-- test_grad_nested.lua: qkv.grad inside another qkv.grad's f. qkv.grad has
-- no create_graph, so its result cannot carry the enclosing graph: where
-- PyTorch's grad of grad (create_graph=True) gives a second derivative,
-- qkv.grad must be an error, never the zero it gave before (the inner
-- result taken as a constant). Under qkv.no_grad, or on tensors the
-- enclosing qkv.grad does not differentiate, it is a constant and stays
-- allowed.
local lu = require "luaunit"

local function f64(v) return qkv.tensor(v, "float64") end
local function why(f)
  local ok, err = pcall(f)
  lu.assertFalse(ok, "expected an error")
  return tostring(err)
end

TestGradNested = {}

-- x = {1, 2, 3}: d/dx sum(d/dx sum(x^3)) = 6x; PyTorch (create_graph=True)
-- gives [6, 12, 18]; qkv gave [0, 0, 0]
function TestGradNested:testGradOfGradIsAnError()
  local msg = why(function()
    return qkv.grad(function(a)
      return qkv.grad(function(b) return (b * b * b):sum() end, {a})[1]:sum()
    end, {f64{1, 2, 3}})
  end)
  lu.assertStrContains(msg, "test_grad_nested.lua:")
  lu.assertStrContains(msg, "grad: input 1 is differentiated by an enclosing qkv.grad")
  lu.assertStrContains(msg, "create_graph")
end

-- the inner input made from the outer one by an op (a * 2) is caught too
function TestGradNested:testInputMadeFromTheOuterInput()
  local msg = why(function()
    return qkv.grad(function(a)
      return qkv.grad(function(b) return (b * b):sum() end, {a * 2})[1]:sum()
    end, {f64{1, 2}})
  end)
  lu.assertStrContains(msg, "grad: input 1 is differentiated by an enclosing qkv.grad")
end

-- w = {0.5, -1}, g = d/db sum(b * w) = w, d/dw sum(g^2) = 2w: PyTorch
-- [1, -2] (and [4, -8] through w * 2); qkv gave [0, 0]: the inner f reads
-- the outer input from its closure
function TestGradNested:testClosureOverTheOuterInput()
  for _, scale in ipairs{false, true} do
    local msg = why(function()
      return qkv.grad(function(a)
        local c = scale and a * 2 or a
        local g = qkv.grad(function(b) return (b * c):sum() end, {f64{1, 1}})[1]
        return (g * g):sum()
      end, {f64{0.5, -1}})
    end)
    lu.assertStrContains(msg, "grad: a tensor f reads is differentiated by an enclosing qkv.grad")
  end
end

-- the enclosing graph is left whole by the refused call: the outer
-- gradient of the rest still runs
function TestGradNested:testOuterGraphLeftWhole()
  local g = qkv.grad(function(a)
    local a2 = a * a
    pcall(qkv.grad, function(b) return (b * a2):sum() end, {f64{1, 1}})
    return a2:sum()
  end, {f64{1, 3}})[1]
  lu.assertEquals(g:tolist(), {2, 6})
end

-- under qkv.no_grad the inner gradient is a constant on purpose:
-- g = 3x^2 held fixed, d/dx sum(g * x) = g = [3, 12, 27] (PyTorch, g
-- detached)
function TestGradNested:testUnderNoGradIsAConstant()
  local g = qkv.grad(function(a)
    local inner = qkv.no_grad(qkv.grad, function(b) return (b * b * b):sum() end, {a})[1]
    return (inner * a):sum()
  end, {f64{1, 2, 3}})[1]
  lu.assertEquals(g:tolist(), {3, 12, 27})
end

-- an inner qkv.grad on what the outer does not differentiate (a leaf of
-- its own that requires grad, a fresh tensor) is a constant of the outer
-- and stays allowed: d/dw sum(p * w) = p = [2, 3]
function TestGradNested:testIndependentInnerIsAllowed()
  local p = f64{2, 3}:requires_grad_()
  local g = qkv.grad(function(a)
    local inner = qkv.grad(function(b) return (b * p):sum() end, {f64{1, 1}})[1]
    return (inner * a):sum()
  end, {f64{0.5, -1}})[1]
  lu.assertEquals(g:tolist(), {2, 3})
end

-- an error in the inner f leaves nothing behind: a later plain qkv.grad
-- of the same tensors works
function TestGradNested:testErrorInsideLeavesNoState()
  local x = f64{1, 2}
  lu.assertFalse(pcall(qkv.grad, function() error("boom") end, {x}))
  local inner = qkv.grad(function(b) return (b * b):sum() end, {x})[1]
  lu.assertEquals(inner:tolist(), {2, 4})
end
