-- doc/grad.lua: qkv.doc entries of autograd (stdlib/qkv/autograd.lua,
-- derivatives.lua; bindings/lgrad.c), its losses and gradcheck.

return {
  {name = "Tensor:requires_grad_", sig = "x:requires_grad_([flag])", group = "autograd",
   doc = [[Marks x (a float tensor, a leaf) as requiring grad, or not with
flag false, and returns x. The ops that take x then record a graph, and
y:backward() fills x.grad. The first call loads qkv.autograd; until then no
op pays for it. An integer or bool tensor is an error. As
torch.Tensor.requires_grad_.]],
   example = [=[local x = qkv.tensor({1, 2, 3}, "float64"):requires_grad_()
local y = (x * x):sum()
print(y)   --> tensor(14., dtype=float64, grad_fn=<SumBackward0>)
y:backward()
print(x.grad)   --> tensor([2., 4., 6.], dtype=float64)]=]},

  {name = "Tensor:backward", sig = "x:backward([grad])", group = "autograd",
   doc = [[Sends the gradient of x back through the graph that made it and
adds it to the .grad of every leaf that requires grad. grad (x's shape)
defaults to 1 for a one-element x and is needed otherwise. The graph is
freed: a second backward through it is an error, and so is a backward after
an in-place write to a tensor the graph saved (its version moved). As
torch.Tensor.backward.]]},

  {name = "Tensor:detach", sig = "x:detach()", group = "autograd",
   doc = [[A view of x's data that takes part in no graph: ops on it record
nothing, and it never requires grad. It shares x's storage. As
torch.Tensor.detach.]]},

  {name = "qkv.no_grad", sig = "qkv.no_grad(f, ...)", group = "autograd",
   doc = [[Calls f(...) with grad mode off and returns its results: no op
inside records a graph, so results do not require grad. The mode comes
back however f ends. As torch.no_grad as a context.]],
   example = [=[local w = qkv.ones(2):requires_grad_()
print(qkv.no_grad(function() return w * 2 end).requires_grad)   --> false]=]},

  {name = "qkv.is_grad_enabled", sig = "qkv.is_grad_enabled()", group = "autograd",
   doc = [[Whether ops record a graph here: false inside qkv.no_grad, true
inside qkv.enable_grad and elsewhere. Grad mode belongs to a coroutine, as
PyTorch's to a thread: a coroutine that yields inside qkv.no_grad takes its
mode with it (one never resumed leaves the rest of the program recording),
and a coroutine that has set none follows the main thread. As
torch.is_grad_enabled.]],
   example = [=[print(qkv.no_grad(qkv.is_grad_enabled), qkv.is_grad_enabled())   --> false true]=]},

  {name = "qkv.enable_grad", sig = "qkv.enable_grad(f, ...)", group = "autograd",
   doc = [[Calls f(...) with grad mode on, also inside qkv.no_grad, and
returns its results. The mode comes back however f ends. As
torch.enable_grad.]]},

  {name = "qkv.grad", sig = "qkv.grad(f, inputs [, grad])", group = "autograd",
   doc = [[The gradients of f(inputs...) (one tensor) with respect to each
tensor of the list inputs, as a list, without touching any .grad: f runs
on detached copies that require grad. grad is as for backward. As
torch.autograd.grad.]],
   example = [=[local g = qkv.grad(function(x) return (x * x):sum() end, {qkv.tensor{1, 2}})
print(g[1])   --> tensor([2., 4.])]=]},

  {name = "qkv.nn.mse_loss", sig = "qkv.nn.mse_loss(input, target [, reduction])",
   group = "functions",
   doc = [[The mean of the squared differences of input and target (target
broadcast to input), or their sum or each of them with reduction "sum" or
"none". It is differentiable. As torch.nn.functional.mse_loss.]]},

  {name = "qkv.nn.cross_entropy", sig = "qkv.nn.cross_entropy(logits, targets)",
   group = "functions",
   doc = [=[The mean over N of -log_softmax(logits)[i][targets[i]], for logits
(N, C) and int64 targets (N) of 1-based classes. A class out of range is
an error. It is differentiable. As torch.nn.functional.cross_entropy.]=],
   example = [=[local l = qkv.tensor{{0, 0}, {0, 0}}
print(qkv.nn.cross_entropy(l, qkv.tensor({1, 2}, "int64")))   --> tensor(0.6931)]=]},

  {name = "Module:zero_grad", sig = "m:zero_grad()", group = "module methods",
   doc = [[Sets the .grad of every parameter of m and its submodules to nil,
and returns m. Parameters require grad from the start, as nn.Parameter
does. As torch.nn.Module.zero_grad.]]},

  {name = "qkv.optim.SGD", sig = "qkv.optim.SGD(params [, opts])", group = "optimizers",
   doc = [[Stochastic gradient descent over params (a list of tensors that
require grad, a qkv.nn module or m:parameters()): opt:step() moves each
parameter by -lr times its gradient, with momentum, dampening, nesterov,
weight_decay and maximize as PyTorch's, step for step. opts: lr (0.01),
momentum (0), dampening (0), weight_decay (0), nesterov (false; needs a
momentum and no dampening), maximize (false). An unknown option, a
parameter that does not require grad, is not a leaf or is listed twice is
an error. As torch.optim.SGD.]],
   example = [=[local p = qkv.tensor{1, 2}:requires_grad_()
local opt = qkv.optim.SGD({p}, {lr = 0.5})
p.grad = qkv.tensor{1, 1}
opt:step()
print(p:detach())                                  --> tensor([0.5000, 1.5000])
print(select(2, pcall(qkv.optim.SGD, {p}, {nesterow = true})))
--> example:6: SGD: unknown option 'nesterow' (did you mean 'nesterov'?)]=]},

  {name = "qkv.optim.Adam", sig = "qkv.optim.Adam(params [, opts])", group = "optimizers",
   doc = [[Adam over params, as qkv.optim.SGD takes them: running averages
of each gradient and of its square, bias-corrected by each parameter's own
step count, scale the steps. opts: lr (1e-3), betas ({0.9, 0.999}), eps
(1e-8), weight_decay (0, added to the gradient as PyTorch's Adam does),
amsgrad (false: true divides by the largest second moment so far),
maximize (false), decoupled_weight_decay (false: true makes it AdamW).
As torch.optim.Adam.]]},

  {name = "qkv.optim.AdamW", sig = "qkv.optim.AdamW(params [, opts])", group = "optimizers",
   doc = [[Adam with decoupled weight decay: before each step a parameter
that has a gradient is multiplied by 1 - lr * weight_decay, and the
gradient itself is left as it is, so the decay does not pass through
Adam's moments. Everything else is qkv.optim.Adam's update, with the same
options and each parameter's own step count. opts: lr (1e-3), betas
({0.9, 0.999}), eps (1e-8), weight_decay (1e-2), amsgrad (false), maximize
(false). As torch.optim.AdamW, step for step.]],
   example = [=[local p = qkv.tensor({1, -2}, "float64"):requires_grad_()
local opt = qkv.optim.AdamW({p}, {lr = 0.1, weight_decay = 0.5})
p.grad = qkv.tensor({1, -1}, "float64")
opt:step()   -- p * (1 - 0.1 * 0.5), then Adam's first step of lr
print(p:detach())                     --> tensor([ 0.8500, -1.8000], dtype=float64)]=]},

  {name = "Optimizer:step", sig = "opt:step()", group = "optimizer methods",
   doc = [[Updates every parameter that has a .grad from it, in place and
outside the graph; parameters without one are left alone. Call it after
backward. As torch.optim.Optimizer.step.]]},

  {name = "Optimizer:zero_grad", sig = "opt:zero_grad()", group = "optimizer methods",
   doc = [[Sets the .grad of every parameter of opt to nil, so that the next
backward starts from zero. Gradients otherwise accumulate. As
torch.optim.Optimizer.zero_grad.]]},

  {name = "qkv.test.gradcheck", sig = "qkv.test.gradcheck(f, inputs [, opts])",
   group = "assertions",
   doc = [[Checks the gradient qkv.autograd computes for f at the float64
tensors inputs against central finite differences: for a fixed random v of
f's output shape, each element of the gradient of sum(f(...) * v) must be
within atol + rtol * |numeric| (opts: eps 1e-6, atol 1e-5, rtol 1e-3).
It fails naming the input and element, or returns true. As
torch.autograd.gradcheck.]],
   example = [=[print(qkv.test.gradcheck(function(x) return x:exp() end, {qkv.randn(3):double()}))   --> true]=]},
}
