-- test_grad_reductions.lua: the gradients of the reductions at their
-- special points, against the values PyTorch 2 gives for the same inputs
-- (written in each test): ties and NaN in max()/min() over all and in the
-- ±inf norms (split evenly, as PyTorch's evenly_distribute_backward),
-- zeros in the fractional and negative norms, cumsum's backward with
-- large and infinite gradients, maximum/minimum at ties and NaN, var
-- with no degrees of freedom, clamp with tensor bounds, and pow at 0.
-- gradcheck (test_autograd.lua) cannot see these: they sit where the
-- function has no derivative, or they are rounding.
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

-- the ±inf norms split the gradient evenly among the elements whose |x|
-- reaches the norm (among the NaNs where it is NaN), times their sign, along
-- a dim too: torch.tensor([[3., -3, 1], [1, 2, -2]]).norm(inf, dim=1)
-- gives [[0.5, -0.5, 0], [0, 0.5, -0.5]], where qkv gave [[1, 0, 0], [0, 1, 0]]
function TestGradReductions:testInfNormSplitsTies()
  local function sum(f) return function(x) return f(x):sum() end end
  assertGrad(grad(function(x) return x:norm(inf) end, {1, -3, 3}), {0, -0.5, 0.5}, "norm(inf)")
  assertGrad(grad(function(x) return x:norm(-inf) end, {1, -3, 3, 1}), {0.5, 0, 0, 0.5}, "norm(-inf)")
  assertGrad(grad(sum(function(x) return x:norm(inf, 2) end), {{3, -3, 1}, {1, 2, -2}}),
             {{0.5, -0.5, 0}, {0, 0.5, -0.5}}, "norm(inf, 2)")
  assertGrad(grad(sum(function(x) return x:norm(-inf, 1, true) end), {{3, -3, 1}, {3, 2, -1}}),
             {{0.5, 0, 0.5}, {0.5, 1, -0.5}}, "norm(-inf, 1, keepdim)")
  -- dims (0, 2) of a (2, 2, 2): [[[0, -0.5], [0.5, 0.5]], [[0.5, 0], [0, 0]]]
  assertGrad(grad(sum(function(x) return x:norm(inf, {1, 3}) end),
                  {{{1, -2}, {2, 2}}, {{2, 0}, {1, 1}}}),
             {{{0, -0.5}, {0.5, 0.5}}, {{0.5, 0}, {0, 0}}}, "norm(inf, {1, 3})")
  -- NaN: the NaNs share it, and their sign is 0 (torch: [0, 0, 0, 0])
  assertGrad(grad(function(x) return x:norm(inf) end, {1, nan, -3, nan}), {0, 0, 0, 0}, "norm(inf) NaN")
  -- a transposed float32 view, a tie in its second row: torch gives [[0, -0.5], [1, -0.5]]
  local x = qkv.tensor({{1, -2}, {2, -2}}):requires_grad_()
  x:t():norm(inf, 2):sum():backward()
  assertGrad(x.grad:tolist(), {{0, -0.5}, {1, -0.5}}, "norm(inf, 2) of a transposed float32 view")
end

-- p < 1: |x|^p has no derivative at 0, and PyTorch's rule gives 0 there,
-- where p |x|^(p - 1) made NaN: torch.tensor([0., 1, 2]).norm(0.5)
-- backward is [0, 2.4142, 1.7071] (qkv gave [nan, 2.4142, 1.7071]),
-- norm(-1) of it [0, 0, 0] (qkv [nan, 0, 0]), norm(0.5) of zeros [0, 0]
function TestGradReductions:testFractionalNormAtZero()
  local g = grad(function(x) return x:norm(0.5) end, {0, 1, 2})
  lu.assertEquals(g[1], 0)
  lu.assertAlmostEquals(g[2], 1 + math.sqrt(2), 1e-12)
  lu.assertAlmostEquals(g[3], (1 + math.sqrt(2)) / math.sqrt(2), 1e-12)
  assertGrad(grad(function(x) return x:norm(-1) end, {0, 1, 2}), {0, 0, 0}, "norm(-1)")
  assertGrad(grad(function(x) return x:norm(0.5) end, {0, 0}), {0, 0}, "norm(0.5) of zeros")
  -- along a dim: [[0, 1], [4, 0]] norm(0.5, dim=1) gives [[0, 1], [1, 0]];
  -- [[0, 1], [4, 2]] norm(-0.5, dim=1) gives [[0, 0], [0.0711, 0.2010]]
  assertGrad(grad(function(x) return x:norm(0.5, 2):sum() end, {{0, 1}, {4, 0}}),
             {{0, 1}, {1, 0}}, "norm(0.5, 2)")
  local h = grad(function(x) return x:norm(-0.5, 2):sum() end, {{0, 1}, {4, 2}})
  assertGrad(h[1], {0, 0}, "norm(-0.5, 2), the row with a 0")
  local n = (1 / 2 + 1 / math.sqrt(2)) ^ -2                         -- the second row's norm
  lu.assertAlmostEquals(h[2][1], 4 ^ -1.5 * n ^ 1.5, 1e-12)         -- torch: 0.0711
  lu.assertAlmostEquals(h[2][2], 2 ^ -1.5 * n ^ 1.5, 1e-12)         -- torch: 0.2010
end

-- cumsum's gradient is the running sums of g from the end, summed as
-- such: torch.zeros(3).cumsum(0).backward([1e8, 1, 1]) in float32 gives
-- [1e8, 2, 1] (qkv gave [1e8, 1, 1], from sum - cumsum + g), and an
-- infinite g stays where it reaches: [[inf, 1], [1, -inf]] along dim 1
-- gives [[inf, -inf], [1, -inf]] (qkv gave NaN)
function TestGradReductions:testCumsumBackwardFromTheEnd()
  local x = qkv.zeros(3):requires_grad_()
  x:cumsum(1):backward(qkv.tensor{1e8, 1, 1})
  assertGrad(x.grad:tolist(), {1e8, 2, 1}, "float32, g = {1e8, 1, 1}")
  assertGrad(grad(function(v) return v:cumsum(1) end, {{0, 0}, {0, 0}}, {{inf, 1}, {1, -inf}}),
             {{inf, -inf}, {1, -inf}}, "infinite g")
  -- a NaN reaches the elements before it only: [1, nan, 2] gives [nan, nan, 2]
  assertGrad(grad(function(v) return v:cumsum(-1) end, {0, 0, 0}, {1, nan, 2}),
             {nan, nan, 2}, "NaN in g")
end

-- maximum and minimum (x:max(y), x:min(y)): a tie halves the gradient
-- between the operands, a NaN on either side sends it whole to both, as
-- PyTorch's rules: torch.maximum([1, 2, nan, 3], [1, 3, 1, nan]) gives
-- [0.5, 0, 1, 1] and [0.5, 1, 1, 1] (qkv gave [1, 0, 0, 0] and [0, 1, 1, 1])
function TestGradReductions:testMaximumMinimumTiesAndNaN()
  local function both(f, av, bv)
    local a = qkv.tensor(av, "float64"):requires_grad_()
    local b = qkv.tensor(bv, "float64"):requires_grad_()
    f(a, b):sum():backward()
    return {a.grad:tolist(), b.grad:tolist()}
  end
  assertGrad(both(qkv.maximum, {1, 2, nan, 3}, {1, 3, 1, nan}), {{0.5, 0, 1, 1}, {0.5, 1, 1, 1}}, "maximum")
  assertGrad(both(qkv.minimum, {1, 2, nan, 3}, {1, 3, 1, nan}), {{0.5, 1, 1, 1}, {0.5, 0, 1, 1}}, "minimum")
  assertGrad(both(function(a, b) return a:max(b) end, {2, 1}, {2, 3}), {{0.5, 0}, {0.5, 1}}, "x:max(y)")
  -- broadcast: maximum([[1], [2]], [1, 2, 2]) gives [[0.5], [2]] and [0.5, 1.5, 1.5]
  assertGrad(both(qkv.maximum, {{1}, {2}}, {1, 2, 2}), {{{0.5}, {2}}, {0.5, 1.5, 1.5}}, "broadcast")
  -- a number: minimum(3, [1, 2, nan, 3]) gives [1, 1, 1, 0.5]
  assertGrad(grad(function(x) return qkv.minimum(3, x):sum() end, {1, 2, nan, 3}), {1, 1, 1, 0.5},
             "minimum with a number")
end

-- var over all with no degrees of freedom (n <= correction): PyTorch's
-- rule gives inf, unsigned, off the mean and NaN on it:
-- torch.tensor([1., 2]).var(correction=2) backward is [inf, inf] (qkv gave
-- [-inf, inf]), with gradient -1 [-inf, -inf], [1, 2, 1.5] with
-- correction 3 [inf, inf, nan]; along a dim it stays signed ([-inf, inf]),
-- and std over all is NaN ([nan, nan, nan])
function TestGradReductions:testVarWithoutDegreesOfFreedom()
  assertGrad(grad(function(x) return x:var{correction = 2} end, {1, 2}), {inf, inf}, "var over all")
  assertGrad(grad(function(x) return x:var{correction = 2} end, {1, 2}, -1), {-inf, -inf},
             "var over all, gradient -1")
  assertGrad(grad(function(x) return x:var{correction = 3} end, {1, 2, 1.5}), {inf, inf, nan},
             "var over all, one element on the mean")
  assertGrad(grad(function(x) return x:var{correction = 5} end, {{1, 2}}), {{inf, inf}}, "var of a 2-D")
  assertGrad(grad(function(x) return x:var(1, false, 2) end, {1, 2}), {-inf, inf}, "var along dim 1")
  assertGrad(grad(function(x) return x:std{correction = 3} end, {1, 2, 1.5}), {nan, nan, nan}, "std")
  assertGrad(grad(function(x) return x:var() end, {2}), {nan}, "var of one element")
end

-- clamp with tensor bounds, PyTorch 2's values (x = [1, 2, 3], float64).
-- A bound that requires grad gets its gradient: qkv gave it none (nil),
-- and one bound alone is maximum/minimum, halving a tie, where qkv gave x
-- the whole of it: x:clamp(nil, h = 2) gave x [1, 1, 0] and h nil,
-- PyTorch x [1, 0.5, 0] and h 1.5
function TestGradReductions:testClampTensorBounds()
  local function run(xv, lo, hi)
    local x = qkv.tensor(xv, "float64"):requires_grad_()
    local l = lo and qkv.tensor(lo, "float64"):requires_grad_()
    local h = hi and qkv.tensor(hi, "float64"):requires_grad_()
    x:clamp(l, h):sum():backward()
    return {x.grad:tolist(), l and l.grad:tolist() or "none", h and h.grad:tolist() or "none"}
  end
  assertGrad(run({1, 2, 3}, nil, 2), {{1, 0.5, 0}, "none", 1.5}, "max only")
  assertGrad(run({1, 2, 3}, 2, nil), {{0, 0.5, 1}, 1.5, "none"}, "min only")
  assertGrad(run({1, 2, 3}, nil, {1, 2, 3}), {{0.5, 0.5, 0.5}, "none", {0.5, 0.5, 0.5}}, "max ties")
  assertGrad(run({1, nan, 3}, nil, {2, 2, nan}), {{1, 1, 1}, "none", {0, 1, 1}}, "max, NaN")
  assertGrad(run({1, 2, 3}, 2, 2), {{0, 1, 0}, 1, 1}, "min = max")
  assertGrad(run({1, 2, 3}, {0, 2, 4}, {2, 2, 5}), {{1, 1, 0}, {0, 0, 1}, {0, 0, 0}}, "both")
  assertGrad(run({1, 2, 3}, 3, 1), {{0, 0, 0}, 0, 3}, "min > max")
  assertGrad(run({1, 2, 3}, 2.5, 2), {{0, 0, 0}, 0, 3}, "min > max, 2.5")
  assertGrad(run({1, 2, 3}, {1, 2, 3}, {1, 2, 3}), {{1, 1, 1}, {0, 0, 0}, {0, 0, 0}}, "all tied")
  assertGrad(run({1, nan, 3}, {0, 0, nan}, {2, 2, 2}), {{1, 1, 0}, {0, 0, 0}, {0, 0, 0}}, "both, NaN")
  -- a bound that does not require grad still splits x's tie, as PyTorch's
  local x = qkv.tensor({1, 2, 3}, "float64"):requires_grad_()
  x:clamp(nil, qkv.tensor(2, "float64")):sum():backward()
  assertGrad(x.grad:tolist(), {1, 0.5, 0}, "max, a plain tensor")
  -- number bounds keep PyTorch's scalar rule: x where lo <= x <= hi
  x.grad = nil
  x:clamp(1, 2):sum():backward()
  assertGrad(x.grad:tolist(), {1, 1, 0}, "number bounds")
end

-- pow at its flat points, PyTorch 2's pow_backward_self and
-- pow_backward_exponent: x^0 at x = 0 has gradient 0 (qkv gave NaN, 0 *
-- 0^-1); 0^e in e is 0 for e >= 0 (qkv gave NaN at e = 1, -inf at e = 0)
function TestGradReductions:testPowAtZero()
  assertGrad(grad(function(x) return (x ^ 0):sum() end, {0, 2}), {0, 0}, "x^0")
  assertGrad(grad(function(x) return qkv.pow(x, qkv.tensor({0, 0}, "float64")):sum() end, {0, 2}),
             {0, 0}, "x^tensor 0")
  assertGrad(grad(function(e) return qkv.pow(qkv.tensor({0, 0, 2}, "float64"), e):sum() end, {1, 0, 2}),
             {0, 0, 2.772588722239781}, "tensor base, exponent's gradient")
  assertGrad(grad(function(e) return (0 ^ e):sum() end, {1, 0}), {0, 0}, "0^e")
  -- the rest as before, as PyTorch's: 0^0.5 is inf, x^2 at 0 is 0, 0^-1 in e is -inf
  assertGrad(grad(function(x) return (x ^ 0.5):sum() end, {0, 4}), {inf, 0.25}, "x^0.5")
  assertGrad(grad(function(x) return (x ^ 2):sum() end, {0, -1}), {0, -2}, "x^2")
  assertGrad(grad(function(e) return (0 ^ e):sum() end, {-1}), {-inf}, "0^-1")
end

os.exit(lu.LuaUnit.run(), true)
