-- nn/functional.lua: qkv.nn's functions: mse_loss (the classification
-- losses are nn/loss.lua's), clip_grad_norm_ and cosine_similarity; and
-- qkv.nn.functional, PyTorch's torch.nn.functional names for qkv's
-- functions, with linear and scaled_dot_product_attention.

local qkv = require "qkv"
local M = require "qkv.nn.module"
M.inside(debug.getinfo(1, "S").source)

local nn, fail, named, checkopts, checktensor = M.nn, M.fail, M.named, M.checkopts, M.checktensor
local fp32 = require("qkv.methods").autocast_fp32      -- losses run in float32 under autocast
local autocast_args = require("qkv.methods").autocast_args

---------------------------------------------------------------- functions

-- mse_loss(input, target [, reduction]): mean (or sum, or none) of the
-- squared differences, target broadcast to input
local function squares(input, target, reduction)
  local d = input - target
  local sq = d * d
  if reduction == "mean" then return sq:mean(), d end
  if reduction == "sum" then return sq:sum(), d end
  return sq
end

-- with gradients wanted and a reduction, one node (PyTorch's
-- MseLossBackward) whose backward is g 2 d / n for each side that needs it,
-- rather than the four of sub, mul and mean
local function mse(input, target, reduction)
  local A = package.loaded["qkv.autograd"]
  if reduction == "none" or not (A and A.enabled() and A.any(input, target)) then
    return (squares(input, target, reduction))
  end
  local loss, d = A.no_grad(squares, input, target, reduction)
  local c = reduction == "mean" and 2 / d:numel() or 2
  local sum_to = require("qkv.derivatives").sum_to
  return A.record("MseLossBackward", loss, {input, target}, function(g)
    local gd = d * (g * c)
    return A.tracked(input) and sum_to(gd, input) or nil, A.tracked(target) and sum_to(-gd, target) or nil
  end)
end

-- an argument past reduction is an error: PyTorch's positional
-- (input, target, size_average, reduce, reduction) would else lose its
-- reduction, F.mse_loss(x, y, nil, nil, "sum") giving the mean
function nn.mse_loss(input, target, reduction, ...)
  checktensor("mse_loss", "input", input)
  checktensor("mse_loss", "target", target)
  M.noextra("mse_loss", "it is (input, target [, reduction]), without PyTorch's deprecated "
            .. "size_average and reduce", 3, input, target, reduction, ...)
  if type(reduction) == "table" and not qkv.is_tensor(reduction) then    -- PyTorch's keyword
    reduction = checkopts("mse_loss", reduction, {"reduction"}).reduction
  end
  reduction = reduction or "mean"
  if reduction ~= "mean" and reduction ~= "sum" and reduction ~= "none" then
    fail("mse_loss", "reduction must be 'mean', 'sum' or 'none', got %s", tostring(reduction))
  end
  input, target = fp32(input, target)
  return named("mse_loss", pcall(mse, input, target, reduction))
end

-- clip_grad_norm_(params, max_norm [, norm_type = 2] [, {norm_type =,
-- error_if_nonfinite = false}]): torch.nn.utils.clip_grad_norm_. The norm
-- of the gradients' norms (of those params that have a .grad), each
-- computed in its dtype (float32 for the 2-byte ones), combined in double;
-- every gradient scaled in place by min(max_norm / (total + 1e-6), 1); the
-- total returned as a 0-d tensor of the gradients' dtype, on the first
-- one's device, as torch's. Each parameter counts once, however often it
-- is listed (a module's parameters() lists a shared one once, as torch's;
-- torch's clip_grad_norm_([p, p]) would count p twice), and each gradient
-- tensor is scaled once, even where two parameters hold it.
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
  local grads, seen = {}, {}
  for i = 1, rawlen(params) do
    local p = rawget(params, i)
    local t = qkv.is_tensor(p) and p or type(p) == "table" and rawget(p, 2)
    if not qkv.is_tensor(t) then fail(fname, "parameters[%d] is a %s, not a tensor", i, type(p)) end
    checktensor(fname, "parameters[" .. i .. "]", t)
    local g = not seen[t] and t.grad
    seen[t] = true
    if g then
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
  -- max_norm and norm_type may come as PyTorch's keywords too:
  -- clip_grad_norm_(params, {max_norm = 1, norm_type = 2})
  if type(max_norm) == "table" and norm_type == nil and opts == nil then
    max_norm, opts = nil, max_norm
  elseif type(norm_type) == "table" and opts == nil then
    norm_type, opts = nil, norm_type
  end
  opts = checkopts(fname, opts, {"max_norm", "norm_type", "error_if_nonfinite"}, {"error_if_nonfinite"})
  if norm_type ~= nil and opts.norm_type ~= nil then
    fail(fname, "norm_type is given twice, as an argument and as an option")
  end
  if max_norm ~= nil and opts.max_norm ~= nil then
    fail(fname, "max_norm is given twice, as an argument and as an option")
  end
  if max_norm == nil then max_norm = opts.max_norm end
  if max_norm == nil then fail(fname, "max_norm is missing: clip_grad_norm_(params, max_norm) or clip_grad_norm_(params, {max_norm = ...})") end
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
      local scaled = {}
      for _, g in ipairs(grads) do
        if not scaled[g] then g:mul_(coef) end
        scaled[g] = true
      end
    end)
  end
  return qkv.tensor(total, dtype):to(grads[1].device)
end

-- cosine_similarity(a, b [, dim = -1 [, eps = 1e-8]]): PyTorch 2's
-- sum(a / max(|a|, eps) * b / max(|b|, eps)) along dim, with a and b
-- broadcast (so (4, 1, d) against (1, 9, d) gives the (4, 9) table); each
-- norm clamped as PyTorch clamps it, in place under no_grad (the gradient
-- goes through the norm as if unclamped). The older a·b / max(|a||b|, eps)
-- gave 0.01 for two equal vectors of norm 1e-5, and NaN (inf / inf) where
-- a·a overflows. PyTorch's default dim is 1 (0-based); ours is the last.
local function cosine(a, b, dim, eps)
  local nd = math.max(a:dim(), b:dim())
  local d = dim < 0 and dim or dim - nd - 1       -- from the right: a and b may differ in dims
  local function unit(x)
    local n = (x * x):sum(d, true):sqrt()
    return x / qkv.where(n:lt(eps), n + (eps - n):detach(), n)
  end
  return (unit(a) * unit(b)):sum(d)
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

---------------------------------------------------------------- qkv.nn.functional

local F = {}

-- softmax(Q Kᵀ · scale + mask) V, the attention of
-- F.scaled_dot_product_attention and of TransformerEncoderLayer: mask nil,
-- bool (true = takes part) or float (added to the scores); is_causal
-- PyTorch's, aligned to the first key (never beside a mask); scale nil for
-- 1/sqrt(d_k); p the dropout on the weights
local function attend(Q, K, V, mask, is_causal, scale, p, mods)
  if mods and mask ~= nil and mask.dtype ~= "bool" then
    error("a float mask (added to the scores) and score_mod/mask_mod/block_mask together: add it "
          .. "in the score_mod instead", 0)
  end
  if mask == nil or mask.dtype == "bool" then
    local o = {mask = mask, is_causal = is_causal or nil, scale = scale}
    for key, f in pairs(mods or {}) do o[key] = f end
    if p == 0 then
      o.weights = false                   -- the fused kernel: out alone
      return qkv.attention(Q, K, V, o)
    end
    local _, w = qkv.attention(Q, K, V, o)
    return qkv.dropout(w, p, true):matmul(V)
  end
  if mask.dtype ~= Q.dtype then mask = mask:to(Q.dtype) end
  local s = qkv.scores(Q, K, scale and {scale = scale})
  local a, b = mask.shape, s.shape
  for i = 1, math.min(#a, #b) do
    local x, y = a[#a + 1 - i], b[#b + 1 - i]
    if x ~= y and x ~= 1 and y ~= 1 then
      error(string.format("mask of shape %s does not broadcast to the scores' shape %s",
                          tostring(mask.shape), tostring(s.shape)), 0)
    end
  end
  local w = (s + mask):softmax(-1)
  if p > 0 then w = qkv.dropout(w, p, true) end
  return w:matmul(V)
end
M.attend = attend

-- the variants' options of opts (score_mod, mask_mod, block_mask), or nil
function M.mods_of(opts)
  local r
  for _, key in ipairs{"score_mod", "mask_mod", "block_mask"} do
    if opts[key] ~= nil then
      r = r or {}
      r[key] = opts[key]
    end
  end
  return r
end

local FLOAT = {float32 = true, float64 = true, float16 = true, bfloat16 = true}
local SDPA = "scaled_dot_product_attention"

-- scaled_dot_product_attention(query, key, value [, {attn_mask =,
-- is_causal =, scale =, dropout_p = 0, enable_gqa = false, score_mod =,
-- mask_mod =, block_mask =}]): PyTorch's, returning out only; the
-- variants' options are qkv.attention's (docs/variants.md), enable_gqa
-- PyTorch's (stdlib/qkv/gqa.lua)
function F.scaled_dot_product_attention(q, k, v, opts, ...)
  checktensor(SDPA, "query", q)
  checktensor(SDPA, "key", k)
  checktensor(SDPA, "value", v)
  if qkv.is_tensor(opts) then
    fail(SDPA, "the mask comes as an option, F.scaled_dot_product_attention(q, k, v, {attn_mask = m})")
  end
  if select("#", ...) > 0 or (opts ~= nil and type(opts) ~= "table") then
    fail(SDPA, "expected (query, key, value [, opts]), PyTorch's keywords in the options table")
  end
  opts = checkopts(SDPA, opts, {"attn_mask", "is_causal", "scale", "dropout_p", "enable_gqa",
                                "score_mod", "mask_mod", "block_mask"}, {"is_causal", "enable_gqa"})
  local mask, p, scale = opts.attn_mask, opts.dropout_p or 0, opts.scale
  if mask ~= nil then
    checktensor(SDPA, "attn_mask", mask)
    if mask.dtype ~= "bool" and not FLOAT[mask.dtype] then
      fail(SDPA, "attn_mask must be bool (true = takes part) or float (added to the scores), got %s",
           mask.dtype)
    end
    if opts.is_causal then
      fail(SDPA, "attn_mask and is_causal = true together, which PyTorch refuses too: give one "
           .. "(is_causal's mask is qkv.ones(n_q, n_k):tril():bool())")
    end
  end
  if scale ~= nil and type(scale) ~= "number" then
    fail(SDPA, "scale must be a number, got %s", type(scale))
  end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    fail(SDPA, "dropout_p must be a number in [0, 1], got %s", tostring(p))
  end
  if not opts.enable_gqa then
    return named(SDPA, pcall(attend, q, k, v, mask, opts.is_causal, scale, p, M.mods_of(opts)))
  end
  -- grouped-query heads: qkv.attention's way (stdlib/qkv/gqa.lua), attend
  -- on what it makes of q, k, v, the mask and the mods
  local o = M.mods_of(opts) or {}
  o.mask, o.is_causal = mask, opts.is_causal
  return named(SDPA, pcall(require("qkv.gqa").grouped, SDPA, q, k, v, o, function(a, b, c, oo)
    return attend(a, b, c, oo.mask, oo.is_causal, scale, p, M.mods_of(oo))
  end))
end

-- linear(input, weight [, bias]): input weightᵀ + bias, with PyTorch's
-- layout, weight (out_features, in_features), the transpose of qkv's W;
-- as PyTorch's, a 1-D weight (in_features,) gives input's shape less its
-- last dim (input · weight), and the bias may be 0-d (added to each
-- output), or (1,) or (out_features,) with a 2-D weight
function F.linear(x, weight, bias)
  checktensor("linear", "input", x)
  checktensor("linear", "weight", weight)
  if bias ~= nil then checktensor("linear", "bias", bias) end
  if weight:dim() ~= 2 and weight:dim() ~= 1 then
    fail("linear", "weight must be (out_features, in_features) or (in_features,), got %s",
         tostring(weight.shape))
  end
  local d_in = weight:size(-1)
  if x:dim() < 1 or x:size(-1) ~= d_in then
    fail("linear", "input is %s but weight is %s: in_features %s ≠ %d (weight is (out_features, "
         .. "in_features), as PyTorch's; qkv.project takes qkv's (in, out))", tostring(x.shape),
         tostring(weight.shape), x:dim() < 1 and "-" or tostring(x:size(-1)), d_in)
  end
  local d_out = weight:dim() == 2 and weight:size(1) or nil
  if bias ~= nil and bias:dim() > 0 and not (d_out and bias:dim() == 1 and
                                             (bias:size(1) == d_out or bias:size(1) == 1)) then
    fail("linear", "bias is %s but weight is %s: expected %s", tostring(bias.shape),
         tostring(weight.shape), d_out and string.format("(out_features,) = (%d,) or 0-d", d_out)
         or "a 0-d bias with a 1-D weight")
  end
  x, weight, bias = autocast_args("project", x, weight, bias)    -- the weight's cast cached
  if d_out then
    if bias and (bias:dim() == 0 or bias:size(1) ~= d_out) then bias = bias:expand(d_out) end
    return named("linear", pcall(qkv.project, x, weight:t(), bias))
  end
  local y = named("linear", pcall(qkv.matmul, x, weight))         -- (..., in) · (in,): (...)
  return bias and y + bias or y
end

-- the rest are qkv's own functions under PyTorch's names
for _, name in ipairs{"relu", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax",
                      "layer_norm", "rms_norm", "dropout", "embedding"} do
  F[name] = qkv[name]
end
F.cosine_similarity, F.mse_loss, F.cross_entropy = nn.cosine_similarity, nn.mse_loss, nn.cross_entropy
F.nll_loss = nn.nll_loss

nn.functional = qkv._strict(F, "qkv.nn.functional", "function")
