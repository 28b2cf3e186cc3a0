-- test_grad_own.lua: every leaf's .grad (and every gradient qkv.grad
-- returns) is a tensor of its own, as PyTorch's AccumulateGrad copies a
-- gradient that is shared. A rule may pass the gradient it got on
-- unchanged (x + y gives g to both, x + 0 the root's grad), and that
-- tensor was stored as it came: two leaves shared one .grad, and a leaf's
-- .grad was the caller's grad argument, so an in-place write to one
-- (GradScaler's unscale_, clip_grad_norm_, the script's own) changed the
-- others. Values written from PyTorch 2's.
local lu = require "luaunit"

local function f64(v) return qkv.tensor(v, "float64") end

TestGradOwn = {}

-- (a + b):backward({1, 1}); a.grad:mul_(3): PyTorch a.grad [3, 3], b.grad
-- [1, 1]; qkv gave [3, 3] to both
function TestGradOwn:testTwoLeavesDoNotShareAGrad()
  local a, b = f64{1, 2}:requires_grad_(), f64{3, 4}:requires_grad_()
  ;(a + b):backward(f64{1, 1})
  lu.assertFalse(rawequal(a.grad, b.grad))
  a.grad:mul_(3)
  lu.assertEquals(a.grad:tolist(), {3, 3})
  lu.assertEquals(b.grad:tolist(), {1, 1})
end

-- (c + 0):backward(G); G:mul_(7): PyTorch c.grad [1, 1]; qkv gave [7, 7]
function TestGradOwn:testGradIsNotTheCallersTensor()
  local c = f64{1, 2}:requires_grad_()
  local G = f64{1, 1}
  ;(c + 0):backward(G)
  G:mul_(7)
  lu.assertEquals(c.grad:tolist(), {1, 1})
  -- and a later write to c.grad leaves G alone
  c.grad:mul_(5)
  lu.assertEquals(G:tolist(), {7, 7})
end

-- qkv.grad of a + b with grad G: two gradients of their own, not G
function TestGradOwn:testQkvGradResultsAreTheirOwn()
  local G = f64{1, 2}
  local g = qkv.grad(function(a, b) return a + b end, {f64{0, 0}, f64{0, 0}}, G)
  lu.assertFalse(rawequal(g[1], g[2]))
  g[1]:mul_(10)
  lu.assertEquals(g[1]:tolist(), {10, 20})
  lu.assertEquals(g[2]:tolist(), {1, 2})
  lu.assertEquals(G:tolist(), {1, 2})
end

-- PyTorch: a, b = [1, 2], [3, 4] (float32), GradScaler("cpu",
-- init_scale=1024), scale((a + b).sum()).backward(), unscale_(opt):
-- a.grad = b.grad = [1, 1]; SGD(lr=0.1) step: a [0.9, 1.9], b [2.9, 3.9].
-- qkv unscaled the shared grad twice: [0.001, 0.001] (1/1024), and the
-- step moved a to [0.9999, 1.9999]
function TestGradOwn:testGradScalerUnscalesEachOnce()
  local a, b = qkv.tensor{1, 2}:requires_grad_(), qkv.tensor{3, 4}:requires_grad_()
  local opt = qkv.optim.SGD({a, b}, {lr = 0.1})
  local scaler = qkv.amp.GradScaler("cpu", {init_scale = 1024})
  scaler:scale((a + b):sum()):backward()
  scaler:unscale_(opt)
  lu.assertEquals(a.grad:tolist(), {1, 1})
  lu.assertEquals(b.grad:tolist(), {1, 1})
  scaler:step(opt)
  lu.assertAlmostEquals(a:tolist()[1], 0.9, 1e-6)
  lu.assertAlmostEquals(a:tolist()[2], 1.9, 1e-6)
  lu.assertAlmostEquals(b:tolist()[1], 2.9, 1e-6)
  lu.assertAlmostEquals(b:tolist()[2], 3.9, 1e-6)
end

-- accumulation over two backwards still adds, and the second leaves the
-- first's grad argument alone: PyTorch c.grad [3, 3]
function TestGradOwn:testAccumulatesAcrossBackwards()
  local c = f64{1, 2}:requires_grad_()
  local G = f64{1, 1}
  ;(c + 0):backward(G)
  ;(c * 2):backward(G)
  lu.assertEquals(c.grad:tolist(), {3, 3})
  lu.assertEquals(G:tolist(), {1, 1})
end

-- w:requires_grad_(false) between the forward and the backward: PyTorch's
-- AccumulateGrad gives w nothing (w.grad None, its post-accumulate hooks
-- not called) and x its own gradient [1, 2]; qkv gave w.grad [3, 6]
function TestGradOwn:testLeafNoLongerRequiringGradGetsNothing()
  local w, x = f64{1, 2}:requires_grad_(), f64{3, 6}:requires_grad_()
  local called = false
  w:register_post_accumulate_grad_hook(function() called = true end)
  local u = (w * x):sum()
  w:requires_grad_(false)
  u:backward()
  lu.assertNil(w.grad)
  lu.assertFalse(called)
  lu.assertEquals(x.grad:tolist(), {1, 2})
end

-- f returning one of its inputs itself: torch.autograd.grad(x, x) is
-- grad_outputs (1 for a 0-d x; [5, 6] with that grad); qkv gave zeros.
-- The copy is the result's own: writing it leaves grad alone
function TestGradOwn:testQkvGradOfAnInputItself()
  lu.assertEquals(qkv.grad(function(a) return a end, {f64(3)})[1]:item(), 1)
  local G = f64{5, 6}
  local g = qkv.grad(function(_, b) return b end, {f64(3), f64{1, 2}}, G)
  lu.assertEquals(g[1]:item(), 0)
  lu.assertEquals(g[2]:tolist(), {5, 6})
  g[2]:mul_(2)
  lu.assertEquals(G:tolist(), {5, 6})
end

-- x:contiguous() of a contiguous x is x itself, as PyTorch's (c is x,
-- c.grad_fn None): the rule made it its node's output, so the leaf
-- stopped being one (is_leaf false, a second step through the freed node
-- an error) and, since the previous commit, lost its gradient (nil).
-- PyTorch: sum(c * c) at {1.5, 2.7} gives x.grad [3, 5.4], twice [6, 10.8]
function TestGradOwn:testAViewThatIsItsInputLeavesItAlone()
  local x = f64{1.5, 2.7}:requires_grad_()
  for step = 1, 2 do
    local c = x:contiguous()
    lu.assertTrue(rawequal(c, x))
    lu.assertTrue(x.is_leaf)
    lu.assertNil(c.grad_fn)
    ;(c * c):sum():backward()
    lu.assertAlmostEquals(x.grad:tolist()[1], 3 * step, 1e-12)
    lu.assertAlmostEquals(x.grad:tolist()[2], 5.4 * step, 1e-12)
  end
  -- of an op's output: the output keeps its node (MulBackward)
  local w = f64{1, 2}:requires_grad_()
  local m = w * 2
  lu.assertEquals(tostring(m:contiguous().grad_fn), "<MulBackward0>")
end
