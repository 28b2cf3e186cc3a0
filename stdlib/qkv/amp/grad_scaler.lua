-- amp/grad_scaler.lua: qkv.amp.GradScaler, PyTorch's torch.amp.GradScaler
-- (dynamic loss scaling for float16 training) for qkv.optim's optimizers.
--
--   scaler = qkv.amp.GradScaler([device] [, {init_scale = 2^16, growth_factor = 2,
--                               backoff_factor = 0.5, growth_interval = 2000,
--                               enabled = true}])       (or GradScaler{device = ..., ...})
--   scaler:scale(loss):backward()   the loss times the scale: scaled gradients
--   scaler:unscale_(opt)            optional: the gradients divided back, in place
--   scaler:step(opt)                unscale_ (unless done), then opt:step() unless
--                                   a gradient had an inf or a NaN
--   scaler:update()                 the scale for the next iteration
--
-- The numbers are PyTorch's to the bit: the scale is a float32 (a Lua
-- number rounded to float32 wherever PyTorch stores it in its float32
-- tensor), gradients are multiplied by its reciprocal taken in double and
-- rounded to float32, and update() multiplies the scale by the factor in
-- double and rounds, as torch._amp_update_scale_ does. Each optimizer goes
-- through PyTorch's stages between update()s: READY, UNSCALED (after
-- unscale_), STEPPED (after step), and misuse of them is PyTorch's error.

local qkv = require "qkv"
local caller = require "qkv.caller"
local methods = require "qkv.methods"
local SOURCE = debug.getinfo(1, "S").source

local G = {}

local function fail(fmt, ...) error(string.format(fmt, ...), caller(SOURCE, true)) end

-- x rounded to the nearest float32 (ties to even), as a float32 tensor
-- stores it; the scale lives in one in PyTorch
local function f32(x)
  return (string.unpack("f", string.pack("f", x)))
end

local READY, UNSCALED, STEPPED = "READY", "UNSCALED", "STEPPED"
local KNOWN = {"device", "init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"}

local GradScaler = {}
GradScaler.__index = GradScaler
GradScaler.__name = "GradScaler"
G.Scaler = GradScaler                -- the class, whose methods qkv.doc lists

---------------------------------------------------------------- checks

local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end

local function check_growth_factor(fname, v)
  if not finite(v) or v <= 1 then
    fail("%s: the growth factor must be a number > 1.0, got %s", fname, tostring(v))
  end
  return v + 0.0
end

local function check_backoff_factor(fname, v)
  if not finite(v) or v <= 0 or v >= 1 then
    fail("%s: the backoff factor must be a number in (0, 1), got %s", fname, tostring(v))
  end
  return v + 0.0
end

local function check_interval(fname, v)
  if not finite(v) or v ~= math.floor(v) or v < 1 then
    fail("%s: the growth interval must be a whole number >= 1, got %s", fname, tostring(v))
  end
  return math.tointeger(v)
end

local function check_optimizer(fname, opt)
  if not methods.is_a(opt, require("qkv.optim").Optimizer) then
    local mt = type(opt) == "table" and getmetatable(opt)
    local name = type(mt) == "table" and rawget(mt, "__name")
    fail("%s: optimizer must be a qkv.optim optimizer, got %s", fname,
         type(name) == "string" and name or qkv.is_tensor(opt) and "a tensor" or type(opt))
  end
end

-- PyTorch's _check_scale_growth_tracker: no scale before the first scale()
local function check_scaled(self, fname, what)
  if self._scale == nil then
    fail("%s: attempted %s but the scale is not set: this may indicate your script did not use "
         .. "scaler:scale(loss or outputs) earlier in the iteration", fname, what)
  end
end

---------------------------------------------------------------- making

-- GradScaler([device] [, opts]) or GradScaler(opts)
function G.GradScaler(...)
  local fname = "GradScaler"
  local n = select("#", ...)
  local device, opts = ...
  if type(device) == "table" and n <= 1 then device, opts = nil, device end
  if n > 2 then fail("%s: takes a device and an options table, got %d arguments", fname, n) end
  if device ~= nil and type(device) ~= "string" then
    fail("%s: device must be \"cpu\" or \"cuda\", got %s", fname, type(device))
  end
  if opts ~= nil and type(opts) ~= "table" then
    fail("%s: options must be a table, got %s", fname, type(opts))
  end
  local msg
  msg, opts = qkv._checkopts(fname, opts, KNOWN, {"enabled"})
  if msg then error(msg, caller(SOURCE, true)) end
  if device ~= nil and opts.device ~= nil then
    fail("%s: device is given twice, as an argument and as an option", fname)
  end
  -- PyTorch's default device is "cuda", as here
  device = device or opts.device or "cuda"
  if device ~= "cpu" and device ~= "cuda" then
    fail("%s: device must be \"cpu\" or \"cuda\", got %s", fname, tostring(device))
  end
  local enabled = opts.enabled
  if enabled == nil then enabled = true end
  local init_scale = opts.init_scale == nil and 2.0 ^ 16 or opts.init_scale
  if not finite(init_scale) or init_scale <= 0 then
    fail("%s: init_scale must be a number > 0, got %s", fname, tostring(init_scale))
  end
  local self = {
    _device = device, _enabled = enabled,
    _init_scale = init_scale + 0.0, _scale = nil,
    _growth_factor = check_growth_factor(fname, opts.growth_factor == nil and 2.0 or opts.growth_factor),
    _backoff_factor = check_backoff_factor(fname, opts.backoff_factor == nil and 0.5 or opts.backoff_factor),
    _growth_interval = check_interval(fname, opts.growth_interval == nil and 2000 or opts.growth_interval),
    _init_growth_tracker = 0, _growth_tracker = nil,
    _per_optimizer = {},
  }
  -- PyTorch warns and disables a "cuda" scaler without CUDA; qkv says so
  if enabled and device == "cuda" then
    local ok, why = qkv.cuda_available()
    if not ok then
      fail("%s: device \"cuda\" (PyTorch's default) but no GPU (%s): use GradScaler(\"cpu\"), "
           .. "or enabled = false", fname, tostring(why))
    end
  end
  return setmetatable(self, GradScaler)
end

---------------------------------------------------------------- scale

local function lazy_init(self)
  if self._scale == nil then
    self._scale = f32(self._init_scale)
    self._growth_tracker = self._init_growth_tracker
  end
end

local function path_of(path)
  local parts = {"outputs"}
  for _, i in ipairs(path) do parts[#parts + 1] = "[" .. tostring(i) .. "]" end
  return table.concat(parts)
end

-- outputs times the scale: a tensor, or a list (nested) of them, mapped
-- into a new list
local function apply(self, v, path)
  if qkv.is_tensor(v) then
    if not methods.open_tensor(v) then fail("GradScaler:scale: %s is a closed tensor", path_of(path)) end
    lazy_init(self)
    -- PyTorch multiplies by a 0-d float32 tensor: a 0-d output (a loss)
    -- of a smaller float dtype becomes float32, a larger tensor keeps its
    -- float dtype, integers and booleans become float32
    local d = v.dtype
    if d ~= "float32" and d ~= "float64" and (v.ndim == 0 or (d ~= "float16" and d ~= "bfloat16")) then
      v = v:float()
    end
    return v * self._scale
  end
  if type(v) == "table" and getmetatable(v) == nil then
    local out = {}
    for i = 1, rawlen(v) do
      path[#path + 1] = i
      out[i] = apply(self, rawget(v, i), path)
      path[#path] = nil
    end
    return out
  end
  fail("GradScaler:scale: outputs must be a tensor or a list of tensors, but %s is %s",
       path_of(path), methods.what_arg(v))
end

-- outputs multiplied by the scale (a tensor, or a list of tensors, nested
-- or not, into a new list); outputs itself when disabled
function GradScaler:scale(outputs)
  if not self._enabled then return outputs end
  return apply(self, outputs, {})
end

---------------------------------------------------------------- unscale_

local function state_of(self, opt)
  local s = self._per_optimizer[opt]
  if s == nil then
    s = {stage = READY, found_inf = {}}
    self._per_optimizer[opt] = s
  end
  return s
end

-- every gradient of opt multiplied in place by inv_scale; per device,
-- whether any was inf or NaN before it (torch's
-- _amp_foreach_non_finite_check_and_unscale_)
local function unscale_grads(fname, opt, inv_scale)
  local grads = {}
  for i, p in ipairs(opt.params) do
    if not methods.open_tensor(p) then fail("%s: parameter %d is a closed tensor", fname, i) end
    local g = p.grad
    if g ~= nil then
      if not methods.open_tensor(g) then fail("%s: the grad of parameter %d is a closed tensor", fname, i) end
      -- checked for every gradient before any is changed
      if g.dtype == "float16" then
        fail("%s: Attempting to unscale FP16 gradients (parameter %d's grad is float16): "
             .. "keep the parameters in float32", fname, i)
      end
      grads[#grads + 1] = g
    end
  end
  local found = {}
  qkv.no_grad(function()
    for _, g in ipairs(grads) do
      -- x * 0 is 0 (or -0) for a finite x, NaN for an inf or a NaN
      local bad = (g * 0):ne(0):any():item()
      found[g.device] = (found[g.device] or false) or bad
      if inv_scale ~= 1 then g:mul_(inv_scale) end
    end
  end)
  return found
end

local function unscale(self, opt, fname)
  check_scaled(self, fname, "unscale_")
  local s = state_of(self, opt)
  if s.stage == UNSCALED then
    fail("%s: unscale_() has already been called on this optimizer since the last update()", fname)
  elseif s.stage == STEPPED then
    fail("%s: unscale_() is being called after step()", fname)
  end
  -- the reciprocal in double, rounded to float32, as PyTorch's
  s.found_inf = unscale_grads(fname, opt, f32(1 / self._scale))
  s.stage = UNSCALED
end

-- the gradients of opt's parameters divided by the scale, in place (to
-- clip or read them before step); noted for step() and update()
function GradScaler:unscale_(optimizer)
  if not self._enabled then return end
  check_optimizer("GradScaler:unscale_", optimizer)
  unscale(self, optimizer, "GradScaler:unscale_")
end

---------------------------------------------------------------- step, update

local function any_found(found)
  for _, v in pairs(found) do if v then return true end end
  return false
end

-- unscale_ (unless done since the last update), then optimizer:step(...)
-- unless some gradient had an inf or a NaN; step's result, or nil when
-- skipped
function GradScaler:step(optimizer, ...)
  local fname = "GradScaler:step"
  if not self._enabled then
    check_optimizer(fname, optimizer)
    return optimizer:step(...)
  end
  check_optimizer(fname, optimizer)
  if type((...)) == "function" then
    fail("%s: closure use is not currently supported if GradScaler is enabled", fname)
  end
  check_scaled(self, fname, "step")
  local s = state_of(self, optimizer)
  if s.stage == STEPPED then
    fail("%s: step() has already been called since the last update()", fname)
  end
  if s.stage == READY then unscale(self, optimizer, fname) end
  if next(s.found_inf) == nil then
    fail("%s: no inf checks were recorded for this optimizer (none of its parameters has a grad: "
         .. "call backward on scaler:scale(loss) first)", fname)
  end
  local out = table.pack()
  if not any_found(s.found_inf) then out = table.pack(optimizer:step(...)) end
  s.stage = STEPPED
  return table.unpack(out, 1, out.n)
end

-- the new scale: new_scale as given (a number, or a one-element float
-- tensor on the scaler's device that does not require grad), else the
-- scale times backoff_factor when a step found infs or NaNs, times
-- growth_factor after growth_interval steps in a row without
function GradScaler:update(new_scale)
  local fname = "GradScaler:update"
  if not self._enabled then return end
  check_scaled(self, fname, "update")
  if new_scale ~= nil then
    if type(new_scale) == "number" then
      self._scale = f32(new_scale)
    else
      local t = new_scale
      if not (methods.open_tensor(t) and t.device == self._device and t:numel() == 1
              and not t.requires_grad and (t.dtype == "float32" or t.dtype == "float64"
              or t.dtype == "float16" or t.dtype == "bfloat16")) then
        fail("%s: new_scale should be a number or a 1-element float tensor on %s with "
             .. "requires_grad false, got %s%s", fname, self._device, methods.what_arg(t),
             methods.open_tensor(t) and (" on " .. t.device ..
               (t.requires_grad and " that requires grad" or "")) or "")
      end
      self._scale = f32(t:item())
    end
  else
    local seen, found = false, false
    for _, s in pairs(self._per_optimizer) do
      for _, v in pairs(s.found_inf) do seen, found = true, found or v end
    end
    if not seen then fail("%s: no inf checks were recorded prior to update()", fname) end
    -- torch._amp_update_scale_: the float32 scale times the factor in
    -- double, stored back in float32 (a growth to inf is not taken)
    if found then
      self._scale = f32(self._scale * self._backoff_factor)
      self._growth_tracker = 0
    else
      local successful = self._growth_tracker + 1
      if successful == self._growth_interval then
        local grown = f32(self._scale * self._growth_factor)
        if grown < math.huge then self._scale = grown end
        self._growth_tracker = 0
      else
        self._growth_tracker = successful
      end
    end
  end
  self._per_optimizer = {}
end

---------------------------------------------------------------- reading and setting

-- the scale as a number: init_scale before the first scale(), 1.0 when disabled
function GradScaler:get_scale()
  if not self._enabled then return 1.0 end
  return self._scale or self._init_scale
end

function GradScaler:is_enabled() return self._enabled end

function GradScaler:get_growth_factor() return self._growth_factor end
function GradScaler:set_growth_factor(new_factor)
  self._growth_factor = check_growth_factor("GradScaler:set_growth_factor", new_factor)
end

function GradScaler:get_backoff_factor() return self._backoff_factor end
function GradScaler:set_backoff_factor(new_factor)
  self._backoff_factor = check_backoff_factor("GradScaler:set_backoff_factor", new_factor)
end

function GradScaler:get_growth_interval() return self._growth_interval end
function GradScaler:set_growth_interval(new_interval)
  self._growth_interval = check_interval("GradScaler:set_growth_interval", new_interval)
end

-- the steps without inf or NaN since the scale last changed (private in
-- PyTorch too: _get_growth_tracker)
function GradScaler:_get_growth_tracker()
  if not self._enabled then return 0 end
  return self._growth_tracker or self._init_growth_tracker
end

---------------------------------------------------------------- state_dict

local SD_KEYS = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}

-- PyTorch's five entries; {} when disabled
function GradScaler:state_dict()
  if not self._enabled then return {} end
  return {scale = self:get_scale(), growth_factor = self._growth_factor,
          backoff_factor = self._backoff_factor, growth_interval = self._growth_interval,
          _growth_tracker = self:_get_growth_tracker()}
end

-- the scaler as state_dict gave it, every entry checked before any is set;
-- nothing when disabled
function GradScaler:load_state_dict(sd)
  local fname = "GradScaler:load_state_dict"
  if not self._enabled then return end
  if type(sd) ~= "table" then fail("%s: the state_dict must be a table, got %s", fname, type(sd)) end
  if next(sd) == nil then
    fail("%s: the source state dict is empty, possibly because it was saved from a disabled "
         .. "instance of GradScaler", fname)
  end
  local msg = qkv._checkopts(fname, sd, SD_KEYS)
  if msg then error(msg, caller(SOURCE, true)) end
  for _, k in ipairs(SD_KEYS) do
    if rawget(sd, k) == nil then fail("%s: the state_dict has no '%s'", fname, k) end
  end
  local scale = rawget(sd, "scale")
  if not finite(scale) or scale <= 0 then
    fail("%s: 'scale' must be a number > 0, got %s", fname, tostring(scale))
  end
  local tracker = rawget(sd, "_growth_tracker")
  if not finite(tracker) or tracker ~= math.floor(tracker) or tracker < 0 then
    fail("%s: '_growth_tracker' must be a whole number >= 0, got %s", fname, tostring(tracker))
  end
  local gf = check_growth_factor(fname, rawget(sd, "growth_factor"))
  local bf = check_backoff_factor(fname, rawget(sd, "backoff_factor"))
  local gi = check_interval(fname, rawget(sd, "growth_interval"))
  self._init_scale = scale + 0.0
  if self._scale ~= nil then self._scale = f32(scale) end
  self._growth_factor, self._backoff_factor, self._growth_interval = gf, bf, gi
  self._init_growth_tracker = math.tointeger(tracker)
  if self._growth_tracker ~= nil then self._growth_tracker = math.tointeger(tracker) end
end

function GradScaler:__tostring()
  if not self._enabled then return "GradScaler(enabled=false)" end
  return string.format("GradScaler(device=%s, scale=%.9g, growth_factor=%g, backoff_factor=%g, "
                       .. "growth_interval=%d)", self._device, self:get_scale(), self._growth_factor,
                       self._backoff_factor, self._growth_interval)
end

-- a method called with '.' (scaler.step(opt)) says so
methods.guard(GradScaler, "scaler", "GradScaler")

return G
