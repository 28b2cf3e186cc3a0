-- nn/module.lua: the machinery of qkv.nn (nn/init.lua assembles the
-- public table): the Module class and its methods, class(), which makes a
-- module class and registers it in qkv.nn, and the checks every layer file
-- shares (nn/layers.lua, nn/attention.lua, nn/functional.lua).
--
-- A module is a table whose metatable is its class: calling it runs
-- forward (`attn(x)`), its weights are tensor fields (W_Q, W_K, ...) and its
-- submodules are module fields (proj, aligner, ...). Linear, LayerNorm,
-- RMSNorm and Embedding hold PyTorch's weight and bias, in PyTorch's
-- layouts (Linear's weight (d_out, d_in)); the attention modules hold the
-- documents' projections W_Q, W_K, W_V, W_O as (d_in, d_out), so that
-- `qkv.project(x, m.W_Q)` is x W_Q as the documents write it. They
-- initialise as PyTorch's nn.Linear does, uniform in ±1/sqrt(d_in), from
-- qkv's generator.
--
-- Each layer file gets this table, M, from require "qkv.nn.module" and
-- calls M.inside(its source) so that errors raised in it point past it, at
-- the script's line.

local qkv = require "qkv"

local nn = {}           -- the public table, qkv.nn, filled by class() and the files

local caller = require "qkv.caller"
local methods = require "qkv.methods"

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

-- an argument past the n fname takes is an error naming fname, then why
-- (what PyTorch's positional would have meant), where it was ignored
local function noextra(fname, why, n, ...)
  local extra = qkv._extra(fname, n, ...)
  if extra then fail(fname, "%s: %s", (extra:gsub("^[%w_]+: ", "")), why) end
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

-- whether v is a module: a table whose class has a __name and a forward
local function is_module(v)
  local mt = type(v) == "table" and getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__name") ~= nil and mt.forward ~= nil
end

-- what v is, for messages: "a tensor", "a Linear", "a number"
local function what(v)
  if qkv.is_tensor(v) then return "a tensor" end
  if is_module(v) then return "a " .. getmetatable(v).__name end
  return "a " .. type(v)
end

-- A module's registered names: _params (tensor fields, as PyTorch's
-- _parameters) and _children (module fields, its _modules), in the order
-- registered. A name whose field is nil is not there (PyTorch's
-- m.bias = None): every method below skips it. Every method reads the
-- names through the two functions here, which refuse a field that holds
-- something else, and walks the tree with tree(), which refuses a module
-- inside itself.

-- m's registered fields of one kind, as {name after prefix, value,
-- field}: list the registry (_params, _children or _buffers), its entry
-- of KINDS the test a value passes and what the field holds; a field set
-- to nil is not there, one that holds something else is an error naming
-- it, and the names in skip are left out
local KINDS = {
  _params = {qkv.is_tensor, "a tensor", "a parameter"},
  _children = {is_module, "a module", "a submodule"},
  _buffers = {qkv.is_tensor, "a tensor", "a buffer"},
}
local function owned(list, m, fname, prefix, out, skip)
  local ok, holds, kind = table.unpack(KINDS[list])
  for _, n in ipairs(rawget(m, list) or {}) do
    local v = m[n]
    if v ~= nil and not (skip and skip[n]) then
      if not ok(v) then
        fail(fname, "'%s' is %s, not %s: %s is %s, or nil to remove it", prefix .. n, what(v),
             holds, kind, holds)
      end
      out[#out + 1] = {prefix .. n, v, n}
    end
  end
  return out
end

-- m's own parameters, children (modules) and buffers, names after
-- prefix; the buffers that are not persistent left out where only is
-- "persistent" (state_dict's)
local function own_params(m, fname, prefix, out) return owned("_params", m, fname, prefix, out) end
local function own_children(m, fname, prefix, out) return owned("_children", m, fname, prefix, out) end
local function own_buffers(m, fname, prefix, out, only)
  return owned("_buffers", m, fname, prefix, out, only == "persistent" and rawget(m, "_transient"))
end

-- {prefix, module} for m and every module under it, each before its
-- children; a module held in two places comes twice (state_dict names
-- both, as PyTorch's); one inside itself is an error
local function tree(m, fname, prefix, out, path)
  out, path = out or {}, path or {}
  out[#out + 1] = {prefix or "", m}
  path[m] = true
  for _, e in ipairs(own_children(m, fname, prefix or "", {})) do
    if path[e[2]] then
      fail(fname, "'%s' is a module that holds it: a module cannot hold itself", e[1])
    end
    tree(e[2], fname, e[1] .. ".", out, path)
  end
  path[m] = nil
  return out
end

-- {name, tensor, field, module} for every buffer under m (persistent ones
-- alone with only "persistent")
local function buffers_of(m, fname, only)
  local out = {}
  for _, e in ipairs(tree(m, fname)) do
    for _, b in ipairs(own_buffers(e[2], fname, e[1], {}, only)) do
      b[4] = e[2]
      out[#out + 1] = b
    end
  end
  return out
end

-- {name, tensor} for every parameter under m, in registration order (own
-- first, then each child's); with once, a tensor reached again (a module
-- or a weight held in two places) is left out, as PyTorch's parameters()
-- leaves it, so it is counted, clipped and stepped once
local function params_of(m, fname, once, prefix)
  local out, seen = {}, {}
  for _, e in ipairs(tree(m, fname, prefix)) do
    for _, p in ipairs(own_params(e[2], fname, e[1], {})) do
      if not (once and seen[p[2]]) then
        seen[p[2]] = true
        out[#out + 1] = p
      end
    end
  end
  return out
end

-- the tensors qkv.nn.Parameter made: put in a module's new field, each
-- is registered as a parameter (PyTorch's nn.Parameter); weak, so that a
-- mark never keeps a tensor alive
local PARAM = setmetatable({}, {__mode = "k"})

-- m.k = v for a k that m does not hold (a new field, or a parameter or
-- submodule set to nil before): a registered name takes a tensor (a
-- parameter or a buffer) or a module (a submodule), or nil; a module put
-- in a new field is registered as a submodule, and a qkv.nn.Parameter as
-- a parameter, as PyTorch's setattr does
local function set_slot(self, k, v)
  local mt = getmetatable(self)
  local name = rawget(mt, "__name")
  if v ~= nil then
    for _, n in ipairs(rawget(self, "_params")) do
      if n == k and not qkv.is_tensor(v) then
        fail(name, "'%s' is a parameter: assign a tensor, or nil to remove it, got %s", k, type(v))
      end
    end
    local child = false
    for _, n in ipairs(rawget(self, "_children")) do
      if n == k then child = true end
    end
    if child and not is_module(v) then
      fail(name, "'%s' is a submodule: assign a module, or nil to remove it, got %s", k, type(v))
    end
    for _, n in ipairs(rawget(self, "_buffers") or {}) do
      if n == k and not qkv.is_tensor(v) then
        fail(name, "'%s' is a buffer: assign a tensor, or nil to remove it, got %s", k, type(v))
      end
    end
    if not child and is_module(v) and type(k) == "string" then
      local list = rawget(self, "_children")
      list[#list + 1] = k
    elseif qkv.is_tensor(v) and PARAM[v] and type(k) == "string" then
      local list, known = rawget(self, "_params"), false
      for _, n in ipairs(list) do known = known or n == k end
      if not known then list[#list + 1] = k end
    end
  end
  rawset(self, k, v)
end

-- before a forward: every parameter and submodule it holds is a tensor or
-- a module (m.bias = 3 is an error naming bias, not one of the op it
-- reaches), and none the forward needs was removed (m.weight = nil: Linear
-- cannot do without its weight, while m.bias = nil is PyTorch's bias=False)
-- (each forward checks: no lists made unless a field is wrong, when
-- owned() makes them to raise its error)
local SLOTS = {"_params", "_children", "_buffers"}
local function check_slots(self, name)
  for _, list in ipairs(SLOTS) do
    local ok = KINDS[list][1]
    for _, n in ipairs(rawget(self, list) or {}) do
      local v = rawget(self, n)        -- (set_slot keeps them raw; a nil one
      if v ~= nil and not ok(v) then   -- through __index walks the lists)
        owned(list, self, name, "", {})
      end
    end
  end
  for _, n in ipairs(rawget(self, "_needs")) do
    if rawget(self, n) == nil then
      local child = false
      for _, c in ipairs(rawget(self, "_children")) do child = child or c == n end
      fail(name, "'%s' is nil and its forward needs it: assign %s back", n, child and "a module" or "a tensor")
    end
  end
end

-- the results of a forward, once the module is out of it
local function forward_done(self, name, ...)
  -- false, not nil: a key set to nil and back to true each call made Lua
  -- rehash the module's table, 3.5 of a small Linear's 10 µs
  rawset(self, "_running", false)
  return named(name, ...)
end

-- a class: its instances are callable and print like PyTorch's modules;
-- errors in making one or in its forward name the class; a method called
-- with '.' (m.forward(x)) says so (qkv.methods). A forward that reaches
-- its own module again (a module inside itself: s[1] = s) is an error, not
-- a stack overflow.
-- m.k for a k that m does not hold: a method of its class; nil for a
-- name m registered (a parameter, submodule or buffer set to nil:
-- PyTorch's m.bias = None); else an error naming the closest of m's
-- fields and methods, as PyTorch's AttributeError ("Linear has no field
-- 'W' (did you mean 'weight'?)"), never a silent nil. Names starting with
-- '_' and keys that are not strings stay nil (probes, containers' keys)
local function field(cls, self, k)
  local v = cls[k]
  if v ~= nil or type(k) ~= "string" or k:sub(1, 1) == "_" then return v end
  local optional = rawget(cls, "_optional")     -- settings that may be nil (PyTorch's None)
  if optional and optional[k] then return nil end
  for _, list in ipairs{"_params", "_children", "_buffers"} do
    for _, n in ipairs(rawget(self, list) or {}) do
      if n == k then return nil end
    end
  end
  local names, seen = {}, {}
  local function add(n)
    if type(n) == "string" and n:sub(1, 1) ~= "_" and not seen[n] then
      seen[n] = true
      names[#names + 1] = n
    end
  end
  for n in next, self do add(n) end
  for _, list in ipairs{"_params", "_children", "_buffers"} do
    for _, n in ipairs(rawget(self, list) or {}) do add(n) end
  end
  for _, t in ipairs{cls, Module} do
    for n, f in next, t do if type(f) == "function" then add(n) end end
  end
  table.sort(names)
  -- qkv's old names of PyTorch's weight and bias
  local old = ({W = "weight", w = "weight", b = "bias"})[k]
  local near = old and seen[old] and old or qkv._nearest(k, names)
  fail(rawget(cls, "__name") or "Module", "has no field '%s'%s", k,
       near and string.format(" (did you mean '%s'?)", near) or "")
end

local function make_class(name)
  local c = setmetatable({}, {__index = Module})
  c.__index = function(self, k) return field(c, self, k) end
  c.__newindex = set_slot
  c.__name = name
  c.__call = function(self, ...) return self:forward(...) end
  c.__tostring = function(self) return self:repr("") end
  setmetatable(c, {__index = Module, __call = function(cls, ...)
    local m = setmetatable({_params = {}, _children = {}, _needs = {}, _buffers = {},
                            _transient = {}, training = true}, cls)
    named(name, pcall(m.init, m, ...))
    return m
  end, __newindex = function(cls, k, v)
    if k == "forward" then
      local f = v
      v = function(self, ...)
        check_slots(self, name)
        if rawget(self, "_running") then
          fail(name, "its forward reached the module again: a module cannot hold itself")
        end
        rawset(self, "_running", true)
        return forward_done(self, name, pcall(f, self, ...))
      end
    end
    if type(k) == "string" and k:sub(1, 1) ~= "_" and type(v) == "function" then
      v = methods.wrap(cls, k, v, "m", name)
    end
    rawset(cls, k, v)
  end})
  return c
end

-- a class of qkv.nn, registered there under its name
local function class(name)
  local c = make_class(name)
  nn[name] = c
  return c
end


-- register a tensor field, which requires grad (as nn.Parameter does);
-- needed: the forward cannot do without it (a weight, not a bias); t nil
-- registers the name alone (PyTorch's bias=False: m.bias reads nil)
function Module:param(name, t, needed)
  self._params[#self._params + 1] = name
  if needed then self._needs[#self._needs + 1] = name end
  if t ~= nil then self[name] = t:requires_grad_() end
  return t
end

-- every parameter's .grad back to nil
function Module:zero_grad()
  for _, p in ipairs(params_of(self, "zero_grad", true)) do p[2].grad = nil end
  return self
end

local FLOATS = {float32 = true, float64 = true, float16 = true, bfloat16 = true}

-- the named_* methods' iterator over a list of {name, value}: name, value
-- for a generic for, a trailing dot of tree()'s prefixes taken off
local function named_iter(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return (e[1]:gsub("%.$", "")), e[2] end
  end
end

-- the values alone of such a list (parameters, buffers, children)
local function values(list)
  local out = {}
  for i, e in ipairs(list) do out[i] = e[2] end
  return out
end

-- every parameter moved to a device ("cpu" or "cuda") or converted to a
-- float dtype, children too, as nn.Module.to does; returns the module. The
-- parameters are new tensors (an optimizer made before says so at its step);
-- a tensor held in two places gets one new tensor, in both.
-- errors name fname, the method the script called (double, cuda, ...)
local function convert(self, to, fname)
  local field = (to == "cpu" or to == "cuda") and "device" or FLOATS[to] and "dtype"
  if not field then
    fail(fname, "expected a device (\"cpu\", \"cuda\") or a float dtype, got %s", tostring(to))
  end
  local made = {}                        -- old tensor -> its new one
  for _, e in ipairs(tree(self, fname)) do
    local m = e[2]
    for _, p in ipairs(own_params(m, fname, e[1], {})) do
      local t = p[2]
      if not made[t] and t[field] ~= to then made[t] = t:detach():to(to):requires_grad_() end
      if made[t] then rawset(m, p[3], made[t]) end
    end
    -- buffers move with it, and take a float dtype where they are floats
    for _, b in ipairs(own_buffers(m, fname, e[1], {})) do
      local t = b[2]
      if not made[t] and t[field] ~= to and (field == "device" or FLOATS[t.dtype]) then
        made[t] = t:to(to)
      end
      if made[t] then rawset(m, b[3], made[t]) end
    end
  end
  return self
end
function Module:to(to) return convert(self, to, "to") end
function Module:cuda() return convert(self, "cuda", "cuda") end
function Module:cpu() return convert(self, "cpu", "cpu") end
function Module:double() return convert(self, "float64", "double") end
function Module:float() return convert(self, "float32", "float") end
function Module:half() return convert(self, "float16", "half") end
function Module:bfloat16() return convert(self, "bfloat16", "bfloat16") end

-- register_buffer(name, t [, persistent]): a tensor that is the module's
-- state but not a parameter (a mask, running statistics), as PyTorch's:
-- m[name] holds it, to/cuda/double move it, state_dict has it unless
-- persistent is false, load fills it
function Module:register_buffer(name, t, persistent)
  local cls = getmetatable(self).__name
  if type(name) ~= "string" or name == "" or name:sub(1, 1) == "_" then
    fail("register_buffer", "name must be a non-empty string not starting with '_', got %s",
         type(name) == "string" and string.format("%q", name) or type(name))
  end
  if t ~= nil then checktensor("register_buffer", "t", t) end
  if persistent ~= nil and type(persistent) ~= "boolean" then
    fail("register_buffer", "persistent must be a boolean, got %s", type(persistent))
  end
  for _, list in ipairs{"_params", "_children"} do
    for _, n in ipairs(rawget(self, list)) do
      if n == name then
        fail("register_buffer", "%s's '%s' is a %s already", cls, name,
             list == "_params" and "parameter" or "submodule")
      end
    end
  end
  local bufs, known = rawget(self, "_buffers"), false
  for _, n in ipairs(bufs) do known = known or n == name end
  if not known then bufs[#bufs + 1] = name end
  rawget(self, "_transient")[name] = persistent == false or nil
  rawset(self, name, t)
  return self
end

-- for name, t in m:named_buffers() do: every buffer under m, names as
-- state_dict's; m:buffers(): the tensors alone, as a list
function Module:named_buffers() return named_iter(buffers_of(self, "named_buffers")) end
function Module:buffers() return values(buffers_of(self, "buffers")) end

-- for name, m in m:named_modules() do: m itself ("") and every module
-- under it, each before its children, names dotted as state_dict's;
-- named_children and children: the direct ones
function Module:named_modules() return named_iter(tree(self, "named_modules")) end
function Module:named_children() return named_iter(own_children(self, "named_children", "", {})) end
function Module:children() return values(own_children(self, "children", "", {})) end

-- f(m) for every module under m, children first, then m; returns m (as
-- PyTorch's apply, for initialising weights)
function Module:apply(f)
  if type(f) ~= "function" then fail("apply", "f must be a function, got %s", type(f)) end
  local list = tree(self, "apply")
  for i = #list, 1, -1 do f(list[i][2]) end
  return self
end

-- every parameter's requires_grad set to flag (true by default): freezing
-- a part of a model; returns m
function Module:requires_grad_(flag)
  if flag == nil then flag = true end
  if type(flag) ~= "boolean" then fail("requires_grad_", "flag must be a boolean, got %s", type(flag)) end
  for _, p in ipairs(params_of(self, "requires_grad_", true)) do p[2]:requires_grad_(flag) end
  return self
end

-- register a submodule, which the forward needs
function Module:child(name, m)
  self._children[#self._children + 1] = name
  self._needs[#self._needs + 1] = name
  self[name] = m
  return m
end

local function uniform(bound, ...)
  return (qkv.rand(...) * 2 - 1) * bound
end

-- each parameter, each once, in registration order (own first, then each
-- child's), as a list of tensors: PyTorch's parameters();
-- named_parameters gives their names
function Module:parameters() return values(params_of(self, "parameters", true)) end

-- for name, p in m:named_parameters([{prefix =, recurse =}]) do: the pairs
-- of parameters(), in its order (recurse false: m's own only), each name
-- after prefix and a dot, as PyTorch's named_parameters()
function Module:named_parameters(opts)
  opts = checkopts("named_parameters", opts, {"prefix", "recurse"}, {"recurse"})
  local prefix = opts.prefix == nil and "" or opts.prefix
  if type(prefix) ~= "string" then
    fail("named_parameters", "option 'prefix' must be a string, got %s", type(prefix))
  end
  if prefix ~= "" then prefix = prefix .. "." end
  local list = {}
  if opts.recurse == false then
    local seen = {}
    for _, p in ipairs(own_params(self, "named_parameters", prefix, {})) do
      if not seen[p[2]] then seen[p[2]] = true; list[#list + 1] = p end
    end
  else
    list = params_of(self, "named_parameters", true, prefix)
  end
  return named_iter(list)
end

-- the number of weights, each tensor counted once
function Module:nparams()
  local n = 0
  for _, p in ipairs(params_of(self, "nparams", true)) do n = n + p[2]:numel() end
  return n
end

-- training mode (the default) or evaluation mode, for this module and its
-- children, as PyTorch's train() / eval(); Dropout reads it
local function set_mode(self, mode, fname)
  for _, e in ipairs(tree(self, fname)) do rawset(e[2], "training", mode) end
  return self
end

function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= "boolean" then fail("train", "mode must be a boolean, got %s", type(mode)) end
  return set_mode(self, mode, "train")
end

function Module:eval() return set_mode(self, false, "eval") end

function Module:extra() return "" end

-- the module as PyTorch prints it; a module inside itself is an error
function Module:repr(indent)
  if indent == "" then tree(self, "tostring") end
  local s = self.__name .. "(" .. self:extra()
  local children = own_children(self, "tostring", "", {})
  if #children == 0 then return s .. ")" end
  local inner = indent .. "  "
  for _, e in ipairs(children) do
    s = s .. "\n" .. inner .. "(" .. e[1] .. "): " .. e[2]:repr(inner)
  end
  return s .. "\n" .. indent .. ")"
end

-- A constructor's options checked, with PyTorch's factory keywords dtype
-- (a float dtype, float32 by default) and device ("cpu" or "cuda"), which
-- known need not list. Returns the options and the dtype to make the
-- parameters in: float64 for float64, else float32, which place() then
-- converts, so that Linear(4, 2, {dtype = "bfloat16", device = "cuda"})
-- holds the numbers of Linear(4, 2):to("bfloat16"):to("cuda").
local DEVICES = {cpu = true, cuda = true}
local function opts_of(fname, opts, known, flags)
  local all, has = {}, {}
  for _, k in ipairs(known) do all[#all + 1], has[k] = k, true end
  for _, k in ipairs{"dtype", "device"} do
    if not has[k] then all[#all + 1] = k end
  end
  opts = checkopts(fname, opts, all, flags)
  local dt = opts.dtype or "float32"
  if not FLOATS[dt] then
    fail(fname, "dtype must be 'float32', 'float64', 'float16' or 'bfloat16', got %s", tostring(dt))
  end
  if opts.device ~= nil and not DEVICES[opts.device] then
    fail(fname, "device must be 'cpu' or 'cuda', got %s", tostring(opts.device))
  end
  return opts, dt == "float64" and "float64" or "float32"
end

-- the module made with opts (opts_of's) as they ask: its parameters, its
-- children's too, converted to a half dtype and moved to the device, as
-- m:to does; the end of a constructor that takes them
local function place(self, opts)
  if opts.dtype == "float16" or opts.dtype == "bfloat16" then convert(self, opts.dtype, "to") end
  if opts.device ~= nil then convert(self, opts.device, "to") end
  return self
end

-- Module's own init: a class of a script's that needs no arguments may
-- leave init out
function Module:init() end

methods.guard(Module, "m", "module")     -- m.parameters() says so

-- qkv.nn.Module(name): a class of the script's own, as `class
-- Name(nn.Module)`: its init(self, ...) is __init__ (no super call: the
-- instance is ready when init runs), its forward(self, ...) the forward;
-- submodules and qkv.nn.Parameter tensors put in fields are registered,
-- buffers by self:register_buffer; every Module method works on it. Not
-- put in qkv.nn: the class is the script's
setmetatable(Module, {__call = function(_, name, ...)
  if select("#", ...) > 0 then fail("Module", "takes one argument, the class's name") end
  if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
    fail("Module", "name must be a name (letters, digits, '_'), got %s",
         type(name) == "string" and string.format("%q", name) or type(name))
  end
  return make_class(name)
end})

-- qkv.nn.Parameter(t [, requires_grad]): t as a parameter (a leaf that
-- requires grad unless requires_grad is false; t itself when it is a
-- leaf, else a detached copy sharing its data), which a module registers
-- when it is put in a field, as nn.Parameter
function nn.Parameter(t, requires_grad, ...)
  if select("#", ...) > 0 then fail("Parameter", "takes a tensor and a boolean") end
  checktensor("Parameter", "t", t)
  if requires_grad ~= nil and type(requires_grad) ~= "boolean" then
    fail("Parameter", "requires_grad must be a boolean, got %s", type(requires_grad))
  end
  if requires_grad ~= false and not FLOATS[t.dtype] then
    fail("Parameter", "only float tensors can require grad, got %s", t.dtype)
  end
  local p = t.is_leaf and t or t:detach()
  p:requires_grad_(requires_grad ~= false)
  PARAM[p] = true
  return p
end

return {
  nn = nn, Module = Module, class = class, uniform = uniform, opts_of = opts_of, place = place,
  fail = fail, named = named, checkopts = checkopts, flag = flag, noextra = noextra,
  checkdim = checkdim, checktensor = checktensor, is_module = is_module, what = what,
  set_slot = set_slot, tree = tree, params_of = params_of, field = field,
  buffers_of = buffers_of, FLOATS = FLOATS,
  inside = function(source) SOURCES[source] = true end,
}
