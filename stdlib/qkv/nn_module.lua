-- nn_module.lua: the machinery of qkv.nn (stdlib/qkv/nn.lua assembles the
-- public table): the Module class and its methods, class(), which makes a
-- module class and registers it in qkv.nn, and the checks every layer file
-- shares (stdlib/qkv/nn_layers.lua, nn_attention.lua, nn_functional.lua).
--
-- A module is a table whose metatable is its class: calling it runs
-- forward (`attn(x)`), its weights are tensor fields (W_Q, W_K, ...) and its
-- submodules are module fields (proj, aligner, ...). Weights are stored as
-- (d_in, d_out), the transpose of PyTorch's Linear.weight, so that
-- `qkv.project(x, m.W)` is x W as the documents write it. They initialise as
-- PyTorch's nn.Linear does, uniform in ±1/sqrt(d_in), from qkv's generator.
--
-- Each layer file gets this table, M, from require "qkv.nn_module" and
-- calls M.inside(its source) so that errors raised in it point past it, at
-- the script's line.

local qkv = require "qkv"

local nn = {}           -- the public table, qkv.nn, filled by class() and the files

local caller = require "qkv.caller"

-- the files of qkv.nn: an error points at the first frame outside them
local SOURCES = {[debug.getinfo(1, "S").source] = true}

-- errors point at the script line that called into qkv.nn
local function fail(fname, msg, ...)
  error(fname .. ": " .. string.format(msg, ...), caller(SOURCES, true))
end

-- the results of pcall(f, ...), or its error named by fname at the script
-- line: a module's errors name it, also those of the primitives it calls
-- ("MultiHeadAttention: project: x is (3, 5) but W is (8, 8): d_in 5 ≠ 8")
local function named(fname, ok, ...)
  if ok then return ... end
  local err = ...
  if type(err) ~= "string" then error(err, 0) end
  err = err:gsub("^[^\n]-:%d+: ", "", 1)        -- where it was raised
  if err:sub(1, #fname + 2) == fname .. ": " then err = err:sub(#fname + 3) end
  fail(fname, "%s", err)
end

-- opts, nil or a table whose keys are all in known and whose flags are
-- booleans, read once into a plain table (else qkv._checkopts's message:
-- "Linear: unknown option 'bais' (did you mean 'bias'?)")
local function checkopts(fname, opts, known, flags)
  local msg, snap = qkv._checkopts(fname, opts, known, flags)
  if msg then error(msg, caller(SOURCES, true)) end
  return snap
end

-- opts[key] (checkopts made it nil or a boolean), or default when it is nil
local function flag(opts, key, default)
  if opts[key] == nil then return default end
  return opts[key]
end

local function checkdim(fname, name, v)
  if math.type(v) ~= "integer" or v < 1 then
    fail(fname, "%s must be a positive integer, got %s", name, tostring(v))
  end
  return v
end

local function checktensor(fname, name, x)
  if not qkv.is_tensor(x) then
    fail(fname, "%s must be a tensor, got %s", name, type(x))
  end
  if not pcall(function() return x.ndim end) then   -- local x <close> ended
    fail(fname, "%s is a closed tensor", name)
  end
  return x
end

---------------------------------------------------------------- Module

local Module = {}
Module.__index = Module
nn.Module = Module

-- a class: its instances are callable and print like PyTorch's modules;
-- errors in making one or in its forward name the class
local function class(name)
  local c = setmetatable({}, {__index = Module})
  c.__index = c
  c.__name = name
  c.__call = function(self, ...) return self:forward(...) end
  c.__tostring = function(self) return self:repr("") end
  nn[name] = setmetatable(c, {__index = Module, __call = function(cls, ...)
    local m = setmetatable({_params = {}, _children = {}, training = true}, cls)
    named(name, pcall(m.init, m, ...))
    return m
  end, __newindex = function(cls, k, v)
    if k == "forward" then
      local f = v
      v = function(self, ...) return named(name, pcall(f, self, ...)) end
    end
    rawset(cls, k, v)
  end})
  return c
end

-- register a tensor field, which requires grad (as nn.Parameter does)
function Module:param(name, t)
  self._params[#self._params + 1] = name
  self[name] = t:requires_grad_()
  return t
end

-- every parameter's .grad back to nil
function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p[2].grad = nil end
  return self
end

local FLOATS = {float32 = true, float64 = true, float16 = true, bfloat16 = true}

-- every parameter moved to a device ("cpu" or "cuda") or converted to a
-- float dtype, children too, as nn.Module.to does; returns the module. The
-- parameters are new tensors (an optimizer made before says so at its step).
function Module:to(to)
  local field = (to == "cpu" or to == "cuda") and "device" or FLOATS[to] and "dtype"
  if not field then
    fail("to", "expected a device (\"cpu\", \"cuda\") or a float dtype, got %s", tostring(to))
  end
  for _, n in ipairs(self._params) do
    local p = self[n]
    if p[field] ~= to then self[n] = p:detach():to(to):requires_grad_() end
  end
  for _, n in ipairs(self._children) do self[n]:to(to) end
  return self
end
function Module:cuda() return self:to("cuda") end
function Module:cpu() return self:to("cpu") end
function Module:double() return self:to("float64") end
function Module:float() return self:to("float32") end

function Module:child(name, m)
  self._children[#self._children + 1] = name
  self[name] = m
  return m
end

local function uniform(bound, ...)
  return (qkv.rand(...) * 2 - 1) * bound
end

-- flat list of {name, tensor}, in registration order, children after own
local function collect(m, prefix, out)
  for _, n in ipairs(m._params) do
    out[#out + 1] = {prefix .. n, m[n]}
  end
  for _, n in ipairs(m._children) do
    collect(m[n], prefix .. n .. ".", out)
  end
  return out
end

function Module:parameters() return collect(self, "", {}) end

-- for name, p in m:named_parameters([{prefix =, recurse =}]) do: the pairs
-- of parameters(), in its order (recurse false: m's own only), each name
-- after prefix and a dot, as PyTorch's named_parameters()
function Module:named_parameters(opts)
  if type(self) ~= "table" or type(rawget(self, "_params")) ~= "table" then
    fail("named_parameters", "call it as m:named_parameters(), on a module")
  end
  opts = checkopts("named_parameters", opts, {"prefix", "recurse"}, {"recurse"})
  local prefix = opts.prefix == nil and "" or opts.prefix
  if type(prefix) ~= "string" then
    fail("named_parameters", "option 'prefix' must be a string, got %s", type(prefix))
  end
  if prefix ~= "" then prefix = prefix .. "." end
  local list = {}
  if opts.recurse == false then
    for _, n in ipairs(self._params) do list[#list + 1] = {prefix .. n, self[n]} end
  else
    collect(self, prefix, list)
  end
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

function Module:state_dict()
  local d = {}
  for _, p in ipairs(self:parameters()) do d[p[1]] = p[2] end
  return d
end

-- the number of weights
function Module:nparams()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p[2]:numel() end
  return n
end

-- copy the weights of another module of the same structure (or of a
-- state_dict) into this one's parameters, as load_state_dict does: the
-- tensors stay the same objects (an optimizer made before keeps stepping
-- them) and the copies share nothing with the source. Every entry is
-- checked before the first is copied, so a bad one changes nothing.
function Module:load(src)
  if type(src) ~= "table" then fail("load", "source must be a module or a state_dict, got %s", type(src)) end
  -- a module (its class has a __name), read for state_dict; any other
  -- table (qkv.nn itself refuses names it lacks) is a state_dict
  local mt = getmetatable(src)
  local from = type(mt) == "table" and rawget(mt, "__name") and type(src.state_dict) == "function"
    and src:state_dict() or src
  local snap = {}                 -- read once and raw: no metamethod runs
  for k, v in next, from do snap[k] = v end
  from = snap
  local mine = self:parameters()
  local known = {}
  for _, p in ipairs(mine) do
    local name, t = p[1], p[2]
    known[name] = true
    local s = from[name]
    if not qkv.is_tensor(s) then fail("load", "the source has no tensor '%s'", name) end
    if not pcall(function() return s.ndim end) then
      fail("load", "the source's '%s' is a closed tensor", name)
    end
    if s.shape ~= t.shape then
      fail("load", "%s is %s here but %s in the source", name, tostring(t.shape), tostring(s.shape))
    end
    if s.dtype ~= "float32" and s.dtype ~= "float64" and s.dtype ~= "float16" and s.dtype ~= "bfloat16" then
      fail("load", "%s is %s here but %s in the source: load copies float tensors", name, t.dtype, s.dtype)
    end
  end
  for name in pairs(from) do
    if not known[name] then fail("load", "the source has an unexpected '%s'", tostring(name)) end
  end
  local is_mine = {}
  for _, p in ipairs(mine) do is_mine[p[2]] = true end
  qkv.no_grad(function()
    local src = {}                -- a source that is one of ours is read first
    for _, p in ipairs(mine) do
      local s = from[p[1]]
      src[p[1]] = is_mine[s] and s:clone() or s
    end
    for _, p in ipairs(mine) do p[2]:copy_(src[p[1]]:to(p[2].device)) end
  end)
  return self
end

-- training mode (the default) or evaluation mode, for this module and its
-- children, as PyTorch's train() / eval(); Dropout reads it
function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= "boolean" then fail("train", "mode must be a boolean, got %s", type(mode)) end
  self.training = mode
  for _, n in ipairs(self._children) do self[n]:train(mode) end
  return self
end

function Module:eval() return self:train(false) end

function Module:extra() return "" end

function Module:repr(indent)
  local s = self.__name .. "(" .. self:extra()
  if #self._children == 0 then return s .. ")" end
  local inner = indent .. "  "
  for _, n in ipairs(self._children) do
    s = s .. "\n" .. inner .. "(" .. n .. "): " .. self[n]:repr(inner)
  end
  return s .. "\n" .. indent .. ")"
end

-- a constructor's options checked, and its dtype ("float32" by default,
-- or "float64")
local function opts_of(fname, opts, known, flags)
  opts = checkopts(fname, opts, known, flags)
  local dt = opts.dtype or "float32"
  if dt ~= "float32" and dt ~= "float64" then
    fail(fname, "dtype must be 'float32' or 'float64', got %s", tostring(dt))
  end
  return opts, dt
end

return {
  nn = nn, Module = Module, class = class, uniform = uniform, opts_of = opts_of,
  fail = fail, named = named, checkopts = checkopts, flag = flag,
  checkdim = checkdim, checktensor = checktensor,
  inside = function(source) SOURCES[source] = true end,
}
