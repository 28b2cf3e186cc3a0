-- doc/amp.lua: qkv.doc entries of qkv.amp (stdlib/qkv/amp/): GradScaler
-- and its methods.

return {
  {name = "qkv.amp.GradScaler", sig = "qkv.amp.GradScaler([device] [, opts])", group = "loss scaling",
   doc = [=[A loss scaler for float16 training, as torch.amp.GradScaler: scaler:scale(loss)
multiplies the loss by the scale so that small float16 gradients do not
flush to zero, scaler:step(opt) divides the gradients back and steps unless
one of them is inf or NaN (the step is then skipped), and scaler:update()
halves the scale after a skipped step and doubles it after growth_interval
steps in a row without. device is "cpu" or "cuda" (PyTorch's default,
"cuda": without a GPU that is an error, where PyTorch warns and disables),
also as opts.device; opts: init_scale (2^16), growth_factor (2, > 1),
backoff_factor (0.5, in (0, 1)), growth_interval (2000) and enabled (true;
false makes every method a pass-through). The scale is a float32, rounded
and updated as PyTorch's, so a run matches PyTorch's step for step.]=],
   example = [=[local w = qkv.tensor({1, 2}):requires_grad_()
local opt = qkv.optim.SGD({w}, {lr = 0.1})
local scaler = qkv.amp.GradScaler("cpu", {init_scale = 1024})
scaler:scale((w * w):sum()):backward()
print(w.grad)                 --> tensor([2048., 4096.])
scaler:step(opt)              -- the gradients unscaled to 2 and 4, then opt:step()
scaler:update()
print(w, scaler:get_scale())  --> tensor([0.8000, 1.6000], requires_grad=True)	1024.0]=]},

  {name = "GradScaler:scale", sig = "scaler:scale(outputs)", group = "scaler methods",
   doc = [[outputs multiplied by the scale: a tensor, or a list of tensors
(nested lists too), which gives a new list. A 0-d float16 or bfloat16
output (a loss) becomes float32 and a larger float16 tensor stays float16,
as PyTorch's product by its 0-d float32 scale; call backward on the result.
Anything else in outputs is an error naming where it is. A disabled scaler
returns outputs itself. As torch.amp.GradScaler.scale.]]},

  {name = "GradScaler:unscale_", sig = "scaler:unscale_(optimizer)", group = "scaler methods",
   doc = [[Divides the gradients of optimizer's parameters by the scale, in
place (multiplying by its float32 reciprocal, as PyTorch), and notes
whether any was inf or NaN. Call it before reading or clipping the
gradients (qkv.nn.clip_grad_norm_) between backward and scaler:step;
step then does not unscale them again. Calling it twice for one optimizer
before update, or after step, is an error, and so are float16 gradients
("Attempting to unscale FP16 gradients": keep the parameters in float32).
As torch.amp.GradScaler.unscale_.]]},

  {name = "GradScaler:step", sig = "scaler:step(optimizer, ...)", group = "scaler methods",
   doc = [[Unscales optimizer's gradients (unless scaler:unscale_ did since
the last update), then calls optimizer:step(...) unless one of them was inf
or NaN, and returns what it returned (nil when skipped). Several
optimizers may share one scaler: each is skipped on its own gradients. A
second step before update, a step before any scale, or one with no
gradients at all is an error. As torch.amp.GradScaler.step.]]},

  {name = "GradScaler:update", sig = "scaler:update([new_scale])", group = "scaler methods",
   doc = [[Sets the scale for the next iteration: times backoff_factor when a
step since the last update found an inf or a NaN, times growth_factor
after growth_interval steps in a row without (a growth past float32's
range is not taken), else as it was. new_scale, a number or a one-element
float tensor on the scaler's device that does not require grad, sets it
instead. Call it once per iteration, after step; without a step since the
last update it is an error. As torch.amp.GradScaler.update.]]},

  {name = "GradScaler:get_scale", sig = "scaler:get_scale()", group = "scaler methods",
   doc = [[The scale as a number: init_scale as given until the first
scaler:scale, then the float32 scale. A disabled scaler gives 1.0. As
torch.amp.GradScaler.get_scale.]]},

  {name = "GradScaler:is_enabled", sig = "scaler:is_enabled()", group = "scaler methods",
   doc = [[Whether the scaler scales: the enabled option it was made with.
A disabled one passes everything through. As
torch.amp.GradScaler.is_enabled.]]},

  {name = "GradScaler:get_growth_factor", sig = "scaler:get_growth_factor()", group = "scaler methods",
   doc = [[The factor the scale grows by after growth_interval steps without
an inf or a NaN. It is the growth_factor option (default 2). As
torch.amp.GradScaler.get_growth_factor.]]},

  {name = "GradScaler:set_growth_factor", sig = "scaler:set_growth_factor(new_factor)",
   group = "scaler methods",
   doc = [[Sets the growth factor for the updates to come. It must be a
number > 1.0, else an error. As torch.amp.GradScaler.set_growth_factor.]]},

  {name = "GradScaler:get_backoff_factor", sig = "scaler:get_backoff_factor()", group = "scaler methods",
   doc = [[The factor the scale is multiplied by after a step that found an
inf or a NaN. It is the backoff_factor option (default 0.5). As
torch.amp.GradScaler.get_backoff_factor.]]},

  {name = "GradScaler:set_backoff_factor", sig = "scaler:set_backoff_factor(new_factor)",
   group = "scaler methods",
   doc = [[Sets the backoff factor for the updates to come. It must be a
number in (0, 1), else an error. As torch.amp.GradScaler.set_backoff_factor.]]},

  {name = "GradScaler:get_growth_interval", sig = "scaler:get_growth_interval()", group = "scaler methods",
   doc = [[The number of steps in a row without an inf or a NaN after which
the scale grows. It is the growth_interval option (default 2000). As
torch.amp.GradScaler.get_growth_interval.]]},

  {name = "GradScaler:set_growth_interval", sig = "scaler:set_growth_interval(new_interval)",
   group = "scaler methods",
   doc = [[Sets the growth interval for the updates to come. It must be a
whole number >= 1, else an error. As
torch.amp.GradScaler.set_growth_interval.]]},

  {name = "GradScaler:state_dict", sig = "scaler:state_dict()", group = "scaler methods",
   doc = [[The scaler's state under PyTorch's five names: scale (a number),
growth_factor, backoff_factor, growth_interval and _growth_tracker (the
steps without an inf or a NaN since the scale last changed). A disabled
scaler gives an empty table. Take it after update, and save it with the
model's and the optimizer's (qkv.save) to resume a run. As
torch.amp.GradScaler.state_dict.]],
   example = [=[local scaler = qkv.amp.GradScaler("cpu", {growth_interval = 100})
local sd = scaler:state_dict()
print(sd.scale, sd.growth_interval, sd._growth_tracker)   --> 65536.0	100	0]=]},

  {name = "GradScaler:load_state_dict", sig = "scaler:load_state_dict(sd)", group = "scaler methods",
   doc = [[Sets the scaler from sd, as scaler:state_dict gave it, so that the
run goes on with the saved scale and growth tracker. Every entry is checked
before any is set: an unknown name is an error naming the nearest, and so
is a missing one or a value of the wrong kind. An empty sd (a disabled
scaler's) is an error, and a disabled scaler loads nothing. As
torch.amp.GradScaler.load_state_dict.]]},
}
