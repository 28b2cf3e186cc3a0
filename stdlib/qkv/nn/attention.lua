-- nn/attention.lua: qkv.nn's attention modules (SelfAttention, CrossAttention,
-- MultiHeadAttention, MultiHeadCrossAttention) and the alignment ones
-- (TokenAligner, AlignedCrossAttention), in plain Lua on the primitives.

local qkv = require "qkv"
local M = require "qkv.nn.module"
M.inside(debug.getinfo(1, "S").source)

local nn, class, fail, checkopts, flag = M.nn, M.class, M.fail, M.checkopts, M.flag
local checkdim, checktensor, uniform, opts_of, place = M.checkdim, M.checktensor, M.uniform,
  M.opts_of, M.place

---------------------------------------------------------------- attention

-- opts: bias (b_Q, b_K, b_V and b_O as well, with Linear's init, as
-- PyTorch's modules have by default; qkv's default, the documents', is
-- none), dtype and device (M.opts_of); the checked options and the dtype
-- to make the weights in
local function attn_opts(fname, opts)
  return opts_of(fname, opts, {"bias", "dtype", "device"}, {"bias"})
end

-- the projection weights W_<name>, (d_in, d_out) with Linear's init, and
-- with opts.bias the biases b_<name>
local function weights(self, names, d_in, d_out, opts, dt)
  local bound = 1 / math.sqrt(d_in)
  for _, n in ipairs(names) do
    self:param("W_" .. n, uniform(bound, d_in, d_out, dt), true)
    self:param("b_" .. n, flag(opts, "bias", false) and uniform(bound, d_out, dt) or nil)
  end
end

local function attn_init(self, fname, d_model, d_k, opts)
  checkdim(fname, "d_model", d_model)
  checkdim(fname, "d_k", d_k)
  local o, dt = attn_opts(fname, opts)
  self.d_model, self.d_k = d_model, d_k
  weights(self, {"Q", "K", "V"}, d_model, d_k, o, dt)
  place(self, o)
end

local function attn_extra(self)
  return string.format("d_model=%d, d_k=%d%s", self.d_model, self.d_k,
                       self.b_Q and ", bias=true" or "")
end

-- SelfAttention(d_model, d_k [, {bias, dtype, device}]): out, weights =
-- attn(x [, {mask=, causal=}])
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
  local o, dt = attn_opts(fname, opts)
  self.d_model, self.h, self.d_k = d_model, h, d_model // h
  weights(self, {"Q", "K", "V", "O"}, d_model, d_model, o, dt)
  place(self, o)
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

-- opts.cache, an nn.KVCache: K and V go into it, and attention reads every
-- key and value it holds (the new queries the last ones: qkv's causal)
local function mha_forward(self, xq, xk, xv, opts)
  local h = self.h
  local Q = qkv.heads(qkv.project(xq, self.W_Q, self.b_Q), h)
  local K = qkv.heads(qkv.project(xk, self.W_K, self.b_K), h)
  local V = qkv.heads(qkv.project(xv, self.W_V, self.b_V), h)
  if type(opts) == "table" and rawget(opts, "cache") ~= nil then
    local o, cache = {}, opts.cache
    for k, v in pairs(opts) do if k ~= "cache" then o[k] = v end end
    if getmetatable(cache) ~= nn.KVCache then
      fail(getmetatable(self).__name, "opts.cache must be an nn.KVCache, got %s", type(cache))
    end
    K, V = cache:update(K, V)
    opts = o
  end
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

-- TokenAligner(d_vision, d_text [, "linear" | "mlp" | "identity"] [, {dtype,
-- device}]): maps image tokens into the text space; m.proj is the Linear,
-- Sequential or Identity that does it (forward goes through qkv.align)
local TokenAligner = class("TokenAligner")

-- the method and the options of TokenAligner and AlignedCrossAttention:
-- ([method] [, opts]), the options table also in the method's place
local function method_opts(fname, method, opts, ...)
  if select("#", ...) > 0 or (type(method) == "table" and opts ~= nil) then
    fail(fname, "expected at most a method and an options table after the sizes")
  end
  if type(method) == "table" then method, opts = nil, method end
  local o, dt = opts_of(fname, opts, {"dtype", "device"})
  return method or "linear", o, dt
end

function TokenAligner:init(d_vision, d_text, method, opts, ...)
  checkdim("TokenAligner", "d_vision", d_vision)
  checkdim("TokenAligner", "d_text", d_text)
  local o, dt
  method, o, dt = method_opts("TokenAligner", method, opts, ...)
  local lo = {dtype = dt}
  self.d_vision, self.d_text, self.method = d_vision, d_text, method
  if method == "linear" then
    self:child("proj", nn.Linear(d_vision, d_text, lo))
  elseif method == "mlp" then
    self:child("proj", nn.Sequential(nn.Linear(d_vision, d_text, lo), nn.GELU(),
                                     nn.Linear(d_text, d_text, lo)))
  elseif method == "identity" then
    if d_vision ~= d_text then
      fail("TokenAligner", "identity needs d_vision == d_text, got %d and %d", d_vision, d_text)
    end
    self:child("proj", nn.Identity())
  else
    fail("TokenAligner", "method must be 'linear', 'mlp' or 'identity', got %s", tostring(method))
  end
  place(self, o)
end

function TokenAligner:forward(x)
  checktensor("TokenAligner", "image_tokens", x)
  local p = self.proj
  if self.method == "linear" then return qkv.align(x, p.weight:t(), p.bias) end
  if self.method == "mlp" then
    return qkv.align(x, {p[1].weight:t(), p[1].bias, p[3].weight:t(), p[3].bias})
  end
  return x
end

function TokenAligner:extra()
  return string.format("d_vision=%d, d_text=%d, method=%s", self.d_vision, self.d_text, self.method)
end

-- AlignedCrossAttention(d_vision, d_text, h [, method] [, {dtype, device}]):
-- align the image tokens, then multi-head cross-attention from the text
local AlignedCrossAttention = class("AlignedCrossAttention")
function AlignedCrossAttention:init(d_vision, d_text, h, method, opts, ...)
  local o, dt
  method, o, dt = method_opts("AlignedCrossAttention", method, opts, ...)
  self:child("aligner", nn.TokenAligner(d_vision, d_text, method, {dtype = dt}))
  self:child("cross_attn", nn.MultiHeadCrossAttention(d_text, h, {dtype = dt}))
  place(self, o)
end

function AlignedCrossAttention:forward(text, image, opts)
  return self.cross_attn(text, self.aligner(image), opts)
end


---------------------------------------------------------------- transformer

-- TransformerEncoderLayer(d_model, nhead [, opts]): PyTorch's layer built
-- from qkv's modules, its submodules named and ordered as PyTorch's
-- (self_attn, linear1, dropout, linear2, norm1, norm2, dropout1,
-- dropout2), so m:parameters() lists PyTorch's weights in qkv's layout:
-- in_proj split into self_attn.W_Q, W_K, W_V and every W transposed
local TEL = "TransformerEncoderLayer"
local TransformerEncoderLayer = class(TEL)
local ACTIVATIONS = {relu = qkv.relu, gelu = qkv.gelu}

local function number_opt(name, v, default, lo, hi)
  if v == nil then return default end
  if type(v) ~= "number" or not (v >= lo and v <= hi) then
    fail(TEL, "%s must be a number in [%g, %g], got %s", name, lo, hi, tostring(v))
  end
  return v
end

function TransformerEncoderLayer:init(d_model, nhead, opts)
  checkdim(TEL, "d_model", d_model)
  checkdim(TEL, "nhead", nhead)
  if d_model % nhead ~= 0 then
    fail(TEL, "d_model = %d is not divisible by nhead = %d", d_model, nhead)
  end
  local dt
  opts, dt = opts_of(TEL, opts, {"dim_feedforward", "dropout", "activation", "layer_norm_eps",
                                 "batch_first", "norm_first", "bias", "dtype", "device"},
                     {"batch_first", "norm_first", "bias"})
  local dff = opts.dim_feedforward or 2048
  checkdim(TEL, "dim_feedforward", dff)
  local p = number_opt("dropout", opts.dropout, 0.1, 0, 1)
  local eps = number_opt("layer_norm_eps", opts.layer_norm_eps, 1e-5, 0, math.huge)
  local act = opts.activation or "relu"
  local mt = type(act) == "table" and getmetatable(act)
  if not (ACTIVATIONS[act] or type(act) == "function"
          or type(mt) == "table" and rawget(mt, "__name") and mt.forward) then
    fail(TEL, "activation must be \"relu\", \"gelu\", a function or a module, got %s",
         type(act) == "string" and string.format("%q", act) or type(act))
  end
  local bias = flag(opts, "bias", true)
  self.d_model, self.nhead, self.dim_feedforward, self.activation = d_model, nhead, dff, act
  self.batch_first, self.norm_first = flag(opts, "batch_first", true), flag(opts, "norm_first", false)
  self.attn_dropout = p               -- PyTorch's self_attn.dropout, on the weights
  local sa = self:child("self_attn", nn.MultiHeadAttention(d_model, nhead, {bias = bias, dtype = dt}))
  -- PyTorch's init of its attention: xavier-uniform in_proj, zero biases
  qkv.no_grad(function()
    local bound = math.sqrt(6 / (4 * d_model))
    for _, n in ipairs{"Q", "K", "V"} do sa["W_" .. n]:copy_(uniform(bound, d_model, d_model, dt)) end
    for _, n in ipairs(bias and {"Q", "K", "V", "O"} or {}) do sa["b_" .. n]:zero_() end
  end)
  self:child("linear1", nn.Linear(d_model, dff, {bias = bias, dtype = dt}))
  self:child("dropout", nn.Dropout(p))
  self:child("linear2", nn.Linear(dff, d_model, {bias = bias, dtype = dt}))
  self:child("norm1", nn.LayerNorm(d_model, {eps = eps, bias = bias, dtype = dt}))
  self:child("norm2", nn.LayerNorm(d_model, {eps = eps, bias = bias, dtype = dt}))
  self:child("dropout1", nn.Dropout(p))
  self:child("dropout2", nn.Dropout(p))
  place(self, opts)
end

function TransformerEncoderLayer:extra()
  return string.format("d_model=%d, nhead=%d, dim_feedforward=%d, activation=%s, "
                       .. "norm_first=%s, batch_first=%s", self.d_model, self.nhead,
                       self.dim_feedforward, type(self.activation) == "string" and self.activation
                       or tostring(self.activation), tostring(self.norm_first),
                       tostring(self.batch_first))
end

local FLOATS = {float32 = true, float64 = true, float16 = true, bfloat16 = true}

-- a mask option: bool or float, else an error
local function mask_kind(name, m)
  checktensor(TEL, name, m)
  if m.dtype ~= "bool" and not FLOATS[m.dtype] then
    fail(TEL, "%s must be bool (true = not allowed) or float (added to the scores), got %s",
         name, m.dtype)
  end
  return m
end

-- the masks of a forward in the frame of the heads' scores, (N, h, L, L)
-- or (h, L, L), as one mask for attend (bool: true = takes part; float:
-- added), and whether attend's is_causal does the rest. PyTorch's bool
-- masks mean the opposite (true = not allowed), so they are negated.
local function masks_of(self, x, opts)
  local batched, L, h = x:dim() == 3, x:size(-2), self.nhead
  local N = batched and x:size(1) or 1
  local parts = {}
  local sm = opts.src_mask
  if sm ~= nil then
    mask_kind("src_mask", sm)
    local s = sm.shape
    if #s == 3 and s[1] == N * h and s[2] == L and s[3] == L then
      if batched then sm = sm:reshape(N, h, L, L) end
    elseif not (#s == 2 and s[1] == L and s[2] == L) then
      fail(TEL, "src_mask is %s but src has L = %d: expected (%d, %d) or (N * nhead, %d, %d) = "
           .. "(%d, %d, %d)", tostring(sm.shape), L, L, L, L, L, N * h, L, L)
    end
    parts[#parts + 1] = sm.dtype == "bool" and sm:logical_not() or sm
  end
  local kpm = opts.src_key_padding_mask
  if kpm ~= nil then
    mask_kind("src_key_padding_mask", kpm)
    local s = kpm.shape
    if batched and not (#s == 2 and s[1] == N and s[2] == L) or not batched and not (#s == 1 and s[1] == L) then
      fail(TEL, "src_key_padding_mask is %s but src is %s: expected %s", tostring(kpm.shape),
           tostring(x.shape), batched and string.format("(N, L) = (%d, %d)", N, L)
           or string.format("(L,) = (%d,)", L))
    end
    if batched then kpm = kpm:reshape(N, 1, 1, L) end
    parts[#parts + 1] = kpm.dtype == "bool" and kpm:logical_not() or kpm
  end
  if opts.is_causal then
    if #parts == 0 then return nil, true end
    parts[#parts + 1] = qkv.causal(L):to(x.device)
  end
  local all_bool = true
  for _, m in ipairs(parts) do all_bool = all_bool and m.dtype == "bool" end
  local mask
  for _, m in ipairs(parts) do
    if not all_bool and m.dtype == "bool" then m = qkv.where(m, 0.0, -math.huge):to(x.dtype) end
    mask = mask == nil and m or all_bool and mask:logical_and(m) or mask + m
  end
  return mask, false
end

local function sa_block(self, x, mask, causal, mods)
  local a, h = self.self_attn, self.nhead
  local Q = qkv.heads(qkv.project(x, a.W_Q, a.b_Q), h)
  local K = qkv.heads(qkv.project(x, a.W_K, a.b_K), h)
  local V = qkv.heads(qkv.project(x, a.W_V, a.b_V), h)
  local out = M.attend(Q, K, V, mask, causal, nil, self.training and self.attn_dropout or 0, mods)
  return self.dropout1(qkv.project(qkv.merge(out), a.W_O, a.b_O))
end

local function ff_block(self, x)
  local f = ACTIVATIONS[self.activation] or self.activation
  return self.dropout2(self.linear2(self.dropout(f(self.linear1(x)))))
end

-- m(src [, {src_mask =, src_key_padding_mask =, is_causal =}]): src (N, L,
-- d_model) with batch_first (the default), (L, N, d_model) without, or
-- (L, d_model)
function TransformerEncoderLayer:forward(src, opts, ...)
  checktensor(TEL, "src", src)
  if qkv.is_tensor(opts) or select("#", ...) > 0 then
    fail(TEL, "masks come as options: m(src, {src_mask = m, src_key_padding_mask = pad})")
  end
  opts = checkopts(TEL, opts, {"src_mask", "src_key_padding_mask", "is_causal", "score_mod",
                               "mask_mod", "block_mask"}, {"is_causal"})
  local nd, d = src:dim(), self.d_model
  if (nd ~= 2 and nd ~= 3) or src:size(-1) ~= d then
    fail(TEL, "src is %s: expected %s or (L, %d)", tostring(src.shape),
         self.batch_first and string.format("(N, L, %d)", d) or string.format("(L, N, %d)", d), d)
  end
  local x = src
  if nd == 3 and not self.batch_first then x = x:transpose(1, 2) end
  local mask, causal = masks_of(self, x, opts)
  local mods = M.mods_of(opts)
  if self.norm_first then
    x = x + sa_block(self, self.norm1(x), mask, causal, mods)
    x = x + ff_block(self, self.norm2(x))
  else
    x = self.norm1(x + sa_block(self, x, mask, causal, mods))
    x = self.norm2(x + ff_block(self, x))
  end
  if nd == 3 and not self.batch_first then x = x:transpose(1, 2) end
  return x
end
