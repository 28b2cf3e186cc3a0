-- variants/library.lua: the common attention variants as score_mods and
-- mask_mods, each a one-liner for qkv.attention's options (in
-- qkv.variants):
--
--   mask_mods (b, h, i, j -> boolean), i a query, j a key, from 1
--     causal([offset])            j <= i + offset; offset 0 is PyTorch's
--                                 is_causal (the top-left diagonal)
--     causal_end(n_q, n_k)        qkv's causal: the bottom-right diagonal
--     sliding_window(w [, {causal = false}])
--                                 the last w keys up to i (Longformer, Mistral:
--                                 i - w < j <= i), or |i - j| < w
--     document(ids [, kv_ids])    keys of the query's own document, ids (n) or
--                                 (B, n) (packed sequences)
--     document_lengths(lengths)   the same from the documents' lengths
--     prefix_lm(p)                the first p keys for everyone, causal after
--                                 (T5's prefix LM, UniLM)
--   score_mods (score, b, h, i, j -> number)
--     alibi(H | slopes)           score + slope_h (j - i) (ALiBi, Press et al.)
--     softcap(c)                  c tanh(score / c) (Gemma 2)
--     t5_bias(bias [, opts])      score + bias[h, bucket(j - i)] (T5's relative
--                                 position buckets, Raffel et al.), bias (H, buckets)
--   relative_buckets(rel [, opts]) T5's bucket of a relative position (0-based)
--
-- The tensors these capture (ids, slopes, bias) follow q to its device: a
-- copy is made once per device.

local qkv = require "qkv"
local trace = require "qkv.variants.trace"

local L = {}

-- t on the device of the call being traced: the library's own tensors (and
-- those given to it) follow q, copied once per device
local function follow(t)
  local copies = {}
  return function()
    local dev = trace.device()
    if t.device == dev then return t end
    if t.requires_grad then return t:to(dev) end       -- learnable: copied each call
    copies[dev] = copies[dev] or t:to(dev)
    return copies[dev]
  end
end

local function fail(fmt, ...) error(string.format(fmt, ...), 3) end

local open_tensor = require("qkv.methods").open_tensor

-- the most of a length or a count of heads the library takes: past it a
-- list would not fit in memory, and no model comes near
local MOST = 1 << 24
local function integer(x, what, name, min)
  if math.type(x) ~= "integer" or x < min then
    fail("%s: %s must be an integer >= %d, got %s", name, what, min, tostring(x))
  end
end

function L.causal(offset)
  offset = offset or 0
  integer(offset, "offset", "causal", math.mininteger)
  return function(b, h, i, j) return j:le(i + offset) end
end

function L.causal_end(nq, nk)
  integer(nq, "n_q", "causal_end", 0)
  integer(nk, "n_k", "causal_end", 0)
  return L.causal(nk - nq)
end

function L.sliding_window(w, opts)
  integer(w, "w", "sliding_window", 1)
  if opts ~= nil and type(opts) ~= "table" then fail("sliding_window: options must be a table") end
  for key in pairs(opts or {}) do
    if key ~= "causal" then fail("sliding_window: unknown option '%s' (it takes causal)", tostring(key)) end
  end
  if opts and opts.causal == false then
    return function(b, h, i, j) return (i - j):abs():lt(w) end
  end
  return function(b, h, i, j) return j:le(i) & j:gt(i - w) end
end

function L.document(ids, kv_ids)
  kv_ids = kv_ids == nil and ids or kv_ids
  for _, t in ipairs{ids or false, kv_ids or false} do
    if not open_tensor(t) or (t:dim() ~= 1 and t:dim() ~= 2) then
      fail("document: ids must be a tensor (n) or (B, n) of document ids")
    end
  end
  if ids:dim() ~= kv_ids:dim() then fail("document: ids and kv_ids must have one rank") end
  local qi, ki = follow(ids), follow(kv_ids)
  if ids:dim() == 1 then
    return function(b, h, i, j) return qi()[i]:eq(ki()[j]) end
  end
  return function(b, h, i, j) return qi()[{b, i}]:eq(ki()[{b, j}]) end
end

function L.document_lengths(lengths)
  if type(lengths) ~= "table" or #lengths == 0 then
    fail("document_lengths: lengths must be a list of positive integers")
  end
  local ids, total = {}, 0
  for d, n in ipairs(lengths) do
    integer(n, "each length", "document_lengths", 1)
    total = total + n
    if n > MOST or total > MOST then
      fail("document_lengths: the lengths add up to more than %d tokens", MOST)
    end
    for _ = 1, n do ids[#ids + 1] = d end
  end
  return L.document(qkv.tensor(ids, "int64"))
end

function L.prefix_lm(p)
  integer(p, "p", "prefix_lm", 0)
  return function(b, h, i, j) return j:le(i) | j:le(p) end
end

function L.alibi(H)
  local slopes = H
  if math.type(H) == "integer" then
    integer(H, "H", "alibi", 1)
    if H > MOST then fail("alibi: H = %d heads is more than %d", H, MOST) end
    slopes = qkv.alibi_slopes(H)
  elseif not open_tensor(H) or H:dim() ~= 1 then
    fail("alibi: give the number of heads H, or the slopes as a tensor (H)")
  end
  local on = follow(slopes)
  return function(score, b, h, i, j) return score + on()[h] * (j - i) end
end

function L.softcap(c)
  if type(c) ~= "number" or not (c > 0) then fail("softcap: c must be a positive number, got %s", tostring(c)) end
  return function(score, b, h, i, j) return (score / c):tanh() * c end
end

-- T5's bucket of rel = j - i (key minus query): exact up to half the
-- buckets, logarithmic up to max_distance, the last bucket beyond; with
-- bidirectional, half the buckets for keys after the query
local function bucket_opts(opts, name)
  opts = opts or {}
  if type(opts) ~= "table" then fail("%s: options must be a table", name) end
  for key in pairs(opts) do
    if key ~= "num_buckets" and key ~= "max_distance" and key ~= "bidirectional" then
      fail("%s: unknown option '%s' (it takes num_buckets, max_distance, bidirectional)", name, tostring(key))
    end
  end
  local nb, md = opts.num_buckets or 32, opts.max_distance or 128
  integer(nb, "num_buckets", name, 2)
  integer(md, "max_distance", name, 1)
  -- T5's formula takes log(max_distance / exact) for the buckets past the
  -- exact ones: none of those (num_buckets 2 or 3 when bidirectional), or a
  -- max_distance not past them, gives buckets out of range or a NaN one
  -- (HF's: garbage or a ZeroDivisionError), so they are an error
  local bi = opts.bidirectional ~= false
  local exact = (bi and nb // 2 or nb) // 2
  if exact < 1 then
    fail("%s: num_buckets = %d leaves no exact bucket%s (at least %d)", name, nb,
         bi and " (halved for each direction, bidirectional)" or "", bi and 4 or 2)
  end
  if md <= exact then
    fail("%s: max_distance = %d must be past the %d exact buckets (num_buckets / 2%s)", name, md,
         exact, bi and ", halved again when bidirectional" or "")
  end
  return nb, md, bi
end

local function buckets(rel, nb, md, bidirectional)
  local ret = 0
  local n
  if bidirectional then
    nb = nb // 2
    ret = qkv.where(rel:gt(0), nb, 0)
    n = rel:abs()
  else
    n = (-rel):relu()
  end
  local exact = nb // 2
  local large = exact + ((n:maximum(1) / exact):log() / math.log(md / exact) * (nb - exact)) // 1
  large = large:minimum(nb - 1)
  return ret + qkv.where(n:lt(exact), n, large)
end

function L.relative_buckets(rel, opts)
  if not require("qkv.variants.trace").issym(rel) then
    fail("relative_buckets: rel must be a symbolic number (such as j - i inside a score_mod), got %s",
         type(rel))
  end
  return buckets(rel, bucket_opts(opts, "relative_buckets"))
end

function L.t5_bias(bias, opts)
  if not open_tensor(bias) or bias:dim() ~= 2 then fail("t5_bias: bias must be a tensor (H, num_buckets)") end
  opts = opts or {}
  if type(opts) ~= "table" then fail("t5_bias: options must be a table") end
  for key in pairs(opts) do
    if key ~= "num_buckets" and key ~= "max_distance" and key ~= "bidirectional" then
      fail("t5_bias: unknown option '%s' (it takes num_buckets, max_distance, bidirectional)", tostring(key))
    end
  end
  local nb, md, bi = bucket_opts({num_buckets = opts.num_buckets or bias:size(2),
                                  max_distance = opts.max_distance,
                                  bidirectional = opts.bidirectional}, "t5_bias")
  local on = follow(bias)
  return function(score, b, h, i, j) return score + on()[{h, buckets(j - i, nb, md, bi) + 1}] end
end

return L
