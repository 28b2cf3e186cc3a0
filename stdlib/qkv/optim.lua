-- optim.lua: qkv.optim, PyTorch's optimizers for tensors that require grad.
--
--   opt = qkv.optim.SGD(params, {lr = 0.01, momentum = 0, dampening = 0,
--                                weight_decay = 0, nesterov = false, maximize = false})
--   opt = qkv.optim.Adam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8,
--                                 weight_decay = 0, amsgrad = false, maximize = false})
--   opt = qkv.optim.AdamW(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8,
--                                  weight_decay = 1e-2, amsgrad = false, maximize = false})
--   opt:step()       updates each parameter from its .grad (those with none
--                    are left alone), in place and outside the graph
--   opt:zero_grad()  sets every parameter's .grad to nil
--
-- params is a list of tensors, a qkv.nn module, or m:parameters()'s list of
-- {name, tensor}. Each parameter is a leaf that requires grad, listed once
-- (PyTorch: "some parameters appear in more than one parameter group").
-- The updates are PyTorch's, step for step; each parameter keeps its own
-- state, Adam's step count included, so one that had no gradient for a
-- while is bias-corrected as torch.optim.Adam corrects it.

local qkv = require "qkv"
local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

local O = {}

local function fail(fmt, ...) error(string.format(fmt, ...), caller(SOURCE, true)) end

local function is_open(t) return pcall(function() return t.ndim end) end

-- the tensors of params: a qkv.nn module's, or a list read raw (no
-- metamethod of it runs) of tensors or {name, tensor} pairs; and the
-- module, when it is one
local function param_list(fname, params)
  if type(params) ~= "table" then fail("%s: params must be a list of tensors or a module, got %s", fname, type(params)) end
  local mt, module = getmetatable(params), nil
  if mt and rawget(mt, "__name") and type(params.parameters) == "function" then
    module, params = params, params:parameters()
  end
  local out, seen = {}, {}
  for i = 1, rawlen(params) do
    local p = rawget(params, i)
    local t = qkv.is_tensor(p) and p or type(p) == "table" and rawget(p, 2)
    if not qkv.is_tensor(t) then fail("%s: parameter %d is a %s, not a tensor", fname, i, type(p)) end
    if not is_open(t) then fail("%s: parameter %d is a closed tensor", fname, i) end
    if not t.requires_grad then fail("%s: parameter %d does not require grad", fname, i) end
    if not t.is_leaf then
      fail("%s: parameter %d is the result of %s, not a leaf; optimize the tensor it was made from",
           fname, i, tostring(t.grad_fn))
    end
    if seen[t] then
      fail("%s: parameter %d is parameter %d again: each parameter may be listed once", fname, i, seen[t])
    end
    seen[t] = i
    out[#out + 1] = t
  end
  if #out == 0 then fail("%s: no parameters", fname) end
  return out, module
end

local function number(fname, opts, key, default, ok, range)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" or not ok(v) then
    fail("%s: option '%s' must be a number %s, got %s", fname, key, range, tostring(v))
  end
  return v
end

local function positive(v) return v > 0 end
local function nonneg(v) return v >= 0 end
local function unit(v) return v >= 0 and v < 1 end
local function closed_unit(v) return v >= 0 and v <= 1 end

local Optimizer = {}
Optimizer.__index = Optimizer
O.Optimizer = Optimizer              -- what every optimizer has (for qkv.doc)

function Optimizer:zero_grad()
  for _, p in ipairs(self.params) do p.grad = nil end
end

-- the gradient step() uses for parameter i (nil for none): .grad, negated
-- to maximize, with weight decay added as PyTorch adds it
local function gradient(self, i, p)
  if not is_open(p) then fail("step: parameter %d is a closed tensor", i) end
  local g = p.grad
  if g == nil then return nil end
  if not is_open(g) then fail("step: the grad of parameter %d is a closed tensor", i) end
  if self.maximize then g = -g end
  if self.weight_decay ~= 0 and not self.decoupled_weight_decay then g = g + p * self.weight_decay end
  return g
end

-- an optimizer made from a module steps that module's tensors: if they
-- were replaced since (m:to, or an assignment), stepping the old ones
-- would leave the model where it is, silently
local function check_module(self)
  local now = self.module:parameters()
  for i, p in ipairs(self.params) do
    local q = now[i]
    if q == nil or not rawequal(q[2], p) then
      fail("step: the module's parameter '%s' is not the tensor this optimizer was made with "
           .. "(replaced by m:to or an assignment?): make the optimizer after moving the model",
           q and q[1] or "#" .. i)
    end
  end
  if #now ~= #self.params then
    fail("step: the module has %d parameters, but had %d when this optimizer was made", #now, #self.params)
  end
end

function Optimizer:step()
  if self.module then check_module(self) end
  qkv.no_grad(function()
    for i, p in ipairs(self.params) do
      local g = gradient(self, i, p)
      if g ~= nil then self:update(i, p, g) end
    end
  end)
end

-- an optimizer of class cls named fname over params, with the options
-- known (each else an error naming it; those of flags booleans); lr
-- (default lr), weight_decay and maximize read. Returns it and opts.
local function build(cls, fname, params, opts, known, flags, lr)
  -- each known option read once, before the parameters are checked: a
  -- table's metamethods may run here (and close a tensor), not after
  local msg
  msg, opts = qkv._checkopts(fname, opts, known, flags)
  if msg then error(msg, caller(SOURCE, true)) end
  local list, module = param_list(fname, params)
  local o = setmetatable({params = list, module = module, state = {}}, cls)
  o.lr = number(fname, opts, "lr", lr, positive, "> 0")
  o.weight_decay = number(fname, opts, "weight_decay", 0, nonneg, ">= 0")
  o.maximize = opts.maximize == true
  return o, opts
end

local SGD = setmetatable({}, {__index = Optimizer})
SGD.__index = SGD
SGD.__name = "SGD"

function O.SGD(params, opts)
  local o
  o, opts = build(SGD, "SGD", params, opts, {"lr", "momentum", "dampening", "weight_decay",
                                             "nesterov", "maximize"}, {"nesterov", "maximize"}, 0.01)
  o.momentum = number("SGD", opts, "momentum", 0, unit, "in [0, 1)")
  o.dampening = number("SGD", opts, "dampening", 0, closed_unit, "in [0, 1]")
  o.nesterov = opts.nesterov == true
  if o.nesterov and (o.momentum == 0 or o.dampening ~= 0) then
    fail("SGD: nesterov needs a momentum and zero dampening, got momentum %g, dampening %g",
         o.momentum, o.dampening)
  end
  return o
end

-- torch.optim.SGD: buf = g at the first step, then momentum * buf +
-- (1 - dampening) * g; nesterov steps by g + momentum * buf
function SGD:update(i, p, g)
  if self.momentum ~= 0 then
    local buf = self.state[i]
    if buf then buf:mul_(self.momentum):add_(g * (1 - self.dampening))
    else buf = g:clone() end
    self.state[i] = buf
    g = self.nesterov and g + buf * self.momentum or buf
  end
  p:sub_(g * self.lr)
end

local Adam = setmetatable({}, {__index = Optimizer})
Adam.__index = Adam
Adam.__name = "Adam"
Adam.decoupled_weight_decay = false

-- Adam, or AdamW (cls; fname names it in errors), whose weight_decay
-- defaults to 1e-2 and is decoupled from the gradient; Adam takes torch's
-- flag for that too
local function adam(cls, fname, params, opts)
  local o
  local known = {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"}
  local flags = {"amsgrad", "maximize"}
  if cls == Adam then
    known[#known + 1], flags[#flags + 1] = "decoupled_weight_decay", "decoupled_weight_decay"
  end
  o, opts = build(cls, fname, params, opts, known, flags, 1e-3)
  o.decoupled_weight_decay = cls.decoupled_weight_decay or opts.decoupled_weight_decay == true
  if opts.weight_decay == nil and cls ~= Adam then o.weight_decay = 1e-2 end
  o.eps = number(fname, opts, "eps", 1e-8, positive, "> 0")
  o.amsgrad = opts.amsgrad == true
  local betas = opts.betas or {0.9, 0.999}
  local b1, b2 = type(betas) == "table" and rawget(betas, 1), type(betas) == "table" and rawget(betas, 2)
  if not (type(b1) == "number" and unit(b1) and type(b2) == "number" and unit(b2)) then
    fail("%s: option 'betas' must be two numbers in [0, 1), got %s", fname, tostring(betas))
  end
  o.b1, o.b2 = b1, b2
  return o
end

function O.Adam(params, opts) return adam(Adam, "Adam", params, opts) end

-- torch.optim.AdamW: Adam's update (Adam:update), with the weight decay
-- taken out of the gradient and applied to the parameter, p * (1 - lr *
-- weight_decay), before each step (decoupled_weight_decay, as torch's
-- Adam names the flag)
local AdamW = setmetatable({}, {__index = Adam})
AdamW.__index = AdamW
AdamW.__name = "AdamW"
AdamW.decoupled_weight_decay = true

function O.AdamW(params, opts) return adam(AdamW, "AdamW", params, opts) end

-- torch.optim.lr_scheduler's StepLR, CosineAnnealingLR, LambdaLR, LinearLR
-- and SequentialLR, which set opt.lr (stdlib/qkv/lr_scheduler.lua)
O.lr_scheduler = require "qkv.lr_scheduler"

-- whether qkv._adam (one pass, vm/cpu/optim.c) can step p: float32 or
-- float64, contiguous, its gradient of its shape and dtype
local function fusable(p, g)
  return (p.dtype == "float32" or p.dtype == "float64") and g.dtype == p.dtype and
         p:is_contiguous() and p.device == g.device
end

-- torch.optim.Adam (and AdamW), with each parameter's own step count t;
-- one fused pass where it can (qkv._adam: the same formula, in double),
-- else these ops
function Adam:update(i, p, g)
  local s = self.state[i]
  if not s then
    s = {t = 0, m = qkv.zeros(p.shape, p.dtype, p.device), v = qkv.zeros(p.shape, p.dtype, p.device)}
    if self.amsgrad then s.vmax = qkv.zeros(p.shape, p.dtype, p.device) end
    self.state[i] = s
  end
  s.t = s.t + 1
  local decay = self.decoupled_weight_decay and self.lr * self.weight_decay or 0
  if fusable(p, g) then
    qkv._adam(p, g, s.m, s.v, s.vmax or nil, self.lr, self.b1, self.b2, self.eps, decay,
              1 - self.b1 ^ s.t, 1 - self.b2 ^ s.t)
    return
  end
  if decay ~= 0 then p:mul_(1 - decay) end
  s.m:mul_(self.b1):add_(g * (1 - self.b1))
  s.v:mul_(self.b2):add_(g * g * (1 - self.b2))
  local v = s.v
  if s.vmax then
    s.vmax:copy_(qkv.maximum(s.vmax, s.v))
    v = s.vmax
  end
  local denom = (v / (1 - self.b2 ^ s.t)):sqrt() + self.eps
  p:sub_(s.m / denom * (self.lr / (1 - self.b1 ^ s.t)))
end

return qkv._strict(O, "qkv.optim", "class or function")
