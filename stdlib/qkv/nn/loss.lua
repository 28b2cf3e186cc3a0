-- nn/loss.lua: qkv.nn's classification losses, cross_entropy and nll_loss
-- (torch.nn.functional's), and the loss modules CrossEntropyLoss, NLLLoss
-- and MSELoss (torch.nn's), each a class of nn/module.lua whose forward
-- calls its function with the options it was made with.
--
-- Classes count from 1, as every index in qkv: a target holds classes 1
-- to C. ignore_index keeps PyTorch's default, -100, which is never a
-- class, so the targets a PyTorch user pads with -100 are skipped here
-- too; a target of 0 (a class counted from 0) is an error that says so.

local qkv = require "qkv"
local M = require "qkv.nn.module"
M.inside(debug.getinfo(1, "S").source)

local noextra = M.noextra
local nn, class, fail, named, checkopts, checktensor = M.nn, M.class, M.fail, M.named,
  M.checkopts, M.checktensor

local FLOATS = {float32 = true, float64 = true, float16 = true, bfloat16 = true}
local fp32 = require("qkv.methods").autocast_fp32      -- losses run in float32 under autocast

local function reduction_of(fname, r)
  if r == nil then return "mean" end
  if r ~= "mean" and r ~= "sum" and r ~= "none" then
    fail(fname, "reduction must be 'mean', 'sum' or 'none', got %s", tostring(r))
  end
  return r
end

-- the options of a loss, checked: a table, or (PyTorch's first
-- positional argument) the class weights and then a table
local function loss_opts(fname, a, b, known)
  local o
  if qkv.is_tensor(a) then
    o = checkopts(fname, b, known)
    if o.weight ~= nil then fail(fname, "weight is given twice, as an argument and as an option") end
    o.weight = a
  else
    if b ~= nil then fail(fname, "takes one options table, got a second argument (%s)", type(b)) end
    o = checkopts(fname, a, known)
  end
  o.reduction = reduction_of(fname, o.reduction)
  if o.ignore_index == nil then o.ignore_index = -100 end
  if math.type(o.ignore_index) ~= "integer" then
    fail(fname, "ignore_index must be an integer, got %s", tostring(o.ignore_index))
  end
  local ls = o.label_smoothing
  if ls == nil then o.label_smoothing = 0
  elseif type(ls) ~= "number" or not (ls >= 0 and ls <= 1) then
    fail(fname, "label_smoothing must be a number from 0 to 1, got %s", tostring(ls))
  end
  if o.weight ~= nil then checktensor(fname, "weight", o.weight) end
  return o
end

-- input (N, C, d1, ...) as rows (N d1 ..., C), the class dim last; (C)
-- is one row, (N, C) its own rows
local function rows(x)
  local nd = x:dim()
  if nd == 1 then return x:view(1, -1) end
  if nd == 2 then return x end
  local perm = {1}
  for i = 3, nd do perm[#perm + 1] = i end
  perm[#perm + 1] = 2
  return x:permute(table.unpack(perm)):reshape(-1, x:size(2))
end

-- input's shape less its class dim: what reduction 'none' gives
local function batch_shape(x)
  local s = {}
  for i = 1, x:dim() do
    if i ~= math.min(2, x:dim()) then s[#s + 1] = x:size(i) end
  end
  return s
end

-- the checks both losses share: input a float tensor of rank 1 or more
-- with classes, weight a float (C) of input's dtype and device
local function check_input(fname, input, weight)
  checktensor(fname, "input", input)
  if input:dim() < 1 or not FLOATS[input.dtype] then
    fail(fname, "input must be a float tensor (C), (N, C) or (N, C, d1, ...), got %s %s",
         input.dtype, tostring(input.shape))
  end
  local C = input:size(math.min(2, input:dim()))
  if C == 0 then fail(fname, "input %s has no classes (C = 0)", tostring(input.shape)) end
  if weight ~= nil and (weight:dim() ~= 1 or weight:size(1) ~= C) then
    fail(fname, "weight must be (C,) = (%d,), one per class, got %s", C, tostring(weight.shape))
  end
  if weight ~= nil and (weight.dtype ~= input.dtype or weight.device ~= input.device) then
    fail(fname, "weight is %s on %s but input is %s on %s: they must agree", weight.dtype,
         weight.device, input.dtype, input.device)
  end
  return C
end

-- a class-index target: int64 of input's shape less the class dim, each
-- 1..C or ignore_index
local function check_classes(fname, input, target, C, ignore)
  if target.dtype ~= "int64" then
    fail(fname, "target must be int64 classes (1 to %d) or, for cross_entropy, float "
         .. "probabilities; got %s", C, target.dtype)
  end
  if target.device ~= input.device then
    fail(fname, "target is on %s but input on %s", target.device, input.device)
  end
  local want = batch_shape(input)
  local ok = target:dim() == #want
  for i = 1, #want do ok = ok and target:size(i) == want[i] end
  if not ok then
    fail(fname, "input is %s, so target must be %s of classes, got %s", tostring(input.shape),
         "(" .. table.concat(want, ", ") .. (#want == 1 and ",)" or ")"), tostring(target.shape))
  end
  if target:numel() == 0 then return end
  local kept = target:masked_fill(target:eq(ignore), 1)
  local lo, hi = kept:min():item(), kept:max():item()
  if lo < 1 or hi > C then
    fail(fname, "targets must be classes 1 to %d, got %d (classes count from 1; "
         .. "ignore_index %d marks a target to skip)", C, lo < 1 and lo or hi, ignore)
  end
end

-- the mean, sum or each of the per-row losses l, weighted by w (the
-- weights of the rows, 0 for those ignored); shape: reduction none's
local function reduce(l, w, reduction, shape)
  if reduction == "none" then return l:reshape(shape) end
  if reduction == "sum" then return l:sum() end
  return l:sum() / w:sum()
end

-- the negative log-likelihood of log-probabilities logp (any input
-- shape) at class-index targets, and, with label smoothing, PyTorch's
-- smoothed loss: (1 - ε) nll + ε/C Σ_c w_c (-logp_c), each reduced alike
local function nll(logp, target, o, C)
  local rows_of, t = rows(logp), target:reshape(-1)
  local skip = t:eq(o.ignore_index)
  local safe = t:masked_fill(skip, 1)
  local w = o.weight and o.weight:index_select(1, safe) or qkv.ones({t:numel()}, logp.dtype, logp.device)
  w = w:masked_fill(skip, 0)
  local picked = rows_of:gather(2, safe:view(-1, 1)):view(-1)
  local shape = batch_shape(logp)
  local loss = reduce((-picked):masked_fill(skip, 0) * w, w, o.reduction, shape)
  local eps = o.label_smoothing
  if eps == 0 then return loss end
  local all = o.weight and rows_of * o.weight:view(1, C) or rows_of
  local smooth = reduce((-all:sum(2)):masked_fill(skip, 0), w, o.reduction, shape)
  return loss * (1 - eps) + smooth * (eps / C)
end

-- cross entropy with float targets, probabilities over the classes of
-- input's shape: -Σ_c w_c t_c logp_c per row, the mean over the rows
local function check_probs(input, target, o)
  if target.dtype ~= input.dtype or target.shape ~= input.shape or target.device ~= input.device then
    fail("cross_entropy", "a float target holds probabilities and must be input's shape, dtype "
         .. "and device, %s %s on %s; got %s %s on %s", tostring(input.shape), input.dtype,
         input.device, tostring(target.shape), target.dtype, target.device)
  end
  if o.ignore_index ~= -100 then
    fail("cross_entropy", "ignore_index (%d) needs class-index targets, not probabilities",
         o.ignore_index)
  end
end

local function soft(logp, target, o, C)
  local eps, r, t = o.label_smoothing, rows(logp), rows(target)
  if eps > 0 then t = t * (1 - eps) + eps / C end
  local per = r * t
  if o.weight then per = per * o.weight:view(1, C) end
  local l = -per:sum(2)
  if o.reduction == "none" then return l:reshape(batch_shape(logp)) end
  if o.reduction == "sum" then return l:sum() end
  return l:sum() / r:size(1)
end

-- an argument past (weight, opts) is an error: PyTorch's positional
-- (weight, size_average, ignore_index, reduce, reduction, ...) would else
-- lose ignore_index and the rest, cross_entropy(x, t, w, nil, 2) reading
-- as no ignore_index
local NOEXTRA = "the options come in a table, {ignore_index =, reduction =, ...}, "
  .. "without PyTorch's deprecated size_average and reduce"

local CE_KEYS = {"weight", "ignore_index", "reduction", "label_smoothing"}
local NLL_KEYS = {"weight", "ignore_index", "reduction"}

-- cross_entropy(input, target [, opts]) or (input, target, weight [, opts])
local function cross_entropy(input, target, o)
  input, target, o.weight = fp32(input, target, o.weight)
  local C = check_input("cross_entropy", input, o.weight)
  checktensor("cross_entropy", "target", target)
  if FLOATS[target.dtype] then
    check_probs(input, target, o)
    return named("cross_entropy", pcall(soft, input:log_softmax(math.min(2, input:dim())), target, o, C))
  end
  check_classes("cross_entropy", input, target, C, o.ignore_index)
  return named("cross_entropy", pcall(function()
    return nll(input:log_softmax(math.min(2, input:dim())), target, o, C)
  end))
end

function nn.cross_entropy(input, target, a, b, ...)
  noextra("cross_entropy", NOEXTRA, 4, input, target, a, b, ...)
  return cross_entropy(input, target, loss_opts("cross_entropy", a, b, CE_KEYS))
end

local function nll_loss(input, target, o)
  input, target, o.weight = fp32(input, target, o.weight)
  local C = check_input("nll_loss", input, o.weight)
  checktensor("nll_loss", "target", target)
  check_classes("nll_loss", input, target, C, o.ignore_index)
  return named("nll_loss", pcall(nll, input, target, o, C))
end

function nn.nll_loss(input, target, a, b, ...)
  noextra("nll_loss", NOEXTRA, 4, input, target, a, b, ...)
  return nll_loss(input, target, loss_opts("nll_loss", a, b, NLL_KEYS))
end

---------------------------------------------------------------- modules

-- the options a module was made with, as PyTorch's attributes (weight,
-- ignore_index, reduction, label_smoothing), read again at each call so
-- that loss.reduction = "sum" takes effect, as in PyTorch
local function fields(self, fname, keys)
  local o = {}
  for _, k in ipairs(keys) do o[k] = rawget(self, k) end
  return loss_opts(fname, o, nil, keys)
end

local CrossEntropyLoss = class("CrossEntropyLoss")

-- CrossEntropyLoss([opts]) or CrossEntropyLoss(weight [, opts])
-- the class weights a buffer, as PyTorch's _WeightedLoss registers them:
-- nil when there are none, moved by to(), in state_dict
local function keep(self, o, keys)
  for _, k in ipairs(keys) do
    if k == "weight" then self:register_buffer("weight", o.weight) else self[k] = o[k] end
  end
end

function CrossEntropyLoss:init(a, b, ...)
  noextra("CrossEntropyLoss", NOEXTRA, 2, a, b, ...)
  keep(self, loss_opts("CrossEntropyLoss", a, b, CE_KEYS), CE_KEYS)
end

function CrossEntropyLoss:forward(input, target)
  return cross_entropy(input, target, fields(self, "CrossEntropyLoss", CE_KEYS))
end

local NLLLoss = class("NLLLoss")

function NLLLoss:init(a, b, ...)
  noextra("NLLLoss", NOEXTRA, 2, a, b, ...)
  keep(self, loss_opts("NLLLoss", a, b, NLL_KEYS), NLL_KEYS)
end

function NLLLoss:forward(input, target)
  return nll_loss(input, target, fields(self, "NLLLoss", NLL_KEYS))
end

local MSELoss = class("MSELoss")

function MSELoss:init(opts, ...)
  if select("#", ...) > 0 then fail("MSELoss", "takes one options table {reduction =}") end
  self.reduction = reduction_of("MSELoss", checkopts("MSELoss", opts, {"reduction"}).reduction)
end

function MSELoss:forward(input, target)
  return nn.mse_loss(input, target, reduction_of("MSELoss", rawget(self, "reduction")))
end
