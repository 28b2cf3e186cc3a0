-- sampling.lua: drawing tokens from a model's scores.
--
--   qkv.multinomial(probs, num_samples [, {replacement = false}])
--       PyTorch's torch.multinomial: probs (C) or (R, C), non-negative
--       weights (not necessarily summing to 1); per row num_samples
--       category indices, counted from 1 (int64 (num_samples) or (R,
--       num_samples)). Without replacement the draws are distinct
--       (num_samples <= the categories a row weighs above 0); with it,
--       each draw is independent.
--   qkv.sample(logits [, {temperature = 1, top_k, top_p}])
--       one token per row of logits (..., V) -> int64 (...), from 1: the
--       logits divided by the temperature, cut to the top_k largest and
--       to the smallest set whose probability reaches top_p (Hugging
--       Face's TopK and TopP warpers, in that order), then one draw.
--       temperature = 0 is greedy: the largest logit (the first of ties).
--
-- Both draw from qkv's generator (qkv.manual_seed), on the CPU; a tensor
-- on another device gives its result there.

local qkv = require "qkv"

local M = {}

local function fail(fmt, ...) error(string.format(fmt, ...), 3) end
local function shape(t) return tostring(t.shape) end
local FLOAT = {float32 = true, float64 = true, float16 = true, bfloat16 = true}
local open = require("qkv.methods").open_tensor
local what = require("qkv.methods").what_arg     -- dtype and shape, a closed tensor, or its type

-- opts checked by the library's one checker (qkv._checkopts): the known
-- keys, read once; flags must be booleans
local function options(fname, opts, known, flags)
  local msg, o = qkv._checkopts(fname, opts, known, flags)
  if msg then error(msg, 3) end
  return o
end

-- draws of row-wise categories from weights w (R, C) float64 on the CPU
-- (its uniforms there too, whatever the default device)
local function draw(w, n, replacement)
  local R, C = w:size(1), w:size(2)
  if replacement then
    -- the first category whose running sum passes u * total: the count of
    -- running sums <= u, by binary search (R x n memory, where comparing
    -- them all took R x n x C: 27 GB for 10^5 draws over 30522 tokens).
    -- Each row scaled by its largest weight first, so that its sum cannot
    -- overflow (1e308 twice gave category 3 of 2), and the last category
    -- above 0 taken where u rounds up to the total (subnormal weights)
    w = w / w:max(2, true)
    local c = w:cumsum(2)
    local u = qkv.rand({R, n}, "float64", "cpu") * c:narrow(2, C, 1)
    local lo, hi = qkv.zeros({R, n}, "int64", "cpu"), qkv.full({R, n}, C, "int64", "cpu")
    for _ = 1, math.ceil(math.log(C + 1, 2)) + 1 do
      local active = lo:lt(hi)
      local mid = ((lo + hi + 1):double() / 2):long():clamp(1, C)
      local le = c:gather(2, mid):le(u)
      lo = qkv.where(active:logical_and(le), mid, lo)
      hi = qkv.where(active:logical_and(le:logical_not()), mid - 1, hi)
    end
    local pos = qkv.arange(1, C + 1, "int64", "cpu"):reshape(1, C)
    local last = qkv.where(w:gt(0), pos, 0):max(2, true)
    return qkv.minimum(lo + 1, last)
  end
  -- without: the n largest of log w - log(-log U) (the Gumbel top-k
  -- trick: the same law as drawing one at a time and removing it)
  local g = w:log() - (-(qkv.rand({R, C}, "float64", "cpu"):clamp(1e-300, 1)):log()):log()
  local _, idx = g:topk(n, 2)
  return idx
end

function M.multinomial(probs, n, opts)
  local F = "multinomial"
  -- the options read first: a table's metamethods run there (and may
  -- close a tensor), before the tensors are checked
  local rep = options(F, opts, {"replacement"}, {"replacement"}).replacement
  if not open(probs) or not FLOAT[probs.dtype] or probs:dim() < 1 or probs:dim() > 2 then
    fail("%s: probs must be a floating tensor (C) or (R, C), got %s", F, what(probs))
  end
  if math.type(n) ~= "integer" or n < 1 then
    fail("%s: num_samples must be an integer >= 1, got %s", F, tostring(n))
  end
  local w = probs:cpu():double()
  local one = w:dim() == 1
  if one then w = w:reshape(1, w:size(1)) end
  local C = w:size(2)
  if C == 0 then fail("%s: probs %s has no categories", F, shape(probs)) end
  if not (w - w):eq(0):all():item() or w:lt(0):any():item() then      -- NaN, inf or < 0
    fail("%s: probs must be finite and >= 0, got %s", F, shape(probs))
  end
  if w:size(1) == 0 then                      -- no rows: no draws, as torch's (0, n)
    return qkv.zeros({0, n}, "int64"):to(probs.device)
  end
  local live = w:gt(0):long():sum(2)
  if live:min():item() == 0 then fail("%s: a row of probs %s sums to 0", F, shape(probs)) end
  if not rep and n > live:min():item() then
    fail("%s: %d samples without replacement from a row with %d categories above 0 (probs %s)", F,
         n, live:min():item(), shape(probs))
  end
  local idx = draw(w, n, rep == true)
  if one then idx = idx:reshape(n) end
  return idx:to(probs.device)
end

function M.sample(logits, opts)
  local F = "sample"
  local o = options(F, opts, {"temperature", "top_k", "top_p"})   -- first, as multinomial's
  if not open(logits) or not FLOAT[logits.dtype] or logits:dim() < 1 then
    fail("%s: logits must be a floating tensor (..., V), got %s", F, what(logits))
  end
  local t = o.temperature == nil and 1 or o.temperature
  if type(t) ~= "number" or not (t >= 0) or t == math.huge then
    fail("%s: temperature must be a number >= 0, got %s", F, tostring(t))
  end
  local Vn = logits:size(-1)
  if Vn == 0 then fail("%s: logits %s have no tokens", F, shape(logits)) end
  local k, p = o.top_k, o.top_p
  if k ~= nil and (math.type(k) ~= "integer" or k < 1) then
    fail("%s: top_k must be an integer >= 1, got %s", F, tostring(k))
  end
  if p ~= nil and (type(p) ~= "number" or not (p > 0 and p <= 1)) then
    fail("%s: top_p must be a number in (0, 1], got %s", F, tostring(p))
  end
  local lead = {}
  for d = 1, logits:dim() - 1 do lead[d] = logits:size(d) end
  local x = logits:cpu():double():reshape(-1, Vn)
  if x:ne(x):any():item() then fail("%s: logits %s hold NaN", F, shape(logits)) end
  local out
  if t == 0 then                               -- greedy: the first largest
    local mx = x:max(2)
    out = x:eq(mx:reshape(-1, 1)):long():cumsum(2):eq(0):long():sum(2) + 1
  else
    x = x / t
    local neg = -math.huge
    if k and k < Vn then                       -- below the k-th largest: out
      local top = x:topk(k, 2)
      x = x:masked_fill(x:lt(top:narrow(2, k, 1)), neg)
    end
    if p and p < 1 then                        -- past the first set that reaches p: out
      local sorted, order = x:sort(2, true)
      local probs = sorted:softmax(2)
      local before = probs:cumsum(2) - probs    -- mass of the tokens ranked above
      local cut = before:ge(p)                  -- the first token is never cut
      local drop = qkv.zeros(x.shape, "bool", "cpu"):scatter(2, order, cut)
      x = x:masked_fill(drop, neg)
    end
    -- a row with no distribution: all -inf (a softmax of zeros), or +inf
    -- (a NaN one, from a +inf logit or one over a tiny temperature), as
    -- PyTorch's multinomial refuses it; it drew token V + 1, or token 1
    local probs = x:softmax(2)
    if probs:ne(probs):any():item() or probs:sum(2):eq(0):any():item() then
      fail("%s: a row of logits %s gives no distribution (all -inf, or +inf: over the "
           .. "temperature %s); temperature = 0 takes the largest", F, shape(logits), tostring(t))
    end
    out = draw(probs, 1, true):reshape(-1)
  end
  if #lead == 0 then return out:reshape({}):to(logits.device) end
  return out:reshape(table.unpack(lead)):to(logits.device)
end

return M
