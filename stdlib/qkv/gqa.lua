-- gqa.lua: grouped-query attention, qkv.attention's and
-- F.scaled_dot_product_attention's enable_gqa = true, with PyTorch's
-- meaning: Q (..., H, n_q, d) has H heads, K and V (..., H_kv, n_k, d)
-- have H_kv heads dividing H, and query head h (from 1) uses key/value
-- head ceil(h / (H / H_kv)).
--
-- Q is seen as (..., H_kv, G, n_q, d), G = H / H_kv (a view), K and V as
-- (..., H_kv, 1, n_k, d) (views), so that attention broadcasts each
-- key/value head over its group: the fused kernels read the shared K and
-- V where they lie, with no copy, and the backward sums each group's dK
-- and dV as it sums any broadcast. The output (..., H_kv, G, n_q, d_v) is
-- (..., H, n_q, d_v) again (a view). A mask with an H dim is split the
-- same way; a score_mod or mask_mod still sees the query's own b and h
-- (from 1, h up to H): b and h are worked out of the split's. A block mask
-- made for B and H is regrouped the same way (its kinds and spans).

local qkv = require "qkv"

local M = {}

local function fail(fmt, ...) error(string.format(fmt, ...), 0) end
local function shape(t) return tostring(t.shape) end
local open = require("qkv.methods").open_tensor
local what = require("qkv.methods").what_arg

-- the heads of Q, K, V checked: H, H_kv and G = H / H_kv
local function heads(fname, q, k, v)
  for _, p in ipairs{{"Q", q}, {"K", k}, {"V", v}} do
    if not open(p[2]) then
      fail("%s: %s must be a tensor, got %s", fname, p[1], what(p[2]))
    end
  end
  if q:dim() < 3 or k:dim() < 3 or v:dim() < 3 then
    fail("%s: enable_gqa needs Q, K and V with a heads dim (..., H, n, d), got Q %s, K %s and V %s",
         fname, shape(q), shape(k), shape(v))
  end
  local H, Hk, Hv = q:size(-3), k:size(-3), v:size(-3)
  if Hk ~= Hv then
    fail("%s: enable_gqa: K and V must have the same heads H_kv, got K %s and V %s", fname, shape(k),
         shape(v))
  end
  if Hk == 0 or H % Hk ~= 0 then
    fail("%s: enable_gqa: Q's heads H = %d must be a multiple of K's and V's H_kv = %d (Q %s, K %s)",
         fname, H, Hk, shape(q), shape(k))
  end
  return H, Hk, H // Hk
end

-- a mask (or bias) broadcasting to (..., H, n_q, n_k), split as Q is; at
-- = -2 for a key padding mask (..., H, n_k)
local function split_mask(fname, m, H, Hk, G, at, what)
  at = at or -3
  if not open(m) or m:dim() < -at then return m end      -- attention checks what it is
  local h = m:size(at)
  if h == H then return m:unflatten(at, {Hk, G}) end
  if h == 1 then return m:unsqueeze(at) end
  fail("%s: enable_gqa: the %s %s has %d heads where Q has H = %d (it takes H or 1)", fname,
       what or "mask", shape(m), h, H)
end

--[[
Q, K, V and a mask seen grouped: (..., H_kv, G, n, d) and (..., H_kv, 1,
n, d); returns them and G (1: no split, the tensors as given).
]]
function M.split(fname, q, k, v, mask)
  local H, Hk, G = heads(fname, q, k, v)
  if G == 1 then return q, k, v, mask, 1, Hk end
  return q:unflatten(-3, {Hk, G}), k:unsqueeze(-3), v:unsqueeze(-3),
         split_mask(fname, mask, H, Hk, G), G, Hk
end

-- a block mask made for B and H as the grouped call sees it: its kinds
-- and spans (B', H', ...) made (B0, H, ...) and then (B0 H_kv, G, ...), B0
-- Q's batch before the heads, and its mask_mod reading the caller's b and
-- h (bh maps the split's to them)
local function grouped_mask(fname, bm, Hk, G, B0, bh)
  local K, H = bm.kinds, Hk * G
  local kb, kh = K:size(1), K:size(2)
  if (kb ~= 1 and kb ~= B0) or (kh ~= 1 and kh ~= H) then
    fail("%s: enable_gqa: the block_mask was made for B = %s, H = %s, but Q gives B = %d, H = %d",
         fname, tostring(bm.B), tostring(bm.H), B0, H)
  end
  local function regroup(t)
    if t == nil then return nil end
    local to, as = {B0, H}, {B0 * Hk, G}
    for d = 3, t:dim() do to[#to + 1], as[#as + 1] = t:size(d), t:size(d) end
    return t:expand(to):contiguous():view(as)
  end
  local f = bm.mask_mod
  return setmetatable({mask_mod = function(b, h, i, j)
                         local bb, hh = bh(b, h)
                         return f(bb, hh, i, j)
                       end,
                       B = B0 * Hk, H = G, n_q = bm.n_q, n_k = bm.n_k, block = bm.block,
                       kinds = regroup(K), spans = regroup(bm.spans),
                       shape = {B0 * Hk, G, bm.n_q, bm.n_k}}, getmetatable(bm))
end

-- the mods of opts with b and h the caller's: the split's b runs over
-- (..., H_kv) and its h over the group; B0: Q's batch before the heads
local function remap(fname, opts, Hk, G, B0)
  local o = {}
  for key, x in pairs(opts) do o[key] = x end
  local function bh(b, h) return (b - 1) // Hk + 1, ((b - 1) % Hk) * G + h end
  local sm, mm, bm = opts.score_mod, opts.mask_mod, opts.block_mask
  if type(sm) == "function" then
    o.score_mod = function(s, b, h, i, j)
      local bb, hh = bh(b, h)
      return sm(s, bb, hh, i, j)
    end
  end
  if type(mm) == "function" then
    o.mask_mod = function(b, h, i, j)
      local bb, hh = bh(b, h)
      return mm(bb, hh, i, j)
    end
  end
  if bm ~= nil and type(bm) == "table" and (bm.B ~= nil or bm.H ~= nil) and
     open(bm.kinds) and bm.kinds:dim() == 4 then
    o.block_mask = grouped_mask(fname, bm, Hk, G, B0, bh)
    if rawequal(mm, bm.mask_mod) then o.mask_mod = o.block_mask.mask_mod end   -- the same, once
  end
  return o
end

--[[
A decode step (one query per head) folds each group's query heads into
the query rows of one call per key/value head: Q (..., H, 1, d) is seen as
(..., H_kv, G, d) against K and V (..., H_kv, n_k, d), so that the kernel
reads each key/value head's cache once for its G queries rather than G
times. A single query's causal (qkv's, aligned to the last key) keeps
every key, so the folded call has none; the fold is left out where it
would change what a query sees: PyTorch's is_causal (one query sees key 1
alone), a mask, a key padding mask per head, and the mods (whose i would
become the head).
]]
local function foldable(q, o)
  if q:size(-2) ~= 1 or o.is_causal or o.mask ~= nil then return false end
  if o.score_mod ~= nil or o.mask_mod ~= nil or o.block_mask ~= nil then return false end
  local kpm = o.key_padding_mask
  return kpm == nil or not open(kpm) or kpm:dim() < 2 or kpm:size(-2) == 1
end

--[[
call(q, k, v, o) (attention's options o: mask, key_padding_mask, causal,
is_causal, the mods, ...) for Q with H heads and K, V with H_kv: folded
for a decode step, else on the grouped views, with the masks and mods
made to fit them; its results ((..., n_q, x) each) with Q's heads again.
The one way qkv.attention and F.scaled_dot_product_attention take
enable_gqa; o is the caller's copy, changed here.
]]
function M.grouped(fname, q, k, v, o, call)
  local H, Hk, G = heads(fname, q, k, v)
  if G == 1 then return call(q, k, v, o) end
  local r
  if foldable(q, o) then
    -- (..., H, 1, d) seen as (..., H_kv, G, d), and each result (..., H_kv,
    -- G, x) as (..., H, 1, x), by shape (a decode step's overheads: 12 ->
    -- 2 µs a call against squeeze, unflatten and flatten)
    local s = q.shape
    local nd = #s
    s[nd - 2], s[nd - 1] = Hk, G
    o.causal = nil
    r = table.pack(call(q:reshape(table.unpack(s)), k, v, o))
    s[nd - 2], s[nd - 1] = H, 1
    for x = 1, r.n do
      s[nd] = r[x]:size(-1)
      r[x] = r[x]:reshape(table.unpack(s))
    end
  else
    local q5, k5, v5, m5 = M.split(fname, q, k, v, o.mask)
    o.mask = m5
    o.key_padding_mask = split_mask(fname, o.key_padding_mask, H, Hk, G, -2, "key_padding_mask")
    local B0 = 1
    for d = 1, q:dim() - 3 do B0 = B0 * q:size(d) end
    r = table.pack(call(q5, k5, v5, remap(fname, o, Hk, G, B0)))   -- (..., H_kv, G, n_q, x)
    for x = 1, r.n do r[x] = r[x]:flatten(-4, -3) end
  end
  return table.unpack(r, 1, r.n)
end

-- qkv.attention(q, k, v, opts) with opts.enable_gqa (bindings/lattn.c
-- hands such calls here): the call without it, grouped when it is true
function M.attention(q, k, v, opts)
  local o = {}
  for key, x in pairs(opts) do o[key] = x end
  local g = o.enable_gqa
  o.enable_gqa = nil
  if type(g) ~= "boolean" then fail("attention: enable_gqa must be a boolean, got %s", type(g)) end
  if not g then return qkv.attention(q, k, v, o) end
  return M.grouped("attention", q, k, v, o, qkv.attention)    -- out, and W unless weights = false
end

return M
