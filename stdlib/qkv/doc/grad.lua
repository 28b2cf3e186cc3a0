-- doc/grad.lua: qkv.doc entries of autograd (stdlib/qkv/autograd.lua,
-- derivatives.lua; bindings/lgrad.c), mse_loss and gradcheck (the
-- classification losses and the loss modules are doc/loss.lua's).

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

  {name = "Tensor:register_post_accumulate_grad_hook",
   sig = "x:register_post_accumulate_grad_hook(fn)", group = "autograd",
   doc = [[Calls fn(x) in each backward that gives x a gradient, once, after the
last edge of the graph into x has added to x.grad, so x.grad then holds all
of that backward's gradient. x must be a leaf that requires grad. Hooks run
in the order registered, with grad mode off, while backward goes on to the
earlier layers; qkv.grad calls none. fn may hand work to the end of the
backward with require("qkv.autograd").queue_callback(f), and the handle
returned takes the hook off with remove(). As
torch.Tensor.register_post_accumulate_grad_hook.]],
   example = [=[local w = qkv.tensor({1, 2}, "float64"):requires_grad_()
local h = w:register_post_accumulate_grad_hook(function(p) print(p.grad) end)
local y = (w * 3 + w):sum()
y:backward()   --> tensor([4., 4.], dtype=float64)
h:remove()]=]},

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
on detached copies that require grad. grad is as for backward. The result
does not require grad (PyTorch's create_graph=False), so a qkv.grad
inside another's f, on an input or a tensor the outer one differentiates,
is an error, where it would give a zero second derivative; under
qkv.no_grad it is taken as a constant. As torch.autograd.grad.]],
   example = [=[local g = qkv.grad(function(x) return (x * x):sum() end, {qkv.tensor{1, 2}})
print(g[1])   --> tensor([2., 4.])]=]},

  {name = "qkv.nn.mse_loss", sig = "qkv.nn.mse_loss(input, target [, reduction])",
   group = "functions",
   doc = [[The mean of the squared differences of input and target (target
broadcast to input), or their sum or each of them with reduction "sum" or
"none" (or {reduction =}). It is differentiable. An argument past
reduction is an error: PyTorch's deprecated size_average and reduce have
no counterpart. As torch.nn.functional.mse_loss.]]},

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
an error. The options are fields of opt (opt.lr = 0.1, as PyTorch's
param_groups[0]["lr"]): each step checks them again, and setting one opt
does not have is an error naming the closest. As torch.optim.SGD.]],
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

  {name = "qkv.optim.lr_scheduler.StepLR", sig = "qkv.optim.lr_scheduler.StepLR(opt, step_size [, opts])",
   group = "learning-rate schedulers",
   doc = [[Multiplies opt.lr by gamma every step_size calls of sched:step(),
as torch.optim.lr_scheduler.StepLR does. opts: gamma (0.1, a number > 0).
Each step scales the current opt.lr, so it chains with other schedulers as
torch's does; its base is opt.initial_lr, which the first scheduler made on
opt sets to opt.lr. step_size may come as PyTorch's keyword, in opts:
StepLR(opt, {step_size = 2, gamma = 0.5}); given both ways, or not at
all, it is an error, as are a step_size that is not a positive integer
and an unknown option.]],
   example = [=[local opt = qkv.optim.SGD({qkv.zeros(1):requires_grad_()}, {lr = 0.1})
local sched = qkv.optim.lr_scheduler.StepLR(opt, 2, {gamma = 0.5})
local lrs = {}
for _ = 1, 5 do
  opt:step()      -- the training step, then the scheduler's
  sched:step()
  lrs[#lrs + 1] = opt.lr
end
print(table.concat(lrs, " "))   --> 0.1 0.05 0.05 0.025 0.025]=]},

  {name = "qkv.optim.lr_scheduler.CosineAnnealingLR",
   sig = "qkv.optim.lr_scheduler.CosineAnnealingLR(opt, T_max [, opts])",
   group = "learning-rate schedulers",
   doc = [[Anneals opt.lr from its base to eta_min along half a cosine over
T_max steps, eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2,
computed step by step from the current opt.lr as
torch.optim.lr_scheduler.CosineAnnealingLR computes it. Past T_max it climbs
back, with period 2 T_max, as torch's does. opts: eta_min (0, a number >=
0), and T_max as PyTorch's keyword: CosineAnnealingLR(opt, {T_max = 4}).
A T_max that is not a positive integer, given twice or missing, is an
error.]],
   example = [=[local opt = qkv.optim.SGD({qkv.zeros(1):requires_grad_()}, {lr = 0.1})
local sched = qkv.optim.lr_scheduler.CosineAnnealingLR(opt, 4)
local lrs = {}
for _ = 1, 5 do
  sched:step()
  lrs[#lrs + 1] = ("%.4f"):format(opt.lr)
end
print(table.concat(lrs, " "))   --> 0.0854 0.0500 0.0146 0.0000 0.0146]=]},

  {name = "qkv.optim.lr_scheduler.LambdaLR", sig = "qkv.optim.lr_scheduler.LambdaLR(opt, lr_lambda)",
   group = "learning-rate schedulers",
   doc = [[Sets opt.lr to the base learning rate times lr_lambda(epoch),
where epoch counts the calls of sched:step() (0 when it is made, which
already sets opt.lr). The base is opt.initial_lr, which the first scheduler
made on opt sets to opt.lr. lr_lambda must return a number >= 0, else the
step is an error naming it. lr_lambda may come as a keyword too,
LambdaLR(opt, {lr_lambda = f}). As torch.optim.lr_scheduler.LambdaLR with
one function (a qkv optimizer is one parameter group).]],
   example = [=[local opt = qkv.optim.SGD({qkv.zeros(1):requires_grad_()}, {lr = 0.1})
local sched = qkv.optim.lr_scheduler.LambdaLR(opt, function(epoch) return 0.5 ^ epoch end)
print(opt.lr)                          --> 0.1
sched:step()
print(opt.lr, sched:get_last_lr()[1])  --> 0.05	0.05]=]},

  {name = "qkv.optim.lr_scheduler.LinearLR", sig = "qkv.optim.lr_scheduler.LinearLR(opt [, opts])",
   group = "learning-rate schedulers",
   doc = [[Linear warm-up (or decay): opt.lr goes from start_factor times its
base to end_factor times it over total_iters steps, then stays there.
Making it already sets opt.lr to start_factor times the base. opts:
start_factor (1/3, in (0, 1]), end_factor (1, in [0, 1]), total_iters (5,
a positive integer). As torch.optim.lr_scheduler.LinearLR, computed step by
step from the current opt.lr as torch's is.]],
   example = [=[local opt = qkv.optim.SGD({qkv.zeros(1):requires_grad_()}, {lr = 0.1})
local sched = qkv.optim.lr_scheduler.LinearLR(opt, {start_factor = 0.25, total_iters = 3})
local lrs = {}
for _ = 1, 5 do
  lrs[#lrs + 1] = ("%.3f"):format(opt.lr)
  sched:step()
end
print(table.concat(lrs, " "))   --> 0.025 0.050 0.075 0.100 0.100]=]},

  {name = "qkv.optim.lr_scheduler.SequentialLR",
   sig = "qkv.optim.lr_scheduler.SequentialLR(opt, schedulers, milestones)",
   group = "learning-rate schedulers",
   doc = [[Runs schedulers one after another: schedulers[1] until the epoch
milestones[1], then schedulers[2], which starts from its epoch 0 at the
base learning rate, and so on. All must step opt, and milestones (epoch
counts, increasing) has one entry fewer than schedulers. Making it sets
opt.lr back to its base and takes the first scheduler's first step again.
A LinearLR warm-up then CosineAnnealingLR is the usual recipe. Both may
come as keywords, SequentialLR(opt, {schedulers = {...}, milestones =
{...}}). As torch.optim.lr_scheduler.SequentialLR.]],
   example = [=[local S = qkv.optim.lr_scheduler
local opt = qkv.optim.SGD({qkv.zeros(1):requires_grad_()}, {lr = 0.1})
local warmup = S.LinearLR(opt, {start_factor = 0.1, total_iters = 2})
local sched = S.SequentialLR(opt, {warmup, S.CosineAnnealingLR(opt, 4)}, {2})
local lrs = {}
for _ = 1, 7 do
  lrs[#lrs + 1] = ("%.3f"):format(opt.lr)
  sched:step()
end
print(table.concat(lrs, " "))   --> 0.010 0.055 0.100 0.085 0.050 0.015 0.000]=]},

  {name = "LRScheduler:step", sig = "sched:step()", group = "scheduler methods",
   doc = [[Moves the schedule one epoch on and sets opt.lr to its learning
rate there. Call it after opt:step(), once per epoch or once per batch,
as the schedule counts. It takes no argument: PyTorch's deprecated epoch
argument is an error. As torch.optim.lr_scheduler.LRScheduler.step.]]},

  {name = "LRScheduler:get_last_lr", sig = "sched:get_last_lr()", group = "scheduler methods",
   doc = [[The learning rate the last step (or the making) set, in a list of
one: a qkv optimizer is one parameter group, so sched:get_last_lr()[1] is
what PyTorch's get_last_lr()[0] is. The list is new at each call, so
changing it changes nothing. As
torch.optim.lr_scheduler.LRScheduler.get_last_lr.]]},

  {name = "LRScheduler:state_dict", sig = "sched:state_dict()", group = "scheduler methods",
   doc = [[The scheduler's state as torch's state_dict() gives it: last_epoch,
_step_count, base_lrs and _last_lr (lists of one, for qkv's one parameter
group), the class's settings (step_size, gamma, T_max...), and a
SequentialLR's schedulers' own under _schedulers. LambdaLR's function is
not in it, as in PyTorch: the scheduler that loads it keeps its own. Save it
with the optimizer's state_dict (qkv.save) to resume a run. As
torch.optim.lr_scheduler.LRScheduler.state_dict.]]},

  {name = "LRScheduler:load_state_dict", sig = "sched:load_state_dict(sd)", group = "scheduler methods",
   doc = [[Sets the scheduler from sd, as sched:state_dict() gave it, so that
its next step continues the saved run (load the optimizer's state_dict too:
it holds the learning rate). Every entry is checked before any is set: an
unknown name is an error naming the nearest, and so is a value of the wrong
kind. As torch.optim.lr_scheduler.LRScheduler.load_state_dict.]]},

  {name = "qkv.nn.clip_grad_norm_", sig = "qkv.nn.clip_grad_norm_(params, max_norm [, norm_type [, opts]])",
   group = "functions",
   doc = [[Scales the gradients of params (a module, a tensor, or a list of
tensors or of {name, tensor} pairs; those without a .grad are left out) in
place so that their total norm is at most max_norm, and returns the total
norm before clipping as a 0-d tensor of the gradients' dtype. The total is
the norm_type-norm (2; math.huge for the largest |g|) of the gradients'
norms, and each gradient is multiplied by min(max_norm / (total + 1e-6),
1). opts (also in place of norm_type, or of max_norm: PyTorch's keywords,
clip_grad_norm_(params, {max_norm = 1})): max_norm, norm_type, error_if_nonfinite
(false: a nan or inf total scales the gradients by it, as torch's; true
makes it an error). A parameter counts once however often it is listed (a
module's shared weight, as torch's parameters(); a list with it twice,
which torch would count twice), and a gradient tensor is scaled once. Call
it between backward and opt:step(). As torch.nn.utils.clip_grad_norm_.]],
   example = [=[local p = qkv.tensor({0, 0}, "float64"):requires_grad_()
p.grad = qkv.tensor({3, 4}, "float64")
print(qkv.nn.clip_grad_norm_({p}, 1))   --> tensor(5., dtype=float64)
print(p.grad)                           --> tensor([0.6000, 0.8000], dtype=float64)]=]},

  {name = "Optimizer:step", sig = "opt:step()", group = "optimizer methods",
   doc = [[Updates every parameter that has a .grad from it, in place and
outside the graph; parameters without one are left alone. Call it after
backward. As torch.optim.Optimizer.step.]]},

  {name = "Optimizer:zero_grad", sig = "opt:zero_grad()", group = "optimizer methods",
   doc = [[Sets the .grad of every parameter of opt to nil, so that the next
backward starts from zero. Gradients otherwise accumulate. As
torch.optim.Optimizer.zero_grad.]]},

  {name = "Optimizer:state_dict", sig = "opt:state_dict()", group = "optimizer methods",
   doc = [[The optimizer's state as torch.optim's state_dict() gives it:
{state = {[i] = {...}}, param_groups = {{lr = ..., ..., params = {1, ...,
n}}}}, i a parameter's place counted from 1 (PyTorch counts from 0), each
entry under PyTorch's names: Adam's and AdamW's step (a number here, a
0-d tensor in PyTorch), exp_avg, exp_avg_sq and with amsgrad
max_exp_avg_sq; SGD's momentum_buffer. The tensors are the optimizer's
own, as PyTorch's are; qkv.save writes the whole table. As
torch.optim.Optimizer.state_dict.]],
   example = [=[local p = qkv.tensor({1, 2}, "float64"):requires_grad_()
local opt = qkv.optim.Adam({p}, {lr = 0.1})
p.grad = qkv.tensor({1, 1}, "float64")
opt:step()
local sd = opt:state_dict()
print(sd.state[1].step, sd.param_groups[1].lr, sd.state[1].exp_avg)
--> 1	0.1	tensor([0.1000, 0.1000], dtype=float64)]=]},

  {name = "Optimizer:load_state_dict", sig = "opt:load_state_dict(sd)", group = "optimizer methods",
   doc = [[Sets the optimizer's options and each parameter's state from sd,
as opt:state_dict() gives it (read back from qkv.load, say): training
resumes step for step where it stopped. The whole of sd is checked first
-- one group with every option of this optimizer and valid values, params
1..n for its n parameters, each state entry's names and its tensors'
shapes -- so a misfit is an error naming it and changes nothing; the
state's tensors are copied to each parameter's dtype and device. As
torch.optim.Optimizer.load_state_dict.]]},

  {name = "qkv.test.gradcheck", sig = "qkv.test.gradcheck(f, inputs [, opts])",
   group = "assertions",
   doc = [[Checks the gradient qkv.autograd computes for f at the float64
tensors inputs against central finite differences: for a fixed random v of
f's output shape, each element of the gradient of sum(f(...) * v) must be
within atol + rtol * |numeric| (opts: eps 1e-6, atol 1e-5, rtol 1e-3).
It fails naming the input and element, or returns true. As
torch.autograd.gradcheck.]],
   example = [=[print(qkv.test.gradcheck(function(x) return x:exp() end, {qkv.randn(3):double()}))   --> true]=]},

  {name = "qkv.autocast", sig = "qkv.autocast(opts, f, ...) or qkv.autocast(opts)", group = "mixed precision",
   doc = [[Runs f(...) in an autocast region and returns its results, or,
without f, opens a region that lasts until the returned object is closed
(local ac <close> = qkv.autocast{...}: Lua's to-be-closed variables are
Python's with). opts: device_type ("cpu" or "cuda", required), dtype
("bfloat16", the CPU's default, or "float16", the GPU's), enabled (true;
false turns an enclosing region off), cache_enabled (true: a
parameter's cast is made once and shared until the outermost region
closes, as PyTorch's). Inside, the products (matmul, mm, bmm,
project and F.linear, scores, attention and F.scaled_dot_product_attention)
run in dtype and the losses in float32; on the GPU also PyTorch's CUDA
float32 list (softmax, log_softmax, layer_norm, exp, log, sum, ...). The
casts are recorded by autograd, so gradients reach float32 parameters in
float32. Regions belong to a coroutine. As torch.autocast.]],
   example = [=[local x, w = qkv.randn(4, 8), qkv.randn(8, 3)
print(qkv.autocast({device_type = "cpu"}, function() return x:matmul(w) end).dtype)   --> bfloat16]=]},

  {name = "qkv.is_autocast_enabled", sig = "qkv.is_autocast_enabled([device_type])", group = "mixed precision",
   doc = [[Whether an autocast region is on here for device_type ("cpu" or
"cuda"; without it, "cuda", as PyTorch's). A region opened with enabled =
false, or none, gives false. As torch.is_autocast_enabled.]],
   example = [=[print(qkv.autocast({device_type = "cpu"}, qkv.is_autocast_enabled, "cpu"))   --> true]=]},

  {name = "qkv.get_autocast_dtype", sig = "qkv.get_autocast_dtype(device_type)", group = "mixed precision",
   doc = [[The dtype an autocast region runs the products in on device_type:
the innermost region's, else the default ("bfloat16" on the CPU, "float16"
on the GPU). A region opened with enabled = false reads as the default.
As torch.get_autocast_dtype.]],
   example = [=[print(qkv.get_autocast_dtype("cpu"))   --> bfloat16]=]},

  {name = "qkv.set_float32_matmul_precision", sig = "qkv.set_float32_matmul_precision(precision)",
   group = "mixed precision",
   doc = [[How float32 products (matmul, mm, bmm, project, F.linear,
scores, and the products of the unfused attention path) compute from now
on, in every coroutine: "highest" (the default) in float32; "medium" as
products of the operands rounded to bfloat16 with float32 sums; "high" as
six products of each operand's three exact bfloat16 parts, which errs about
as float32 does. As PyTorch's, "medium" and "high" take the faster path
only where there is one (on the CPU: AVX-512's bfloat16 products for
"medium", the tile unit (AMX) for both; on the GPU both mean TF32, as
qkv.cuda.allow_tf32(true)); elsewhere they compute as "highest". The fused
attention kernels stay float32. Anything else is an error. As
torch.set_float32_matmul_precision.]],
   example = [=[qkv.set_float32_matmul_precision("high")
print(qkv.get_float32_matmul_precision())   --> high
qkv.set_float32_matmul_precision("highest")
print(pcall(qkv.set_float32_matmul_precision, "low"))
--> false	qkv.set_float32_matmul_precision: precision must be "highest", "high" or "medium", got low]=]},

  {name = "qkv.get_float32_matmul_precision", sig = "qkv.get_float32_matmul_precision()",
   group = "mixed precision",
   doc = [[The float32 matmul precision set last: "highest", "high" or
"medium" (see qkv.set_float32_matmul_precision). It starts as "highest", so
numerics never change unasked. qkv.cuda.allow_tf32(true) sets it to
"high" and false to "highest", as PyTorch's allow_tf32 does. As
torch.get_float32_matmul_precision.]],
   example = [=[print(qkv.get_float32_matmul_precision())   --> highest]=]},
}
