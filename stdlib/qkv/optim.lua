-- optim.lua: qkv.optim, PyTorch's optimizers for tensors that require grad.
--
--   opt = qkv.optim.SGD(params, {lr = 0.01, momentum = 0, weight_decay = 0})
--   opt = qkv.optim.Adam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8,
--                                 weight_decay = 0})
--   opt:step()       updates each parameter from its .grad (those with none
--                    are left alone), in place and outside the graph
--   opt:zero_grad()  sets every parameter's .grad to nil
--
-- params is a list of tensors, a qkv.nn module, or m:parameters()'s list of
-- {name, tensor}.

local qkv = require "qkv"
local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

local O = {}

local function fail(fmt, ...) error(string.format(fmt, ...), caller(SOURCE, true)) end

-- the tensors of params: a qkv.nn module's, or a list read raw (no
-- metamethod of it runs) of tensors or {name, tensor} pairs
local function param_list(fname, params)
  if type(params) ~= "table" then fail("%s: params must be a list of tensors or a module, got %s", fname, type(params)) end
  local mt = getmetatable(params)
  if mt and rawget(mt, "__name") and type(params.parameters) == "function" then
    params = params:parameters()
  end
  local out = {}
  for i = 1, rawlen(params) do
    local p = rawget(params, i)
    local t = qkv.is_tensor(p) and p or type(p) == "table" and rawget(p, 2)
    if not qkv.is_tensor(t) then fail("%s: parameter %d is a %s, not a tensor", fname, i, type(p)) end
    if not pcall(function() return t.ndim end) then fail("%s: parameter %d is a closed tensor", fname, i) end
    if not t.requires_grad then fail("%s: parameter %d does not require grad", fname, i) end
    out[#out + 1] = t
  end
  if #out == 0 then fail("%s: no parameters", fname) end
  return out
end

local function number(fname, opts, key, default, ok)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" or not ok(v) then fail("%s: bad %s %s", fname, key, tostring(v)) end
  return v
end

local function positive(v) return v > 0 end
local function nonneg(v) return v >= 0 end
local function unit(v) return v >= 0 and v < 1 end

local Optimizer = {}
Optimizer.__index = Optimizer
O.Optimizer = Optimizer              -- what every optimizer has (for qkv.doc)

function Optimizer:zero_grad()
  for _, p in ipairs(self.params) do p.grad = nil end
end

function Optimizer:step()
  qkv.no_grad(function()
    for i, p in ipairs(self.params) do
      local g = p.grad
      if g ~= nil then
        if self.weight_decay ~= 0 then g = g + p * self.weight_decay end
        self:update(i, p, g)
      end
    end
  end)
  self.t = self.t + 1
end

local function new(cls, params)
  return setmetatable({params = params, state = {}, t = 0}, cls)
end

local SGD = setmetatable({}, {__index = Optimizer})
SGD.__index = SGD
SGD.__name = "SGD"

-- an optimizer of class cls over params, with opts' lr (default lr) and
-- weight_decay read; returns it and opts
local function build(cls, fname, params, opts, lr)
  opts = opts or {}
  if type(opts) ~= "table" then fail("%s: opts must be a table, got %s", fname, type(opts)) end
  local o = new(cls, param_list(fname, params))
  o.lr = number(fname, opts, "lr", lr, positive)
  o.weight_decay = number(fname, opts, "weight_decay", 0, nonneg)
  return o, opts
end

function O.SGD(params, opts)
  local o
  o, opts = build(SGD, "SGD", params, opts, 0.01)
  o.momentum = number("SGD", opts, "momentum", 0, unit)
  return o
end

function SGD:update(i, p, g)
  if self.momentum ~= 0 then
    local buf = self.state[i]
    buf = buf and buf:mul_(self.momentum):add_(g) or g:clone()
    self.state[i] = buf
    g = buf
  end
  p:sub_(g * self.lr)
end

local Adam = setmetatable({}, {__index = Optimizer})
Adam.__index = Adam
Adam.__name = "Adam"

function O.Adam(params, opts)
  local o
  o, opts = build(Adam, "Adam", params, opts, 1e-3)
  o.eps = number("Adam", opts, "eps", 1e-8, positive)
  local betas = opts.betas or {0.9, 0.999}
  if type(betas) ~= "table" or not (type(betas[1]) == "number" and unit(betas[1]))
     or not (type(betas[2]) == "number" and unit(betas[2])) then
    fail("Adam: betas must be two numbers in [0, 1), got %s", tostring(betas))
  end
  o.b1, o.b2 = betas[1], betas[2]
  return o
end

function Adam:update(i, p, g)
  local s = self.state[i] or {m = qkv.zeros(p.shape, p.dtype, p.device), v = qkv.zeros(p.shape, p.dtype, p.device)}
  self.state[i] = s
  s.m:mul_(self.b1):add_(g * (1 - self.b1))
  s.v:mul_(self.b2):add_(g * g * (1 - self.b2))
  local t = self.t + 1
  local mhat = s.m / (1 - self.b1 ^ t)
  local vhat = s.v / (1 - self.b2 ^ t)
  p:sub_(mhat / (vhat:sqrt() + self.eps) * self.lr)
end

return O
