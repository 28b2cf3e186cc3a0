-- nn/layers.lua: qkv.nn's layers (Linear; the activations GELU, ReLU, SiLU,
-- Tanh, Softmax; LayerNorm, RMSNorm, Dropout, Embedding, Identity) and containers
-- (Sequential, ModuleList), each a class of nn/module.lua.

local qkv = require "qkv"
local autocast_args = require("qkv.methods").autocast_args
local M = require "qkv.nn.module"
M.inside(debug.getinfo(1, "S").source)

local nn, class, fail, checkopts, flag = M.nn, M.class, M.fail, M.checkopts, M.flag
local checkdim, checktensor, uniform, opts_of = M.checkdim, M.checktensor, M.uniform, M.opts_of
local place = M.place

local Linear = class("Linear")

-- Linear(d_in, d_out [, {bias = true, dtype = "float32", device}]); d_in
-- or d_out may be 0, as in PyTorch (d_in = 0: the bias alone, drawn from
-- ±0, PyTorch's bound for no inputs)
function Linear:init(d_in, d_out, opts)
  for name, v in pairs{d_in = d_in, d_out = d_out} do
    if math.type(v) ~= "integer" or v < 0 then
      fail("Linear", "%s must be a non-negative integer, got %s", name, tostring(v))
    end
  end
  local dt
  opts, dt = opts_of("Linear", opts, {"bias", "dtype", "device"}, {"bias"})
  local bound = d_in > 0 and 1 / math.sqrt(d_in) or 0
  self.d_in, self.d_out = d_in, d_out
  -- weight (d_out, d_in), as PyTorch's: drawn as (d_in, d_out) and
  -- transposed, so that a seed gives the x W of qkv's documents
  self:param("weight", uniform(bound, d_in, d_out, dt):t():contiguous(), true)
  local b = flag(opts, "bias", true) and uniform(bound, d_out, dt) or nil
  self:param("bias", b and d_in == 0 and b:zero_() or b)   -- ±0: +0, as PyTorch's
  place(self, opts)
end

function Linear:forward(x)
  -- under autocast the weight itself is cast (and cached), not its view
  -- (rawget: a nil bias through the module's __index costs a search)
  local xc, w, b = autocast_args("project", checktensor("Linear", "x", x), self.weight,
                                 rawget(self, "bias"))
  return qkv.project(xc, w:t(), b)
end

function Linear:extra()
  return string.format("in_features=%d, out_features=%d, bias=%s",
                       self.d_in, self.d_out, tostring(self.bias ~= nil))
end

-- GELU([approximate = "none"]) or GELU({approximate =}): PyTorch's;
-- "none" the exact qkv.gelu, "tanh" PyTorch's approximation
-- 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed in float32
-- for the 2-byte dtypes, as PyTorch's; read at each call, as PyTorch's
-- attribute
local GELU = class("GELU")
local function approximate_of(fname, a)
  if a == nil then return "none" end
  if a ~= "none" and a ~= "tanh" then
    fail(fname, "approximate must be \"none\" or \"tanh\", got %s",
         type(a) == "string" and string.format("%q", a) or type(a))
  end
  return a
end

function GELU:init(approximate, ...)
  if select("#", ...) > 0 then
    fail("GELU", "takes one argument, approximate (\"none\" or \"tanh\"), got %d",
         select("#", ...) + 1)
  end
  if type(approximate) == "table" then
    approximate = checkopts("GELU", approximate, {"approximate"}).approximate
  end
  self.approximate = approximate_of("GELU", approximate)
end

local HALF = {float16 = true, bfloat16 = true}
local function gelu_tanh(x)
  local dt = x.dtype
  if HALF[dt] then x = x:to("float32") end
  local y = x * 0.5 * (((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)):tanh() + 1)
  return HALF[dt] and y:to(dt) or y
end

function GELU:forward(x)
  checktensor("GELU", "x", x)
  if approximate_of("GELU", rawget(self, "approximate")) == "tanh" then return gelu_tanh(x) end
  return qkv.gelu(x)
end

function GELU:extra()
  local a = rawget(self, "approximate")
  return a ~= "none" and string.format("approximate='%s'", tostring(a)) or ""
end

-- ReLU(), SiLU(), Tanh(): f(x) elementwise, no weights; PyTorch's inplace
-- has no counterpart, so any argument is an error rather than ignored
local function activation(name, f)
  local c = class(name)
  function c:init(...)
    local n = select("#", ...)
    if n > 0 then
      fail(name, "expected no arguments, got %d (%s): qkv's activations have no inplace",
           n, type((...)))
    end
  end
  function c:forward(x) return f(checktensor(name, "x", x)) end
end
activation("ReLU", qkv.relu)
activation("SiLU", qkv.silu)
activation("Tanh", qkv.tanh)

-- Softmax(dim) or Softmax{dim = }: dim 1-based or negative from the end,
-- and required (PyTorch's implicit dim is deprecated)
local Softmax = class("Softmax")
function Softmax:init(dim, ...)
  if select("#", ...) > 0 then fail("Softmax", "expected Softmax(dim) or Softmax{dim = d}") end
  if type(dim) == "table" then dim = checkopts("Softmax", dim, {"dim"}).dim end
  if dim == nil then
    fail("Softmax", "dim is required, as in new PyTorch code: Softmax(-1) for the last dim "
         .. "(dims count from 1)")
  end
  if math.type(dim) ~= "integer" or dim == 0 then
    fail("Softmax", "dim must be a nonzero integer (1-based, or negative from the end), got %s",
         tostring(dim))
  end
  self.dim = dim
end
function Softmax:forward(x)
  checktensor("Softmax", "x", x)
  local nd, dim = math.max(x:dim(), 1), self.dim
  if dim > nd or dim < -nd then
    fail("Softmax", "dim %d is out of range for x %s (1 to %d, or -%d to -1)", dim,
         tostring(x.shape), nd, nd)
  end
  return qkv.softmax(x, dim)
end
function Softmax:extra() return "dim=" .. self.dim end


-- LayerNorm(shape [, {eps = 1e-5, elementwise_affine = true, bias = true,
-- dtype, device}]): weight = 1 and bias = 0 of the normalized shape, as PyTorch's
local LayerNorm = class("LayerNorm")
function LayerNorm:init(shape, opts)
  local dt
  opts, dt = opts_of("LayerNorm", opts, {"eps", "elementwise_affine", "bias", "dtype"},
                    {"bias", "elementwise_affine"})
  local sizes = type(shape) == "table" and {table.unpack(shape)} or {shape}
  for i, n in ipairs(sizes) do checkdim("LayerNorm", "normalized_shape[" .. i .. "]", n) end
  if #sizes == 0 then fail("LayerNorm", "normalized_shape is empty") end
  self.normalized_shape, self.eps = sizes, opts.eps or 1e-5
  if type(self.eps) ~= "number" then fail("LayerNorm", "eps must be a number, got %s", type(self.eps)) end
  local bias = flag(opts, "bias", true)
  if flag(opts, "elementwise_affine", true) then
    self:param("weight", qkv.ones(sizes, dt))
    self:param("bias", bias and qkv.zeros(sizes, dt) or nil)
  else
    self:param("weight", nil)
    self:param("bias", nil)
  end
  place(self, opts)
end

function LayerNorm:forward(x)
  return qkv.layer_norm(checktensor("LayerNorm", "x", x), self.normalized_shape, self.weight,
                        self.bias, self.eps)
end

function LayerNorm:extra()
  local shape = table.concat(self.normalized_shape, ", ")
  return string.format("(%s%s), eps=%g, elementwise_affine=%s", shape,
                       #self.normalized_shape == 1 and "," or "", self.eps, tostring(self.weight ~= nil))
end

-- RMSNorm(shape [, {eps, elementwise_affine = true, dtype, device}]): weight = 1 of the
-- normalized shape, as PyTorch's weight; eps nil: qkv.rms_norm's default
local RMSNorm = class("RMSNorm")
RMSNorm._optional = {eps = true}                -- nil: qkv.rms_norm's default, PyTorch's None
function RMSNorm:init(shape, opts)
  local dt
  opts, dt = opts_of("RMSNorm", opts, {"eps", "elementwise_affine", "dtype"},
                    {"elementwise_affine"})
  local sizes = type(shape) == "table" and {table.unpack(shape)} or {shape}
  for i, n in ipairs(sizes) do checkdim("RMSNorm", "normalized_shape[" .. i .. "]", n) end
  if #sizes == 0 then fail("RMSNorm", "normalized_shape is empty") end
  self.normalized_shape, self.eps = sizes, opts.eps
  if self.eps ~= nil and type(self.eps) ~= "number" then
    fail("RMSNorm", "eps must be a number, got %s", type(self.eps))
  end
  self:param("weight", flag(opts, "elementwise_affine", true) and qkv.ones(sizes, dt) or nil)
  place(self, opts)
end

function RMSNorm:forward(x)
  return qkv.rms_norm(checktensor("RMSNorm", "x", x), self.normalized_shape, self.weight, self.eps)
end

function RMSNorm:extra()
  local shape = table.concat(self.normalized_shape, ", ")
  return string.format("(%s%s), eps=%s, elementwise_affine=%s", shape,
                       #self.normalized_shape == 1 and "," or "",
                       self.eps and string.format("%g", self.eps) or "None", tostring(self.weight ~= nil))
end

-- Dropout([p = 0.5]): qkv.dropout while training, the identity in eval();
-- PyTorch's inplace has no counterpart, so a second argument is an error
-- (x would else stay as it was, where PyTorch's Dropout(p, True) zeros it)
local Dropout = class("Dropout")
function Dropout:init(p, ...)
  M.noextra("Dropout", "PyTorch's inplace has no counterpart", 1, p, ...)
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    fail("Dropout", "p must be a number in [0, 1], got %s", tostring(p))
  end
  self.p = p
end

function Dropout:forward(x) return qkv.dropout(checktensor("Dropout", "x", x), self.p, self.training) end
function Dropout:extra() return string.format("p=%g", self.p) end

-- Embedding(num_embeddings, dim [, {dtype, device}]): weight (num, dim) from
-- N(0, 1), as PyTorch's; m(ids) is qkv.embedding(ids, m.weight)
local Embedding = class("Embedding")
function Embedding:init(num, dim, opts)
  checkdim("Embedding", "num_embeddings", num)
  checkdim("Embedding", "embedding_dim", dim)
  local o, dt = opts_of("Embedding", opts, {"dtype", "device"})
  self.num_embeddings, self.embedding_dim = num, dim
  self:param("weight", qkv.randn(num, dim, dt), true)
  place(self, o)
end

function Embedding:forward(ids) return qkv.embedding(checktensor("Embedding", "ids", ids), self.weight) end
function Embedding:extra() return string.format("%d, %d", self.num_embeddings, self.embedding_dim) end

-- RotaryEmbedding(dim [, {base = 10000, max_len = 2048, interleaved = false}]):
-- qkv.rope with the cos and sin of every position up to max_len made once
-- (float64, on the CPU; a copy per device and dtype as forwards ask for
-- them). m(x, positions) rotates x (..., n, dim); positions as qkv.rope's,
-- each at most max_len. No parameters.
local RotaryEmbedding = class("RotaryEmbedding")
function RotaryEmbedding:init(dim, opts)
  local R = require "qkv.rope"
  checkdim("RotaryEmbedding", "dim", dim)
  if dim % 2 ~= 0 then fail("RotaryEmbedding", "dim = %d must be even (features turn in pairs)", dim) end
  local base, inter, o = R.options("RotaryEmbedding", opts, {"max_len"})
  local max = o.max_len or 2048
  checkdim("RotaryEmbedding", "max_len", max)
  self.dim, self.base, self.max_len, self.interleaved = dim, base, max, inter
  local c, s = R.angles(qkv.arange(1, max + 1, "float64"), dim, base)
  self._tables = {["cpu float64"] = {c, s}}
end

function RotaryEmbedding:forward(x, positions)
  local R = require "qkv.rope"
  R.check_x("RotaryEmbedding", x)
  if x:size(-1) ~= self.dim then
    fail("RotaryEmbedding", "x %s has d = %d, not the dim = %d it was made for", tostring(x.shape),
         x:size(-1), self.dim)
  end
  local p = R.positions("RotaryEmbedding", x, positions, self.max_len)
  local key = x.device .. " " .. x.dtype
  local t = self._tables[key]
  if t == nil then
    local c, s = table.unpack(self._tables["cpu float64"])
    t = {c:to(x.device):to(x.dtype), s:to(x.device):to(x.dtype)}
    self._tables[key] = t
  end
  -- the tables' rows of the positions: (..., n, dim/2)
  local idx = p:long():reshape(-1):to(x.device)      -- row p is position p
  local function rows(tab)
    local r = tab:index_select(1, idx)
    local s = {}
    for i = 1, p:dim() do s[i] = p:size(i) end
    s[#s + 1] = self.dim // 2
    return r:reshape(table.unpack(s))
  end
  return R.apply(x, rows(t[1]), rows(t[2]), self.interleaved)
end

function RotaryEmbedding:extra()
  return string.format("%d, base=%g, max_len=%d, interleaved=%s", self.dim, self.base, self.max_len,
                       tostring(self.interleaved))
end

local Identity = class("Identity")
function Identity:init() end
function Identity:forward(x) return x end

-- The containers, Sequential and ModuleList, hold their modules at
-- positions 1..n in a list of their own (_items; _children names the
-- positions, for the Module methods), so that every m[i] = v is seen:
-- m[i] = module replaces position i (-1 the last), as PyTorch's
-- __setitem__; past the end is an error, as PyTorch's IndexError, and so
-- are a hole (m[i] = nil) and anything not a module.

-- a module, else an error naming what: a table whose class has a forward
local function checkmodule(fname, what, m)
  if not M.is_module(m) then
    fail(fname, "%s is not a module, got %s", what, qkv.is_tensor(m) and "a tensor" or type(m))
  end
  return m
end

-- m at the end of the container
local function add(self, m)
  local items = rawget(self, "_items")
  items[#items + 1] = m
  self._children[#items] = #items
end

-- a container's m[i]: m[-1] is the last module, as PyTorch's; m[0] is an
-- error, since positions count from 1; past the end is nil, so that ipairs
-- stops there
local function list_index(cls)
  local name = cls.__name
  return function(self, k)
    local i = math.type(k) == "float" and math.tointeger(k) or k
    if math.type(i) ~= "integer" then return M.field(cls, self, k) end
    local items = rawget(self, "_items")
    if i == 0 then
      error(string.format("%s: index 0: positions count from 1 (m[1] is the first module, "
                          .. "m[-1] the last)", name), 2)
    end
    if i < 0 then i = #items + 1 + i end
    return items[i]
  end
end

-- a container's m[k] = v: a module at a position it has
local function list_newindex(cls, hint)
  local name = cls.__name
  return function(self, k, v)
    if type(k) ~= "number" then
      if M.is_module(v) then
        fail(name, "m.%s = module: a %s holds its modules at positions 1, 2, ...%s", tostring(k), name, hint)
      end
      return M.set_slot(self, k, v)
    end
    local items = rawget(self, "_items")
    local n, i = #items, math.tointeger(k)
    if i == nil then fail(name, "index must be an integer, got %s", tostring(k)) end
    if i == 0 then fail(name, "index 0: positions count from 1 (m[1] is the first module, m[-1] the last)") end
    if i > n or i < -n then
      fail(name, "index %d is out of range: it has %d module%s (1 to %d, or -%d to -1)%s", i, n,
           n == 1 and "" or "s", n, n, hint)
    end
    if i < 0 then i = n + 1 + i end
    if v == nil then
      fail(name, "m[%d] = nil would leave a hole: a %s holds modules (PyTorch's del m[i] has no counterpart)",
           i, name)
    end
    if not M.is_module(v) then fail(name, "m[%d] must be a module, got %s", i, (M.what(v):gsub("^an? ", ""))) end
    items[i] = v
  end
end

-- a container class: its items, # and the assignment
local function container(name, hint)
  local cls = class(name)
  cls.__index = list_index(cls)
  cls.__newindex = list_newindex(cls, hint)
  cls.__len = function(self) return #rawget(self, "_items") end
  return cls
end

-- Sequential(m1, m2, ...): m[1], m[2], ... and #m as a Lua list
local Sequential = container("Sequential", "")
function Sequential:init(...)
  rawset(self, "_items", {})
  for i = 1, select("#", ...) do
    local m = select(i, ...)
    if not M.is_module(m) then fail("Sequential", "argument #%d is not a module", i) end
    add(self, m)
  end
end

function Sequential:forward(x)
  for _, m in ipairs(rawget(self, "_items")) do x = m(x) end
  return x
end

-- ModuleList([modules]): modules held in a list, as m[1], ..., #m, ipairs;
-- their weights named "1.weight", "2.bias", ... as Sequential's
local ModuleList = container("ModuleList", "; m:append(module) adds one")

-- the modules of a list (a plain list, a ModuleList or a Sequential), read
-- raw, each checked before any is added
local function modules_of(fname, list)
  if type(list) ~= "table" then
    fail(fname, "modules must be a list of modules, got %s", qkv.is_tensor(list) and "a tensor" or type(list))
  end
  local mt = getmetatable(list)
  if mt ~= nil and mt ~= ModuleList and mt ~= nn.Sequential then
    fail(fname, "modules must be a list of modules, got a %s: put it in a list, {m}",
         type(mt) == "table" and rawget(mt, "__name") or "table with a metatable")
  end
  if mt ~= nil then list = rawget(list, "_items") end
  local out = {}
  for i = 1, rawlen(list) do out[i] = checkmodule(fname, "modules[" .. i .. "]", rawget(list, i)) end
  return out
end

function ModuleList:init(modules, ...)
  rawset(self, "_items", {})
  if select("#", ...) > 0 then fail("ModuleList", "expected ModuleList([modules]), one list") end
  if modules ~= nil then
    for _, m in ipairs(modules_of("ModuleList", modules)) do add(self, m) end
  end
end

-- m:append(module): added at the end; returns m
function ModuleList:append(m)
  checkmodule("append", "module", m)
  add(self, m)
  return self
end

-- m:extend(modules): each added at the end; returns m
function ModuleList:extend(modules)
  for _, m in ipairs(modules_of("extend", modules)) do add(self, m) end
  return self
end

-- m:insert(index, module): module at index (1 to #m + 1, or negative from
-- the end, as PyTorch's), the later ones moved up; returns m
function ModuleList:insert(index, m)
  local items = rawget(self, "_items")
  local n = #items
  if math.type(index) ~= "integer" or index == 0 or index > n + 1 or index < -n then
    fail("insert", "index must be an integer in 1..%d or -%d..-1 (positions count from 1), got %s",
         n + 1, n, tostring(index))
  end
  checkmodule("insert", "module", m)
  if index < 0 then index = n + 1 + index end
  table.insert(items, index, m)
  self._children[n + 1] = n + 1
  return self
end

function ModuleList:forward()
  fail("ModuleList", "a ModuleList has no forward, as PyTorch's: call its modules "
       .. "(for _, layer in ipairs(m) do x = layer(x) end)")
end
