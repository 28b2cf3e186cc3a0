-- nn_functional.lua: qkv.nn's functions: the losses (mse_loss,
-- cross_entropy), clip_grad_norm_ and cosine_similarity.

local qkv = require "qkv"
local M = require "qkv.nn_module"
M.inside(debug.getinfo(1, "S").source)

local nn, fail, named, checkopts, checktensor = M.nn, M.fail, M.named, M.checkopts, M.checktensor

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
