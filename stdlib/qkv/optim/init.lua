-- optim/init.lua: qkv.optim, PyTorch's optimizers for tensors that require grad.
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
-- params is a qkv.nn module, a list of tensors (m:parameters()), or a list
-- of {name, tensor} pairs. Each parameter is a leaf that requires grad, listed once
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

local function positive(v) return type(v) == "number" and v > 0 end
local function nonneg(v) return type(v) == "number" and v >= 0 end
local function unit(v) return type(v) == "number" and v >= 0 and v < 1 end
local function closed_unit(v) return type(v) == "number" and v >= 0 and v <= 1 end
local function boolean(v) return type(v) == "boolean" end
local function betas_ok(v)
  return type(v) == "table" and unit(rawget(v, 1)) and unit(rawget(v, 2))
end

-- every option: the test its value passes, what the message says it must be
local CHECKS = {
  lr = {nonneg, "a number >= 0"}, weight_decay = {nonneg, "a number >= 0"},
  momentum = {unit, "a number in [0, 1)"}, dampening = {closed_unit, "a number in [0, 1]"},
  eps = {positive, "a number > 0"}, betas = {betas_ok, "two numbers in [0, 1)"},
  nesterov = {boolean, "a boolean"}, maximize = {boolean, "a boolean"},
  amsgrad = {boolean, "a boolean"}, decoupled_weight_decay = {boolean, "a boolean"},
}

-- what a refused value was: a number's or a string's value (a flag's
-- type, as qkv._checkopts says it)
local function shown(v, flag)
  if not flag and (type(v) == "number" or type(v) == "string") then return tostring(v) end
  return type(v)
end

-- the options of optimizer o, each checked (else an error naming fname,
-- the class at the making, step at a step, and the option), read once
-- into a plain table: what step uses is what was checked, so an option set
-- after the making (opt.lr = x, as PyTorch's param_groups[0]["lr"]) is
-- checked at the next step, before anything moves
local function options(o, fname)
  local cls = getmetatable(o)
  local cfg = {}
  for _, k in ipairs(cls._options) do
    local v = o[k]
    if not CHECKS[k][1](v) then
      fail("%s: option '%s' must be %s, got %s", fname, k, CHECKS[k][2], shown(v, CHECKS[k][1] == boolean))
    end
    cfg[k] = v
  end
  if cfg.betas then cfg.b1, cfg.b2 = rawget(cfg.betas, 1), rawget(cfg.betas, 2) end
  if cfg.decoupled_weight_decay == nil then cfg.decoupled_weight_decay = cls.decoupled_weight_decay end
  if cls._check then cls._check(cfg, fname) end
  return cfg
end

-- o.k = v for a k that o does not have: an option of its class (one set to
-- nil before), initial_lr (the schedulers'), or an error naming the closest
local function newindex(o, k, v)
  local cls = getmetatable(o)
  if k ~= "initial_lr" and not (type(k) == "string" and k:sub(1, 1) == "_") then
    local msg = qkv._checkopts(cls.__name, {[k] = true}, cls._options)
    if msg then error(msg, 2) end
  end
  rawset(o, k, v)
end

local Optimizer = {}
Optimizer.__index = Optimizer
O.Optimizer = Optimizer              -- what every optimizer has (for qkv.doc)

function Optimizer:zero_grad()
  for _, p in ipairs(self.params) do p.grad = nil end
end

-- the gradient step() uses for parameter i (nil for none): .grad, negated
-- to maximize, with weight decay added as PyTorch adds it
local function gradient(cfg, i, p)
  if not is_open(p) then fail("step: parameter %d is a closed tensor", i) end
  local g = p.grad
  if g == nil then return nil end
  if not is_open(g) then fail("step: the grad of parameter %d is a closed tensor", i) end
  if cfg.maximize then g = -g end
  if cfg.weight_decay ~= 0 and not cfg.decoupled_weight_decay then g = g + p * cfg.weight_decay end
  return g
end

-- an optimizer made from a module steps that module's tensors: if they
-- were replaced since (m:to, or an assignment), stepping the old ones
-- would leave the model where it is, silently
local function check_module(self)
  local now = require("qkv.nn.module").params_of(self.module, "step", true)
  if #now ~= #self.params then
    fail("step: the module has %d parameters, but had %d when this optimizer was made", #now, #self.params)
  end
  for i, p in ipairs(self.params) do
    local q = now[i]
    if q == nil or not rawequal(q[2], p) then
      fail("step: the module's parameter '%s' is not the tensor this optimizer was made with "
           .. "(replaced by m:to or an assignment?): make the optimizer after moving the model",
           q and q[1] or "#" .. i)
    end
  end
end

function Optimizer:step()
  local cfg = options(self, "step")
  if self.module then check_module(self) end
  qkv.no_grad(function()
    for i, p in ipairs(self.params) do
      local g = gradient(cfg, i, p)
      if g ~= nil then self:update(i, p, g, cfg) end
    end
  end)
end

-- a class of optimizers named name, with its options (defaults: the
-- values when not given; flags: those that are booleans) and its check of
-- them together (check(cfg, fname), or nil)
local function class(name, base, known, defaults, check)
  local c = setmetatable({}, {__index = base or Optimizer})
  c.__index, c.__newindex, c.__name = c, newindex, name
  c._options, c._defaults, c._check = known, defaults, check
  local flags = {}
  for _, k in ipairs(known) do
    if CHECKS[k][2] == "a boolean" then flags[#flags + 1] = k end
  end
  c._flags = flags
  return c
end

-- an optimizer of class cls over params, its options from opts (each
-- known, else an error naming the closest) or the class's defaults, all
-- checked
local function build(cls, params, opts)
  local fname = cls.__name
  -- each known option read once, before the parameters are checked: a
  -- table's metamethods may run here (and close a tensor), not after
  local msg
  msg, opts = qkv._checkopts(fname, opts, cls._options, cls._flags)
  if msg then error(msg, caller(SOURCE, true)) end
  local list, module = param_list(fname, params)
  local o = {params = list, module = module, state = {}}
  for _, k in ipairs(cls._options) do
    local v = opts[k]
    if v == nil then v = cls._defaults[k] end
    if k == "betas" and type(v) == "table" then v = {rawget(v, 1), rawget(v, 2)} end
    o[k] = v
  end
  setmetatable(o, cls)
  options(o, fname)
  return o
end

local SGD = class("SGD", nil, {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"},
                  {lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false,
                   maximize = false},
                  function(cfg, fname)
  if cfg.nesterov and (cfg.momentum == 0 or cfg.dampening ~= 0) then
    fail("%s: nesterov needs a momentum and zero dampening, got momentum %g, dampening %g",
         fname, cfg.momentum, cfg.dampening)
  end
end)

function O.SGD(params, opts) return build(SGD, params, opts) end

-- torch.optim.SGD: buf = g at the first step, then momentum * buf +
-- (1 - dampening) * g; nesterov steps by g + momentum * buf
function SGD:update(i, p, g, cfg)
  if cfg.momentum ~= 0 then
    local buf = self.state[i]
    if buf then buf:mul_(cfg.momentum):add_(g * (1 - cfg.dampening))
    else buf = g:clone() end
    self.state[i] = buf
    g = cfg.nesterov and g + buf * cfg.momentum or buf
  end
  p:sub_(g * cfg.lr)
end

-- Adam, and AdamW, whose weight_decay defaults to 1e-2 and is decoupled
-- from the gradient; Adam takes torch's flag for that too
local ADAM = {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"}
local function adam_defaults(weight_decay, decoupled)
  return {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = weight_decay, amsgrad = false,
          maximize = false, decoupled_weight_decay = decoupled}
end

local Adam = class("Adam", nil, {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize",
                                 "decoupled_weight_decay"}, adam_defaults(0, false))

function O.Adam(params, opts) return build(Adam, params, opts) end

-- torch.optim.AdamW: Adam's update (Adam:update), with the weight decay
-- taken out of the gradient and applied to the parameter, p * (1 - lr *
-- weight_decay), before each step (decoupled_weight_decay, as torch's
-- Adam names the flag, always on)
local AdamW = class("AdamW", Adam, ADAM, adam_defaults(1e-2))
AdamW.decoupled_weight_decay = true

function O.AdamW(params, opts) return build(AdamW, params, opts) end

-- torch.optim.lr_scheduler's StepLR, CosineAnnealingLR, LambdaLR, LinearLR
-- and SequentialLR, which set opt.lr (optim/lr_scheduler.lua)
O.lr_scheduler = require "qkv.optim.lr_scheduler"

-- whether qkv._adam (one pass, vm/cpu/optim.c) can step p: float32 or
-- float64, contiguous, its gradient of its shape and dtype
local function fusable(p, g)
  return (p.dtype == "float32" or p.dtype == "float64") and g.dtype == p.dtype and
         p:is_contiguous() and p.device == g.device
end

-- torch.optim.Adam (and AdamW), with each parameter's own step count t;
-- one fused pass where it can (qkv._adam: the same formula, in double),
-- else these ops. amsgrad turned on later starts its running maximum then.
function Adam:update(i, p, g, cfg)
  local s = self.state[i]
  if not s then
    s = {t = 0, m = qkv.zeros(p.shape, p.dtype, p.device), v = qkv.zeros(p.shape, p.dtype, p.device)}
    self.state[i] = s
  end
  if cfg.amsgrad and not s.vmax then s.vmax = qkv.zeros(p.shape, p.dtype, p.device) end
  local vmax = cfg.amsgrad and s.vmax or nil
  s.t = s.t + 1
  local b1, b2, lr = cfg.b1, cfg.b2, cfg.lr
  local decay = cfg.decoupled_weight_decay and lr * cfg.weight_decay or 0
  if fusable(p, g) then
    qkv._adam(p, g, s.m, s.v, vmax, lr, b1, b2, cfg.eps, decay, 1 - b1 ^ s.t, 1 - b2 ^ s.t)
    return
  end
  if decay ~= 0 then p:mul_(1 - decay) end
  s.m:mul_(b1):add_(g * (1 - b1))
  s.v:mul_(b2):add_(g * g * (1 - b2))
  local v = s.v
  if vmax then
    vmax:copy_(qkv.maximum(vmax, s.v))
    v = vmax
  end
  local denom = (v / (1 - b2 ^ s.t)):sqrt() + cfg.eps
  p:sub_(s.m / denom * (lr / (1 - b1 ^ s.t)))
end

---------------------------------------------------------------- state_dict

-- each parameter's state under torch.optim's names: Adam's
-- {step, exp_avg, exp_avg_sq[, max_exp_avg_sq]}, SGD's {momentum_buffer};
-- internally Adam's is {t, m, v, vmax} and SGD's the buffer itself
local STATE = {
  Adam = {step = "t", exp_avg = "m", exp_avg_sq = "v", max_exp_avg_sq = "vmax"},
  SGD = {momentum_buffer = true},
}
local function state_names(cls) return cls == SGD and STATE.SGD or STATE.Adam end

-- the optimizer as torch.optim's state_dict() gives it: {state =
-- {[i] = {...}}, param_groups = {{option = value, ..., params = {1, ...,
-- n}}}}, i the parameter's place from 1 (qkv's count; PyTorch's from 0);
-- Adam's step a number (PyTorch's a 0-d tensor). The tensors are the
-- optimizer's own, as PyTorch's are: qkv.save writes them, clone to keep
function Optimizer:state_dict()
  local cls = getmetatable(self)
  local group, ids = {}, {}
  for _, k in ipairs(cls._options) do
    local v = self[k]
    group[k] = type(v) == "table" and {rawget(v, 1), rawget(v, 2)} or v
  end
  if rawget(self, "initial_lr") ~= nil then group.initial_lr = rawget(self, "initial_lr") end
  for i = 1, #self.params do ids[i] = i end
  group.params = ids
  local state = {}
  for i, s in pairs(self.state) do
    if cls == SGD then state[i] = {momentum_buffer = s}
    else
      local e = {}
      for name, mine in pairs(STATE.Adam) do e[name] = s[mine] end
      state[i] = e
    end
  end
  return {state = state, param_groups = {group}}
end

-- sd read raw and checked whole before anything changes: one group of
-- this optimizer's options (each there, each valid) and params 1..n; each
-- state entry's names and its tensors' shapes; then the options set and
-- the state copied (cloned, to each parameter's dtype and device, as
-- torch.optim's load_state_dict casts it)
function Optimizer:load_state_dict(sd)
  local cls = getmetatable(self)
  local fname = "load_state_dict"
  if type(sd) ~= "table" then fail("%s: the state_dict must be a table, got %s", fname, type(sd)) end
  local msg = qkv._checkopts(fname, sd, {"state", "param_groups"})
  if msg then error(msg, caller(SOURCE, true)) end
  local groups, state = rawget(sd, "param_groups"), rawget(sd, "state")
  if type(groups) ~= "table" or rawlen(groups) ~= 1 or type(rawget(groups, 1)) ~= "table" then
    fail("%s: param_groups must be a list of one group (qkv's optimizers have one), got %s",
         fname, type(groups) == "table" and rawlen(groups) .. " groups" or type(groups))
  end
  local group, cfg = rawget(groups, 1), {}
  local known = {"params", "initial_lr"}
  for _, k in ipairs(cls._options) do known[#known + 1] = k end
  msg = qkv._checkopts(fname, group, known)
  if msg then error(msg, caller(SOURCE, true)) end
  for _, k in ipairs(cls._options) do
    local v = rawget(group, k)
    if v == nil then fail("%s: the group has no '%s'", fname, k) end
    if not CHECKS[k][1](v) then
      fail("%s: option '%s' must be %s, got %s", fname, k, CHECKS[k][2], shown(v, CHECKS[k][1] == boolean))
    end
    cfg[k] = type(v) == "table" and {rawget(v, 1), rawget(v, 2)} or v
  end
  local ilr = rawget(group, "initial_lr")
  if ilr ~= nil and not nonneg(ilr) then fail("%s: initial_lr must be a number >= 0", fname) end
  local ids, n = rawget(group, "params"), #self.params
  if type(ids) ~= "table" or rawlen(ids) ~= n then
    fail("%s: the group's params must list the %d parameters, got %s", fname, n,
         type(ids) == "table" and rawlen(ids) .. " entries" or type(ids))
  end
  for i = 1, n do
    if rawget(ids, i) ~= i then fail("%s: the group's params[%d] must be %d", fname, i, i) end
  end
  if cls._check then
    local c = {}
    for k, v in pairs(cfg) do c[k] = v end
    cls._check(c, fname)
  end
  if type(state) ~= "table" then fail("%s: state must be a table, got %s", fname, type(state)) end
  local names, new, list = state_names(cls), {}, {}
  for name in pairs(names) do list[#list + 1] = name end
  table.sort(list)
  for i, e in next, state do
    local p = math.type(i) == "integer" and self.params[i]
    if not p then fail("%s: state has an entry %s, not a parameter's place 1..%d", fname, tostring(i), n) end
    if type(e) ~= "table" then fail("%s: state[%d] must be a table, got %s", fname, i, type(e)) end
    msg = qkv._checkopts(fname, e, list)
    if msg then error(msg, caller(SOURCE, true)) end
    local s = {}
    for _, name in ipairs(list) do
      local v = rawget(e, name)
      if name == "step" then
        if math.type(v) ~= "integer" and not (type(v) == "number" and v >= 0 and v == math.floor(v)) then
          fail("%s: state[%d].step must be a whole number >= 0, got %s", fname, i, shown(v))
        end
        s.t = math.tointeger(v)
      elseif v ~= nil then
        if not qkv.is_tensor(v) or not is_open(v) then
          fail("%s: state[%d].%s must be a tensor, got %s", fname, i, name, qkv.is_tensor(v) and "a closed tensor" or type(v))
        end
        if v.shape ~= p.shape then
          fail("%s: state[%d].%s is %s but parameter %d is %s", fname, i, name, tostring(v.shape), i, tostring(p.shape))
        end
        s[names[name] == true and name or names[name]] = v
      end
    end
    if cls == SGD then
      if s.momentum_buffer == nil then fail("%s: state[%d] has no momentum_buffer", fname, i) end
    elseif s.t == nil or s.m == nil or s.v == nil then
      fail("%s: state[%d] needs step, exp_avg and exp_avg_sq", fname, i)
    end
    new[i] = s
  end
  -- checked: now set, the tensors copied to each parameter's dtype and device
  qkv.no_grad(function()
    local st = {}
    for i, s in pairs(new) do
      local p = self.params[i]
      local function own(t) return t and t:to(p.dtype):to(p.device):clone() end
      if cls == SGD then st[i] = own(s.momentum_buffer)
      else st[i] = {t = s.t, m = own(s.m), v = own(s.v), vmax = own(s.vmax)} end
    end
    self.state = st
  end)
  for k, v in pairs(cfg) do self[k] = v end
  rawset(self, "initial_lr", ilr)
  return self
end

-- a method called with '.' (opt.step()) says so
local methods = require "qkv.methods"
methods.guard(Optimizer, "opt", "optimizer")
for _, cls in ipairs{SGD, Adam, AdamW} do methods.guard(cls, "opt") end

return qkv._strict(O, "qkv.optim", "class or function")
