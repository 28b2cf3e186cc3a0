-- nn_attention.lua: qkv.nn's attention modules (SelfAttention, CrossAttention,
-- MultiHeadAttention, MultiHeadCrossAttention) and the alignment ones
-- (TokenAligner, AlignedCrossAttention), in plain Lua on the primitives.

local qkv = require "qkv"
local M = require "qkv.nn_module"
M.inside(debug.getinfo(1, "S").source)

local nn, class, fail, checkopts, flag = M.nn, M.class, M.fail, M.checkopts, M.flag
local checkdim, checktensor, uniform = M.checkdim, M.checktensor, M.uniform

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

