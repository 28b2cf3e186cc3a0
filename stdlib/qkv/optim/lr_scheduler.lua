-- optim/lr_scheduler.lua: qkv.optim.lr_scheduler, PyTorch's learning-rate
-- schedulers for qkv.optim's optimizers.
--
--   sched = qkv.optim.lr_scheduler.StepLR(opt, step_size [, {gamma = 0.1}])
--   sched = qkv.optim.lr_scheduler.CosineAnnealingLR(opt, T_max [, {eta_min = 0}])
--   sched = qkv.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
--   sched = qkv.optim.lr_scheduler.LinearLR(opt [, {start_factor = 1/3,
--                                              end_factor = 1, total_iters = 5}])
--   sched = qkv.optim.lr_scheduler.SequentialLR(opt, {s1, s2, ...}, {m1, ...})
--   (a required argument may come as a keyword too, as PyTorch's:
--   StepLR(opt, {step_size = 2, gamma = 0.5}), LambdaLR(opt, {lr_lambda = f}))
--   sched:step()          after opt:step(): the next epoch's opt.lr
--   sched:get_last_lr()   {opt.lr} as the last step (or the making) set it
--
-- A qkv optimizer is one parameter group: opt.lr is its learning rate,
-- and get_last_lr() is a list of one, as PyTorch's of one group. The
-- formulas are torch's, the recursive ones included (each step scales the
-- current opt.lr, so schedulers chain as torch's do), so the learning
-- rates equal torch's step for step. As in torch, the first scheduler made
-- on an optimizer sets opt.initial_lr = opt.lr, which every later one
-- takes as its base, and making a scheduler takes its first step (LinearLR
-- and LambdaLR change opt.lr there). Epochs count from 0, the number of
-- sched:step() calls: they are counts, not indices.

local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

local S = {}

local function fail(fmt, ...) error(string.format(fmt, ...), caller(SOURCE, true)) end

local methods = require "qkv.methods"
local is_a = methods.is_a

local function what(v)
  if type(v) ~= "table" then return type(v) end
  local mt = getmetatable(v)
  local name = type(mt) == "table" and rawget(mt, "__name")
  return type(name) == "string" and name or "table"
end

local function positive_int(fname, name, v)
  if type(v) ~= "number" or v ~= math.floor(v) or v < 1 or v == math.huge then
    fail("%s: %s must be a positive integer, got %s", fname, name, tostring(v))
  end
  return math.tointeger(v)
end

local function number_in(fname, name, v, ok, range)
  if type(v) ~= "number" or not ok(v) then
    fail("%s: option '%s' must be a number %s, got %s", fname, name, range, tostring(v))
  end
  return v
end

local function options(fname, opts, known)
  local msg
  msg, opts = require("qkv")._checkopts(fname, opts, known)
  if msg then error(msg, caller(SOURCE, true)) end
  return opts
end

-- whether v is an options table: a plain table (no metatable: not a
-- scheduler) with a named key and no items (a list is an argument)
local function is_opts(v)
  if type(v) ~= "table" or getmetatable(v) ~= nil or rawlen(v) > 0 then return false end
  for k in next, v do
    if type(k) == "string" then return true end
  end
  return false
end

-- The arguments after the optimizer as PyTorch takes them: the required
-- ones (names), by position or as keywords of the options table that
-- ends the call (StepLR(opt, {step_size = 2, gamma = 0.5}) is
-- StepLR(opt, 2, {gamma = 0.5})), and the options (known). Returns the
-- required ones' values, in order, then the options checked. One given
-- both ways, or not at all, or an argument past the options, is an error.
local function arguments(fname, names, known, ...)
  local args = table.pack(...)
  local n = args.n
  while n > 0 and args[n] == nil do n = n - 1 end
  local opts
  if n > #names or (n > 0 and is_opts(args[n])) then opts, args[n], n = args[n], nil, n - 1 end
  if n > #names then
    fail("%s: takes %d argument%s after the optimizer and an options table, got %d", fname,
         #names, #names == 1 and "" or "s", n + 1)
  end
  local all = {}
  for _, k in ipairs(names) do all[#all + 1] = k end
  for _, k in ipairs(known) do all[#all + 1] = k end
  opts = options(fname, opts, all)
  local out = {}
  for i, k in ipairs(names) do
    if args[i] ~= nil and opts[k] ~= nil then
      fail("%s: %s is given twice, as an argument and as an option", fname, k)
    end
    out[i] = args[i]
    if out[i] == nil then out[i] = opts[k] end
    if out[i] == nil then
      fail("%s: %s is missing: %s(opt, %s) or %s(opt, {%s = ...})", fname, k, fname,
           table.concat(names, ", "), fname, k)
    end
  end
  out[#names + 1] = opts
  return table.unpack(out, 1, #names + 1)
end

---------------------------------------------------------------- LRScheduler

local LRScheduler = {}
LRScheduler.__index = LRScheduler
LRScheduler.__name = "LRScheduler"
S.LRScheduler = LRScheduler          -- what every scheduler has (for qkv.doc)

-- a class of schedulers, named as torch's
local function class(name, base)
  local c = setmetatable({}, {__index = base or LRScheduler})
  c.__index, c.__name = c, name
  return c
end

local function check_optimizer(fname, opt)
  if not is_a(opt, require("qkv.optim").Optimizer) then
    fail("%s: optimizer must be a qkv.optim optimizer, got %s", fname, what(opt))
  end
  if type(opt.lr) ~= "number" then
    fail("%s: the optimizer's lr is a %s, not a number", fname, type(opt.lr))
  end
end

-- torch's _update_lr: the next epoch (or epoch, with the closed form where
-- the class has one) and its learning rate, into opt.lr
local function update(self, epoch)
  local opt = self.optimizer
  if type(opt.lr) ~= "number" then
    fail("step: the optimizer's lr is a %s, not a number", type(opt.lr))
  end
  local lr
  if epoch == nil then
    self.last_epoch = self.last_epoch + 1
    lr = self:_get_lr()
  else
    self.last_epoch = epoch
    lr = (self._closed_form or self._get_lr)(self)
  end
  opt.lr = lr
  self._last_lr = lr
end

-- torch's _initial_step: the step a scheduler takes when it is made
local function initial_step(self)
  self._step_count = 0
  self._initial = true
  self:step()
  self._initial = false
end

-- torch's LRScheduler.__init__ up to the first step, once every argument
-- is checked (a refused argument leaves opt as it was): the optimizer,
-- and the base learning rate, opt.initial_lr, set by the first scheduler
-- made on it
local function attach(cls, opt, fields)
  if rawget(opt, "initial_lr") == nil then opt.initial_lr = opt.lr end
  fields.optimizer, fields.base_lr, fields.last_epoch, fields._step_count = opt, opt.initial_lr, -1, 0
  local s = setmetatable(fields, cls)
  initial_step(s)
  return s
end

-- the next epoch's learning rate into opt.lr; call it after opt:step()
function LRScheduler:step(...)
  if select("#", ...) > 0 then
    fail("step: takes no argument (PyTorch's epoch argument is deprecated), got %s", type((...)))
  end
  self._step_count = self._step_count + 1
  update(self, nil)
end

-- {lr}: the learning rate the last step (or the making) set, in a list of
-- one per parameter group as torch's
function LRScheduler:get_last_lr()
  return {self._last_lr}
end

---------------------------------------------------------------- StepLR

local StepLR = class("StepLR")

function S.StepLR(opt, ...)
  check_optimizer("StepLR", opt)
  local step_size, opts = arguments("StepLR", {"step_size"}, {"gamma"}, ...)
  step_size = positive_int("StepLR", "step_size", step_size)
  local gamma = opts.gamma == nil and 0.1 or number_in("StepLR", "gamma", opts.gamma,
                                                       function(v) return v > 0 and v < math.huge end, "> 0")
  return attach(StepLR, opt, {step_size = step_size, gamma = gamma})
end

function StepLR:_get_lr()
  local e, lr = self.last_epoch, self.optimizer.lr
  if e == 0 or e % self.step_size ~= 0 then return lr end
  return lr * self.gamma
end

function StepLR:_closed_form()
  return self.base_lr * self.gamma ^ (self.last_epoch // self.step_size)
end

---------------------------------------------------------------- CosineAnnealingLR

local Cosine = class("CosineAnnealingLR")

function S.CosineAnnealingLR(opt, ...)
  local fname = "CosineAnnealingLR"
  check_optimizer(fname, opt)
  local T_max, opts = arguments(fname, {"T_max"}, {"eta_min"}, ...)
  T_max = positive_int(fname, "T_max", T_max)
  local eta_min = opts.eta_min == nil and 0 or number_in(fname, "eta_min", opts.eta_min,
                                                         function(v) return v >= 0 and v < math.huge end, ">= 0")
  return attach(Cosine, opt, {T_max = T_max, eta_min = eta_min})
end

-- torch's recursive form: each step scales lr - eta_min by the ratio of
-- consecutive cosines (after T_max the schedule climbs back, period 2 T_max)
function Cosine:_get_lr()
  local e, T, lr, eta = self.last_epoch, self.T_max, self.optimizer.lr, self.eta_min
  if self._initial then return lr end
  if (e - 1 - T) % (2 * T) == 0 then
    return lr + (self.base_lr - eta) * (1 - math.cos(math.pi / T)) / 2
  end
  return (1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) * (lr - eta) + eta
end

function Cosine:_closed_form()
  local eta = self.eta_min
  return eta + (self.base_lr - eta) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
end

---------------------------------------------------------------- LambdaLR

local LambdaLR = class("LambdaLR")

function S.LambdaLR(opt, ...)
  check_optimizer("LambdaLR", opt)
  local lr_lambda = arguments("LambdaLR", {"lr_lambda"}, {}, ...)
  if type(lr_lambda) ~= "function" then
    fail("LambdaLR: lr_lambda must be a function of the epoch, got %s", type(lr_lambda))
  end
  return attach(LambdaLR, opt, {lr_lambda = lr_lambda})
end

function LambdaLR:_get_lr()
  local f = self.lr_lambda(self.last_epoch)
  if type(f) ~= "number" or not (f >= 0 and f < math.huge) then
    fail("LambdaLR: lr_lambda(%d) must return a number >= 0, got %s", self.last_epoch, tostring(f))
  end
  return self.base_lr * f
end

---------------------------------------------------------------- LinearLR

local LinearLR = class("LinearLR")

function S.LinearLR(opt, ...)
  local fname = "LinearLR"
  check_optimizer(fname, opt)
  local opts = arguments(fname, {}, {"start_factor", "end_factor", "total_iters"}, ...)
  local start = opts.start_factor == nil and 1 / 3 or number_in(fname, "start_factor",
    opts.start_factor, function(v) return v > 0 and v <= 1 end, "in (0, 1]")
  local stop = opts.end_factor == nil and 1 or number_in(fname, "end_factor",
    opts.end_factor, function(v) return v >= 0 and v <= 1 end, "in [0, 1]")
  local n = opts.total_iters == nil and 5 or positive_int(fname, "option 'total_iters'", opts.total_iters)
  return attach(LinearLR, opt, {start_factor = start, end_factor = stop, total_iters = n})
end

-- torch's recursive form: from start_factor * lr to end_factor * lr over
-- total_iters steps, then lr as it is
function LinearLR:_get_lr()
  local e, lr = self.last_epoch, self.optimizer.lr
  local a, b, n = self.start_factor, self.end_factor, self.total_iters
  if e == 0 then return lr * a end
  if self._initial or e > n then return lr end
  return lr * (1.0 + (b - a) / (n * a + (e - 1) * (b - a)))
end

function LinearLR:_closed_form()
  local a, b, n = self.start_factor, self.end_factor, self.total_iters
  return self.base_lr * (a + (b - a) * math.min(n, self.last_epoch) / n)
end

---------------------------------------------------------------- SequentialLR

local SequentialLR = class("SequentialLR")

-- how many milestones are <= e (Python's bisect_right)
local function bisect(milestones, e)
  local n = 0
  for _, m in ipairs(milestones) do
    if m <= e then n = n + 1 end
  end
  return n
end

function S.SequentialLR(opt, ...)
  check_optimizer("SequentialLR", opt)
  local schedulers, milestones = arguments("SequentialLR", {"schedulers", "milestones"}, {}, ...)
  if type(schedulers) ~= "table" or rawlen(schedulers) == 0 then
    fail("SequentialLR: schedulers must be a list of schedulers, got %s",
         type(schedulers) == "table" and "an empty table" or type(schedulers))
  end
  local list = {}
  for i = 1, rawlen(schedulers) do
    local x = rawget(schedulers, i)
    if not is_a(x, LRScheduler) then
      fail("SequentialLR: schedulers[%d] is a %s, not a scheduler", i, what(x))
    end
    if is_a(x, SequentialLR) then
      fail("SequentialLR: schedulers[%d] is a SequentialLR: list its schedulers instead", i)
    end
    if not rawequal(x.optimizer, opt) then
      fail("SequentialLR: schedulers[%d] (%s) steps another optimizer", i, what(x))
    end
    list[i] = x
  end
  if type(milestones) ~= "table" or rawlen(milestones) ~= #list - 1 then
    fail("SequentialLR: milestones must be a list of %d epochs, one fewer than the schedulers, got %s",
         #list - 1, type(milestones) == "table" and rawlen(milestones) .. " of them" or type(milestones))
  end
  local ms = {}
  for i = 1, #list - 1 do
    local m = rawget(milestones, i)
    if type(m) ~= "number" or m ~= math.floor(m) or m < 1 or m == math.huge or (i > 1 and m <= ms[i - 1]) then
      fail("SequentialLR: milestones[%d] must be an integer >= 1 and above the one before, got %s",
           i, tostring(m))
    end
    ms[i] = math.tointeger(m)
  end
  local s = setmetatable({optimizer = opt, base_lr = opt.initial_lr, last_epoch = 0, _step_count = 0,
                         schedulers = list, milestones = ms}, SequentialLR)
  -- back to the base learning rate, each scheduler one epoch back, and
  -- the first takes its first step again
  opt.lr = opt.initial_lr
  for _, x in ipairs(list) do x.last_epoch = x.last_epoch - 1 end
  local first = list[bisect(ms, 0) + 1]
  initial_step(first)
  s._last_lr = first._last_lr
  return s
end

-- the scheduler of this epoch steps; at a milestone the next one starts
-- from its epoch 0 (its closed form, from the base learning rate)
function SequentialLR:step(...)
  if select("#", ...) > 0 then fail("step: takes no argument, got %s", type((...))) end
  self.last_epoch = self.last_epoch + 1
  local e = self.last_epoch
  local i = bisect(self.milestones, e)
  local x = self.schedulers[i + 1]
  if i > 0 and self.milestones[i] == e then update(x, 0) else x:step() end
  self._last_lr = x._last_lr
end

---------------------------------------------------------------- state_dict

-- each class's own settings, which its state_dict holds beside the epoch
local SETTINGS = {
  [StepLR] = {"step_size", "gamma"}, [Cosine] = {"T_max", "eta_min"}, [LambdaLR] = {},
  [LinearLR] = {"start_factor", "end_factor", "total_iters"}, [SequentialLR] = {"milestones"},
}

-- the scheduler's state as torch's state_dict() gives it (its fields but
-- the optimizer): last_epoch, _step_count, base_lrs and _last_lr (lists
-- of one, for qkv's one parameter group), its settings, and SequentialLR's
-- schedulers' own as _schedulers. LambdaLR's function is not in it (nor
-- in torch's, which keeps None for a plain function): the scheduler that
-- loads it keeps its own
function LRScheduler:state_dict()
  local cls = getmetatable(self)
  local d = {last_epoch = self.last_epoch, _step_count = self._step_count,
             base_lrs = {self.base_lr}, _last_lr = {self._last_lr}}
  for _, k in ipairs(SETTINGS[cls]) do
    local v = self[k]
    d[k] = type(v) == "table" and table.move(v, 1, #v, 1, {}) or v
  end
  if cls == SequentialLR then
    d._schedulers = {}
    for i, x in ipairs(self.schedulers) do d._schedulers[i] = x:state_dict() end
  end
  return d
end

-- one number of sd, checked
local function number_of(sd, k, whole)
  local v = rawget(sd, k)
  if type(v) ~= "number" or (whole and v ~= math.floor(v)) then
    fail("load_state_dict: '%s' must be %s, got %s", k, whole and "a whole number" or "a number", tostring(v))
  end
  return whole and math.tointeger(v) or v
end

-- the values of sd (as state_dict gives them), checked whole before any
-- is set: the epoch and learning rates from where the saved run stopped
local function read_state(self, sd)
  local cls = getmetatable(self)
  if type(sd) ~= "table" then fail("load_state_dict: the state_dict must be a table, got %s", type(sd)) end
  local known = {"last_epoch", "_step_count", "base_lrs", "_last_lr"}
  for _, k in ipairs(SETTINGS[cls]) do known[#known + 1] = k end
  if cls == SequentialLR then known[#known + 1] = "_schedulers" end
  local msg = require("qkv")._checkopts("load_state_dict", sd, known)
  if msg then error(msg, caller(SOURCE, true)) end
  local new = {last_epoch = number_of(sd, "last_epoch", true), _step_count = number_of(sd, "_step_count", true)}
  for _, k in ipairs{"base_lrs", "_last_lr"} do
    local v = rawget(sd, k)
    if type(v) ~= "table" or rawlen(v) ~= 1 or type(rawget(v, 1)) ~= "number" then
      fail("load_state_dict: '%s' must be a list of one number (one parameter group), got %s", k, what(v))
    end
  end
  new.base_lr, new._last_lr = rawget(sd, "base_lrs")[1], rawget(sd, "_last_lr")[1]
  for _, k in ipairs(SETTINGS[cls]) do
    local v = rawget(sd, k)
    if k == "milestones" then
      if type(v) ~= "table" or rawlen(v) ~= #self.milestones then
        fail("load_state_dict: 'milestones' must be a list of %d epochs, got %s", #self.milestones, what(v))
      end
      new[k] = {}
      for i = 1, rawlen(v) do new[k][i] = number_of(v, i, true) end
    else
      new[k] = number_of(sd, k, k == "step_size" or k == "T_max" or k == "total_iters")
    end
  end
  if cls == SequentialLR then
    local list = rawget(sd, "_schedulers")
    if type(list) ~= "table" or rawlen(list) ~= #self.schedulers then
      fail("load_state_dict: '_schedulers' must be a list of %d state_dicts, got %s", #self.schedulers, what(list))
    end
    new._sub = {}
    for i, x in ipairs(self.schedulers) do new._sub[i] = read_state(x, rawget(list, i)) end
  end
  return new
end

local function set_state(self, new)
  for k, v in pairs(new) do if k ~= "_sub" then self[k] = v end end
  if new._sub then for i, x in ipairs(self.schedulers) do set_state(x, new._sub[i]) end end
end

-- the scheduler as state_dict gave it: the next step continues the saved
-- run (load the optimizer's state_dict too, which holds its lr); as
-- torch's load_state_dict
function LRScheduler:load_state_dict(sd)
  set_state(self, read_state(self, sd))
  return self
end

-- a method called with '.' (sched.step()) says so
methods.guard(LRScheduler, "sched", "scheduler")
for _, cls in ipairs{StepLR, Cosine, LambdaLR, LinearLR, SequentialLR} do methods.guard(cls, "sched") end

-- a misspelt scheduler (StepLr) is an error naming the nearest
return require("qkv")._strict(S, "qkv.optim.lr_scheduler", "class or function")
