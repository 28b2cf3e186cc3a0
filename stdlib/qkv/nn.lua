-- nn.lua: qkv.nn, attention modules in plain Lua on the primitives.
--
-- A module is a table whose metatable is its class: calling it runs
-- forward (`attn(x)`), its weights are tensor fields (W_Q, W_K, ...) and its
-- submodules are module fields (proj, aligner, ...). Weights are stored as
-- (d_in, d_out), the transpose of PyTorch's Linear.weight, so that
-- `qkv.project(x, m.W)` is x W as the documents write it. They initialise as
-- PyTorch's nn.Linear does, uniform in ±1/sqrt(d_in), from qkv's generator.

local qkv = require "qkv"

local nn = {}

local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

-- errors point at the script line that called into qkv.nn
local function fail(fname, msg, ...)
  error(fname .. ": " .. string.format(msg, ...), caller(SOURCE, true))
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
  if msg then error(msg, caller(SOURCE, true)) end
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

---------------------------------------------------------------- layers

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

local function opts_of(fname, opts, known, flags)
  opts = checkopts(fname, opts, known, flags)
  local dt = opts.dtype or "float32"
  if dt ~= "float32" and dt ~= "float64" then
    fail(fname, "dtype must be 'float32' or 'float64', got %s", tostring(dt))
  end
  return opts, dt
end

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

---------------------------------------------------------------- attention

-- an attention projection weight: (d_in, d_out) with Linear's init
local function weight(m, name, d_in, d_out)
  m:param(name, uniform(1 / math.sqrt(d_in), d_in, d_out))
end

-- opts.bias: b_Q, b_K, b_V (and b_O) as well, with Linear's init, as
-- PyTorch's modules have by default (qkv's default, the documents', is none)
local function bias_of(fname, opts)
  return flag(checkopts(fname, opts, {"bias"}, {"bias"}), "bias", false)
end

local function weights(self, names, d_in, d_out, bias)
  for _, n in ipairs(names) do
    weight(self, "W_" .. n, d_in, d_out)
    if bias then self:param("b_" .. n, uniform(1 / math.sqrt(d_in), d_out)) end
  end
end

local function attn_init(self, fname, d_model, d_k, opts)
  checkdim(fname, "d_model", d_model)
  checkdim(fname, "d_k", d_k)
  self.d_model, self.d_k = d_model, d_k
  weights(self, {"Q", "K", "V"}, d_model, d_k, bias_of(fname, opts))
end

local function attn_extra(self)
  return string.format("d_model=%d, d_k=%d%s", self.d_model, self.d_k,
                       self.b_Q and ", bias=true" or "")
end

-- SelfAttention(d_model, d_k): out, weights = attn(x [, {mask=, causal=}])
local SelfAttention = class("SelfAttention")
function SelfAttention:init(d_model, d_k, opts) attn_init(self, "SelfAttention", d_model, d_k, opts) end
SelfAttention.extra = attn_extra

function SelfAttention:forward(x, opts)
  checktensor("SelfAttention", "x", x)
  return qkv.attention(qkv.project(x, self.W_Q, self.b_Q), qkv.project(x, self.W_K, self.b_K),
                       qkv.project(x, self.W_V, self.b_V), opts)
end

-- CrossAttention(d_model, d_k): out, weights = attn(text, image [, opts]);
-- Q from the first sequence, K and V from the second
local CrossAttention = class("CrossAttention")
function CrossAttention:init(d_model, d_k, opts) attn_init(self, "CrossAttention", d_model, d_k, opts) end
CrossAttention.extra = attn_extra

function CrossAttention:forward(xq, xkv, opts)
  checktensor("CrossAttention", "text", xq)
  checktensor("CrossAttention", "image", xkv)
  return qkv.attention(qkv.project(xq, self.W_Q, self.b_Q), qkv.project(xkv, self.W_K, self.b_K),
                       qkv.project(xkv, self.W_V, self.b_V), opts)
end

-- the multi-head body shared by self and cross attention: project, split
-- into heads, attend, merge, project by W_O
local function mha_init(self, fname, d_model, h, opts)
  checkdim(fname, "d_model", d_model)
  checkdim(fname, "h", h)
  if d_model % h ~= 0 then
    fail(fname, "d_model = %d is not divisible by h = %d", d_model, h)
  end
  self.d_model, self.h, self.d_k = d_model, h, d_model // h
  weights(self, {"Q", "K", "V", "O"}, d_model, d_model, bias_of(fname, opts))
end

-- Masks come in the frame of the input's scores: a mask (batch..., n_q, n_k)
-- such as qkv.padding's (B, 1, n) gets a head dim, so that it broadcasts
-- against (batch..., h, n_q, n_k), and so does a key_padding_mask
-- (batch..., n_k); a mask that has one, (batch..., h, n_q, n_k), is kept.
local function head_mask(opts, x)
  if type(opts) ~= "table" then return opts end
  local m, kpm = opts.mask, opts.key_padding_mask
  local fix_m = qkv.is_tensor(m) and m:dim() >= 3 and m:dim() <= x:dim()
  local fix_k = qkv.is_tensor(kpm) and kpm:dim() >= 2 and kpm:dim() < x:dim()
  if not fix_m and not fix_k then return opts end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  if fix_m then o.mask = m:unsqueeze(-3) end
  if fix_k then o.key_padding_mask = kpm:unsqueeze(-2) end
  return o
end

local function mha_forward(self, xq, xk, xv, opts)
  local h = self.h
  local Q = qkv.heads(qkv.project(xq, self.W_Q, self.b_Q), h)
  local K = qkv.heads(qkv.project(xk, self.W_K, self.b_K), h)
  local V = qkv.heads(qkv.project(xv, self.W_V, self.b_V), h)
  local out, w = qkv.attention(Q, K, V, head_mask(opts, xq))
  return qkv.project(qkv.merge(out), self.W_O, self.b_O), w
end

local function mha_extra(self)
  return string.format("d_model=%d, h=%d%s", self.d_model, self.h, self.b_Q and ", bias=true" or "")
end

-- MultiHeadAttention(d_model, h): out, weights = mha(x [, opts]), or as
-- PyTorch's, mha(query, key, value [, opts]); weights are (..., h, n_q, n_k)
local MultiHeadAttention = class("MultiHeadAttention")
function MultiHeadAttention:init(d_model, h, opts) mha_init(self, "MultiHeadAttention", d_model, h, opts) end
MultiHeadAttention.extra = mha_extra

local MHA_USE = "expected mha(x [, opts]) or mha(query, key, value [, opts])"

function MultiHeadAttention:forward(x, ...)
  local fname = "MultiHeadAttention"
  checktensor(fname, "x", x)
  local n, key, value, opts = select("#", ...), ...
  if not qkv.is_tensor(key) then
    if n > 1 or (key ~= nil and type(key) ~= "table") then
      fail(fname, "%s, got a %s after x", MHA_USE, qkv.is_tensor(key) and "tensor" or type(key))
    end
    return mha_forward(self, x, x, x, key)
  end
  if not qkv.is_tensor(value) then
    fail(fname, "%s, got query, key and a %s", MHA_USE, type(value))
  end
  if n > 3 then fail(fname, "%s, got %d arguments", MHA_USE, n + 1) end
  if opts ~= nil and type(opts) ~= "table" then
    fail(fname, "%s, got a %s after value", MHA_USE, type(opts))
  end
  checktensor(fname, "key", key)
  checktensor(fname, "value", value)
  return mha_forward(self, x, key, value, opts)
end

-- MultiHeadCrossAttention(d_model, h): out, weights = m(text, image [, opts]);
-- weights are (..., h, n_text, n_image)
local MultiHeadCrossAttention = class("MultiHeadCrossAttention")
function MultiHeadCrossAttention:init(d_model, h, opts)
  mha_init(self, "MultiHeadCrossAttention", d_model, h, opts)
end
MultiHeadCrossAttention.extra = mha_extra

function MultiHeadCrossAttention:forward(text, image, opts)
  checktensor("MultiHeadCrossAttention", "text", text)
  checktensor("MultiHeadCrossAttention", "image", image)
  return mha_forward(self, text, image, image, opts)
end

---------------------------------------------------------------- alignment

-- TokenAligner(d_vision, d_text [, "linear" | "mlp" | "identity"]): maps
-- image tokens into the text space; m.proj is the Linear, Sequential or
-- Identity that does it (forward goes through qkv.align)
local TokenAligner = class("TokenAligner")
function TokenAligner:init(d_vision, d_text, method)
  checkdim("TokenAligner", "d_vision", d_vision)
  checkdim("TokenAligner", "d_text", d_text)
  method = method or "linear"
  self.d_vision, self.d_text, self.method = d_vision, d_text, method
  if method == "linear" then
    self:child("proj", nn.Linear(d_vision, d_text))
  elseif method == "mlp" then
    self:child("proj", nn.Sequential(nn.Linear(d_vision, d_text), nn.GELU(),
                                     nn.Linear(d_text, d_text)))
  elseif method == "identity" then
    if d_vision ~= d_text then
      fail("TokenAligner", "identity needs d_vision == d_text, got %d and %d", d_vision, d_text)
    end
    self:child("proj", nn.Identity())
  else
    fail("TokenAligner", "method must be 'linear', 'mlp' or 'identity', got %s", tostring(method))
  end
end

function TokenAligner:forward(x)
  checktensor("TokenAligner", "image_tokens", x)
  local p = self.proj
  if self.method == "linear" then return qkv.align(x, p.W, p.b) end
  if self.method == "mlp" then return qkv.align(x, {p[1].W, p[1].b, p[3].W, p[3].b}) end
  return x
end

function TokenAligner:extra()
  return string.format("d_vision=%d, d_text=%d, method=%s", self.d_vision, self.d_text, self.method)
end

-- AlignedCrossAttention(d_vision, d_text, h [, method]): align the image
-- tokens, then multi-head cross-attention from the text
local AlignedCrossAttention = class("AlignedCrossAttention")
function AlignedCrossAttention:init(d_vision, d_text, h, method)
  self:child("aligner", nn.TokenAligner(d_vision, d_text, method))
  self:child("cross_attn", nn.MultiHeadCrossAttention(d_text, h))
end

function AlignedCrossAttention:forward(text, image, opts)
  return self.cross_attn(text, self.aligner(image), opts)
end

---------------------------------------------------------------- functions

-- mse_loss(input, target [, reduction]): mean (or sum, or none) of the
-- squared differences, target broadcast to input
local function mse(input, target, reduction)
  local d = input - target
  local sq = d * d
  if reduction == "mean" then return sq:mean() end
  if reduction == "sum" then return sq:sum() end
  return sq
end

function nn.mse_loss(input, target, reduction)
  checktensor("mse_loss", "input", input)
  checktensor("mse_loss", "target", target)
  reduction = reduction or "mean"
  if reduction ~= "mean" and reduction ~= "sum" and reduction ~= "none" then
    fail("mse_loss", "reduction must be 'mean', 'sum' or 'none', got %s", tostring(reduction))
  end
  return named("mse_loss", pcall(mse, input, target, reduction))
end

-- cross_entropy(logits (N, C), targets (N) int64, 1-based classes): the mean
-- of -log_softmax(logits)[i, targets[i]]
function nn.cross_entropy(logits, targets)
  checktensor("cross_entropy", "logits", logits)
  checktensor("cross_entropy", "targets", targets)
  if logits:dim() ~= 2 or targets:dim() ~= 1 or targets:size(1) ~= logits:size(1) then
    fail("cross_entropy", "logits must be (N, C) and targets (N), got %s and %s",
         tostring(logits.shape), tostring(targets.shape))
  end
  if targets.dtype ~= "int64" then fail("cross_entropy", "targets must be int64, got %s", targets.dtype) end
  local C = logits:size(2)
  if targets:numel() > 0 and (targets:min():item() < 1 or targets:max():item() > C) then
    fail("cross_entropy", "targets must be classes 1 to %d", C)
  end
  return named("cross_entropy", pcall(function()
    local onehot = qkv.arange(1, C + 1, "int64", targets.device):view(1, C):eq(targets:view(-1, 1))
    local picked = logits:log_softmax(2):masked_fill(onehot:logical_not(), 0)
    return -picked:sum() / logits:size(1)
  end))
end

-- clip_grad_norm_(params, max_norm [, norm_type = 2] [, {norm_type =,
-- error_if_nonfinite = false}]): torch.nn.utils.clip_grad_norm_. The norm
-- of the gradients' norms (of those params that have a .grad), each
-- computed in its dtype (float32 for the 2-byte ones), combined in double;
-- every gradient scaled in place by min(max_norm / (total + 1e-6), 1); the
-- total returned as a 0-d tensor of the gradients' dtype, on the first
-- one's device, as torch's.
local GRAD_RANK = {float16 = 1, bfloat16 = 1, float32 = 2, float64 = 3}

local function grads_of(fname, params)
  if qkv.is_tensor(params) then params = {params}
  elseif type(params) ~= "table" then
    fail(fname, "parameters must be a module, a tensor or a list of tensors, got %s", type(params))
  else
    local mt = getmetatable(params)
    if mt and rawget(mt, "__name") and type(params.parameters) == "function" then
      params = params:parameters()
    end
  end
  local grads = {}
  for i = 1, rawlen(params) do
    local p = rawget(params, i)
    local t = qkv.is_tensor(p) and p or type(p) == "table" and rawget(p, 2)
    if not qkv.is_tensor(t) then fail(fname, "parameters[%d] is a %s, not a tensor", i, type(p)) end
    checktensor(fname, "parameters[" .. i .. "]", t)
    local g = t.grad
    if g ~= nil then
      checktensor(fname, "the grad of parameters[" .. i .. "]", g)
      if not GRAD_RANK[g.dtype] then
        fail(fname, "the grad of parameters[%d] is %s, not a float tensor", i, g.dtype)
      end
      grads[#grads + 1] = g
    end
  end
  return grads
end

-- the p-norm of g (p > 0, or math.huge) as a number
local function norm_of(g, p)
  if g.dtype == "float16" or g.dtype == "bfloat16" then g = g:to("float32") end
  if g:numel() == 0 then return 0 end
  if p == math.huge then return g:abs():max():item() end
  if p == 2 then return (g * g):sum():sqrt():item() end
  if p == 1 then return g:abs():sum():item() end
  return (g:abs() ^ p):sum():item() ^ (1 / p)
end

function nn.clip_grad_norm_(params, max_norm, norm_type, opts)
  local fname = "clip_grad_norm_"
  if type(norm_type) == "table" and opts == nil then norm_type, opts = nil, norm_type end
  opts = checkopts(fname, opts, {"norm_type", "error_if_nonfinite"}, {"error_if_nonfinite"})
  if norm_type ~= nil and opts.norm_type ~= nil then
    fail(fname, "norm_type is given twice, as an argument and as an option")
  end
  if norm_type == nil then norm_type = opts.norm_type end
  if norm_type == nil then norm_type = 2 end
  if type(max_norm) ~= "number" or not (max_norm >= 0) then
    fail(fname, "max_norm must be a number >= 0 (math.huge clips nothing), got %s", tostring(max_norm))
  end
  if type(norm_type) ~= "number" or not (norm_type > 0) then
    fail(fname, "norm_type must be a number > 0, or math.huge for the largest |g|, got %s",
         tostring(norm_type))
  end
  local grads = grads_of(fname, params)
  if #grads == 0 then return qkv.tensor(0.0) end
  local total, dtype = 0, grads[1].dtype
  for _, g in ipairs(grads) do
    local n = norm_of(g, norm_type)
    if norm_type ~= math.huge then total = total + n ^ norm_type
    elseif n > total or n ~= n then total = n end           -- a nan stays, as torch's max
    if GRAD_RANK[g.dtype] > GRAD_RANK[dtype] then dtype = g.dtype
    elseif GRAD_RANK[g.dtype] == GRAD_RANK[dtype] and g.dtype ~= dtype then dtype = "float32" end
  end
  if norm_type ~= math.huge then total = total ^ (1 / norm_type) end
  if opts.error_if_nonfinite and not (total > -math.huge and total < math.huge) then
    fail(fname, "the total norm of order %g of the gradients is %s, so they cannot be clipped "
         .. "(error_if_nonfinite = false scales them by it anyway)", norm_type, tostring(total))
  end
  local coef = math.min(max_norm / (total + 1e-6), 1.0)
  if coef ~= 1 then
    qkv.no_grad(function()
      for _, g in ipairs(grads) do g:mul_(coef) end
    end)
  end
  return qkv.tensor(total, dtype):to(grads[1].device)
end

-- cosine_similarity(a, b [, dim = -1 [, eps = 1e-8]]): a·b / max(|a||b|, eps)
-- along dim, with a and b broadcast (so (4, 1, d) against (1, 9, d) gives
-- the (4, 9) table). PyTorch's default dim is 1 (0-based); ours is the last.
local function cosine(a, b, dim, eps)
  local dot = (a * b):sum(dim)
  local na, nb = (a * a):sum(dim):sqrt(), (b * b):sum(dim):sqrt()
  return dot / qkv.maximum(na * nb, eps)
end

function nn.cosine_similarity(a, b, dim, eps)
  local fname = "cosine_similarity"
  checktensor(fname, "a", a)
  checktensor(fname, "b", b)
  dim, eps = dim or -1, eps or 1e-8
  local nd = math.max(a:dim(), b:dim())
  if math.type(dim) ~= "integer" or dim == 0 or dim < -nd or dim > nd then
    fail(fname, "dim must be an integer in [-%d, %d] but not 0, got %s", nd, nd, tostring(dim))
  end
  if type(eps) ~= "number" then fail(fname, "eps must be a number, got %s", type(eps)) end
  return named(fname, pcall(cosine, a, b, dim, eps))
end

return qkv._strict(nn, "qkv.nn", "class or function")
