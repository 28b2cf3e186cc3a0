-- nn_layers.lua: qkv.nn's layers (Linear, GELU, LayerNorm, Dropout,
-- Embedding, Identity, Sequential), each a class of stdlib/qkv/nn_module.lua.

local qkv = require "qkv"
local M = require "qkv.nn_module"
M.inside(debug.getinfo(1, "S").source)

local class, fail, checkopts, flag = M.class, M.fail, M.checkopts, M.flag
local checkdim, checktensor, uniform, opts_of = M.checkdim, M.checktensor, M.uniform, M.opts_of

local Linear = class("Linear")

-- Linear(d_in, d_out [, {bias = true, dtype = "float32"}])
function Linear:init(d_in, d_out, opts)
  checkdim("Linear", "d_in", d_in)
  checkdim("Linear", "d_out", d_out)
  opts = checkopts("Linear", opts, {"bias", "dtype"}, {"bias"})
  local bound, dt = 1 / math.sqrt(d_in), opts.dtype or "float32"
  if dt ~= "float32" and dt ~= "float64" then
    fail("Linear", "dtype must be 'float32' or 'float64', got %s", tostring(dt))
  end
  self.d_in, self.d_out = d_in, d_out
  self:param("W", uniform(bound, d_in, d_out, dt))
  if flag(opts, "bias", true) then self:param("b", uniform(bound, d_out, dt)) end
end

function Linear:forward(x)
  return qkv.project(checktensor("Linear", "x", x), self.W, self.b)
end

function Linear:extra()
  return string.format("in_features=%d, out_features=%d, bias=%s",
                       self.d_in, self.d_out, tostring(self.b ~= nil))
end

local GELU = class("GELU")
function GELU:init() end
function GELU:forward(x) return qkv.gelu(checktensor("GELU", "x", x)) end


-- LayerNorm(shape [, {eps = 1e-5, elementwise_affine = true, bias = true,
-- dtype}]): w = 1 and b = 0 of the normalized shape, as PyTorch's
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
    self:param("w", qkv.ones(sizes, dt))
    if bias then self:param("b", qkv.zeros(sizes, dt)) end
  end
end

function LayerNorm:forward(x)
  return qkv.layer_norm(checktensor("LayerNorm", "x", x), self.normalized_shape, self.w,
                        self.b, self.eps)
end

function LayerNorm:extra()
  local shape = table.concat(self.normalized_shape, ", ")
  return string.format("(%s%s), eps=%g, elementwise_affine=%s", shape,
                       #self.normalized_shape == 1 and "," or "", self.eps, tostring(self.w ~= nil))
end

-- Dropout([p = 0.5]): qkv.dropout while training, the identity in eval()
local Dropout = class("Dropout")
function Dropout:init(p)
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    fail("Dropout", "p must be a number in [0, 1], got %s", tostring(p))
  end
  self.p = p
end

function Dropout:forward(x) return qkv.dropout(checktensor("Dropout", "x", x), self.p, self.training) end
function Dropout:extra() return string.format("p=%g", self.p) end

-- Embedding(num_embeddings, dim [, {dtype}]): W (num, dim) from N(0, 1),
-- as PyTorch's; m(ids) is qkv.embedding(ids, m.W)
local Embedding = class("Embedding")
function Embedding:init(num, dim, opts)
  checkdim("Embedding", "num_embeddings", num)
  checkdim("Embedding", "embedding_dim", dim)
  local _, dt = opts_of("Embedding", opts, {"dtype"})
  self.num_embeddings, self.embedding_dim = num, dim
  self:param("W", qkv.randn(num, dim):to(dt))
end

function Embedding:forward(ids) return qkv.embedding(checktensor("Embedding", "ids", ids), self.W) end
function Embedding:extra() return string.format("%d, %d", self.num_embeddings, self.embedding_dim) end

local Identity = class("Identity")
function Identity:init() end
function Identity:forward(x) return x end

-- Sequential(m1, m2, ...): m[1], m[2], ... and #m as a Lua list
local Sequential = class("Sequential")
function Sequential:init(...)
  for i, m in ipairs{...} do
    if getmetatable(m) == nil or getmetatable(m).forward == nil then
      fail("Sequential", "argument #%d is not a module", i)
    end
    self:child(i, m)
  end
end

function Sequential:forward(x)
  for _, n in ipairs(self._children) do x = self[n](x) end
  return x
end

