-- variants/init.lua: attention's variants as Lua functions.
--
--   qkv.attention(q, k, v, {score_mod = f, mask_mod = g, block_mask = bm, ...})
--   qkv.block_mask(mask_mod, B, H, n_q, n_k [, {block = n | {n_q_block, n_k_block}}])
--   qkv.and_masks(g1, g2, ...), qkv.or_masks(g1, g2, ...)
--   qkv.alibi_slopes(H), and the library in qkv.variants (library.lua)
--
-- f(score, b, h, i, j) returns the new score (score = q.k * scale, as
-- FlexAttention's); g(b, h, i, j) whether key j takes part for query i;
-- all counted from 1. The batch dims are read as (..., B, H): h the last
-- one's index, b the index over the dims before it (1 with none).
-- bindings/lattn.c hands attention here when its options name a mod.
--
-- Each call traces the mods once (variants/trace.lua). weights = false runs
-- the fused kernel (vm/cpu/attention*.c with the program, vm/cpu/mods.c),
-- which skips the blocks the mask leaves empty and never holds n_q x n_k;
-- weights = true (attention's default) evaluates the trace on the whole
-- score tensor (variants/replay.lua) and returns the weights as well.
-- Another device takes the fused way where its backend fills the entry
-- attention_mods (the GPU: vm/cuda/mods.cu), the composed way otherwise;
-- gradients there go through the device's fused backward where it fills
-- attention_mods_backward, else the whole call is composed. Block kinds
-- are made on the CPU and copied to the device.

local qkv = require "qkv"
local trace = require "qkv.variants.trace"
local replay = require "qkv.variants.replay"
local open_tensor = require("qkv.methods").open_tensor
local what_arg = require("qkv.methods").what_arg

local M = {}
local issym = trace.issym

-- qkv.where on symbolic values makes a node; on tensors it is qkv's own
local where = qkv.where
rawset(qkv, "where", function(c, a, b, ...)
  if issym(c) or issym(a) or issym(b) then return trace.where(c, a, b) end
  return where(c, a, b, ...)
end)

local function fail(fmt, ...) error(string.format(fmt, ...), 3) end

-- a binding's call whose error reads as the composed path's: without the
-- position of this file, which luaL_error would put first
local function call(f, ...)
  local r = table.pack(pcall(f, ...))
  if not r[1] then error((tostring(r[2]):gsub("^[^\n]-variants/[%w_]+%.lua:%d+: ", "")), 0) end
  return table.unpack(r, 2, r.n)
end
local function shape(t) return tostring(t.shape) end

---------------------------------------------------------------- block masks

local BlockMask = {}
BlockMask.__index = BlockMask
BlockMask.__name = "qkv.BlockMask"
M.BlockMask = BlockMask

local DEFAULT_BLOCK = 64
local MAX_BLOCK = {128, 256}

local function count(x, what, fname, min)
  if math.type(x) ~= "integer" or x < min then
    fail("%s: %s must be an integer >= %d, got %s", fname, what, min, tostring(x))
  end
  return x
end

-- the block sizes of opts.block: n or {n_q_block, n_k_block}
local function blocks(opts, fname)
  if opts == nil then return DEFAULT_BLOCK, DEFAULT_BLOCK end
  if type(opts) ~= "table" then fail("%s: options must be a table, got %s", fname, type(opts)) end
  for key in pairs(opts) do
    if key ~= "block" then fail("%s: unknown option '%s' (it takes block)", fname, tostring(key)) end
  end
  local b = opts.block
  if b == nil then return DEFAULT_BLOCK, DEFAULT_BLOCK end
  local bq, bk = b, b
  if type(b) == "table" then bq, bk = b[1], b[2] end
  for n, x in ipairs{bq, bk} do
    if math.type(x) ~= "integer" or x < 1 or x > MAX_BLOCK[n] then
      fail("%s: option 'block' must be an integer in 1..128 or {n_q_block 1..128, n_k_block 1..256}, got %s",
           fname, tostring(x))
    end
  end
  return bq, bk
end

-- captured tensors as the CPU reads them
local function on_cpu(caps)
  local r = {}
  for n, t in ipairs(caps) do r[n] = t.device == "cpu" and t or t:cpu() end
  return r
end

function M.block_mask(mask_mod, B, H, nq, nk, opts)
  local F = "block_mask"
  if B ~= nil then count(B, "B", F, 1) end
  if H ~= nil then count(H, "H", F, 1) end
  count(nq, "n_q", F, 0)
  count(nk, "n_k", F, 0)
  local bq, bk = blocks(opts, F)
  local T = trace.new(F)
  local r = trace.trace(T, "mask_mod", mask_mod)
  local rb, rh = trace.reads(r, T.b), trace.reads(r, T.h)
  if rb and B == nil then fail("block_mask: mask_mod reads b: give B (nil is for a mask the same for all b)") end
  if rh and H == nil then fail("block_mask: mask_mod reads h: give H (nil is for a mask the same for all h)") end
  local prog, args, out, by, caps = trace.compile(T, nil, r)
  local spec = {prog = prog, args = args, out = out, by = by, caps = on_cpu(caps), capmod = T.capmod,
                fname = F}
  local kinds, spans = call(qkv._block_kinds, spec, rb and B or 1, rh and H or 1, nq, nk, bq, bk)
  return setmetatable({mask_mod = mask_mod, B = B, H = H, n_q = nq, n_k = nk, block = {bq, bk},
                       kinds = kinds, spans = spans, shape = {B or 1, H or 1, nq, nk}}, BlockMask)
end

-- (B', H', n_q blocks, n_k blocks) bool: true where a block is computed
function BlockMask:to_dense() return self.kinds:ne(0) end

-- the fraction of blocks computed (partial or full)
function BlockMask:density()
  local n = self.kinds:numel()
  return n == 0 and 0 or self.kinds:ne(0):sum():item() / n
end

function BlockMask:__tostring()
  local k = self.kinds
  local full, part = k:eq(2):sum():item(), k:eq(1):sum():item()
  return string.format("BlockMask(B=%s, H=%s, n_q=%d, n_k=%d, block=%dx%d: %d full, %d partial, %d empty of %d)",
                       tostring(self.B), tostring(self.H), self.n_q, self.n_k, self.block[1],
                       self.block[2], full, part, k:numel() - full - part, k:numel())
end

local function combine(name, fs, how)
  if #fs == 0 then fail("%s: give at least one mask_mod", name) end
  for n, f in ipairs(fs) do
    if type(f) ~= "function" then fail("%s: argument %d must be a mask_mod function, got %s", name, n, type(f)) end
  end
  return function(b, h, i, j)
    local r = fs[1](b, h, i, j)
    for n = 2, #fs do r = how(r, fs[n](b, h, i, j)) end
    return r
  end
end
function M.and_masks(...) return combine("and_masks", {...}, function(a, b) return a & b end) end
function M.or_masks(...) return combine("or_masks", {...}, function(a, b) return a | b end) end

-- ALiBi's slopes for H heads (Press et al., 2022): 2^(-8h/H) for h = 1..H
-- when H is a power of two; otherwise those of the power of two below H,
-- then every other slope of the power above, as the paper's code does
function M.alibi_slopes(H, ...)
  if select("#", ...) > 0 then fail("alibi_slopes: takes H alone, got more arguments") end
  count(H, "H", "alibi_slopes", 1)
  if H > 1 << 24 then fail("alibi_slopes: H = %d heads is more than %d", H, 1 << 24) end
  local function pow2(n)
    local r = {}
    for h = 1, n do r[h] = 2 ^ (-8 * h / n) end
    return r
  end
  local p = 1
  while p * 2 <= H do p = p * 2 end
  local s = pow2(p)
  if p < H then
    local extra = pow2(2 * p)
    for n = 1, H - p do s[#s + 1] = extra[2 * n - 1] end
  end
  return qkv.tensor(s, "float32")
end

---------------------------------------------------------------- attention

local KNOWN = {mask = true, key_padding_mask = true, causal = true, is_causal = true, scale = true,
               weights = true, score_mod = true, mask_mod = true, block_mask = true}
local FLOAT = {float16 = true, bfloat16 = true, float32 = true, float64 = true}

-- the batch dims of q, k, v (and the mask) broadcast, as attention's
local function batch_of(q, k, v, m)
  local out = {}
  local function fold(t, keep)
    local nb = t:dim() - keep
    local shift = #out - nb
    if shift < 0 then
      for _ = 1, -shift do table.insert(out, 1, 1) end
      shift = 0
    end
    for d = 1, nb do
      local a, b = out[d + shift], t:size(d)
      if a ~= b and a ~= 1 and b ~= 1 then
        fail("attention: Q is %s, K %s and V %s: batch dims do not broadcast", shape(q), shape(k), shape(v))
      end
      out[d + shift] = a == 1 and b or a
    end
  end
  fold(q, 2) fold(k, 2) fold(v, 2)
  if m then fold(m, 2) end
  return out
end

local function check_operands(q, k, v)
  for n, t in ipairs{q, k, v} do
    if not qkv.is_tensor(t) then
      fail("attention: %s must be a tensor, got %s", ({"Q", "K", "V"})[n], type(t))
    end
    if t:dim() < 2 then
      fail("attention: %s must be (..., n, d), got %s", ({"Q", "K", "V"})[n], shape(t))
    end
  end
  if not FLOAT[q.dtype] or k.dtype ~= q.dtype or v.dtype ~= q.dtype then
    fail("attention: Q is %s, K %s and V %s: expected one float dtype (convert with :to())",
         q.dtype, k.dtype, v.dtype)
  end
  if q:size(-1) ~= k:size(-1) then
    fail("attention: Q is %s but K is %s: d_k %d ≠ %d", shape(q), shape(k), q:size(-1), k:size(-1))
  end
  if k:size(-2) ~= v:size(-2) then
    fail("attention: K is %s but V is %s: n_k %d ≠ %d", shape(k), shape(v), k:size(-2), v:size(-2))
  end
end

-- the weights way: the trace on the whole scores, every step a tensor op
local function composed(T, sroot, mroot, q, k, v, m, causal, scale, batch)
  local nq, nk = q:size(-2), k:size(-2)
  local dt = q.dtype
  if dt == "float16" or dt == "bfloat16" then      -- the halves in float32, as fused
    q, k, v = q:float(), k:float(), v:float()
  end
  local full = {table.unpack(batch)}
  full[#full + 1], full[#full + 2] = nq, nk
  local zero = qkv.zeros(full, q.dtype, q.device)  -- every score of the output's batch dims
  local S = qkv.scores(q, k, {scale = scale}) + zero
  local L = replay.leaves(S:double(), batch, nq, nk)
  local r = replay.run(T, {score = sroot, mask = mroot}, L, "attention")
  if sroot then
    local x = r.score
    if not qkv.is_tensor(x) then x = qkv.full_like(S, x, {dtype = "float64"}) end
    S = x:to(S.dtype) + zero
  end
  local keep = zero:eq(0)
  if mroot then
    local x = r.mask
    if not qkv.is_tensor(x) then x = qkv.full_like(S, x, {dtype = "bool"}) end
    keep = keep:logical_and(x)
  end
  if causal then keep = keep:logical_and((L.j - L.i):le(nk - nq)) end
  if m then keep = keep:logical_and(m:ne(0)) end
  local S3 = S:masked_fill(keep:logical_not(), -math.huge)
  local live = keep:logical_and(S3:ne(-math.huge))
  local none = live:any(-1, true):logical_not()
  local W = S3:masked_fill(none, 0):softmax(-1):masked_fill(live:logical_not(), 0)
  local out = W:matmul(v)
  if out.dtype ~= dt then out, W = out:to(dt), W:to(dt) end
  return out, W
end

local function sum_to(g, x) return require("qkv.derivatives").sum_to(g, x) end

-- which of the fused entries the backend of a device other than the CPU
-- fills: {attention_mods = bool, attention_mods_backward = bool}, kept
-- per device once the device has a backend
local filled = {}
local function entries(dev)
  if filled[dev] then return filled[dev] end
  local r = {}
  for _, e in ipairs(qkv._backend_entries()) do
    if e.name == "attention_mods" or e.name == "attention_mods_backward" then r[e.name] = e[dev] == true end
  end
  filled[dev] = r
  return r
end

-- a block mask's kinds (made on the CPU) on q's device, copied once per
-- block mask and device
local kinds_on = setmetatable({}, {__mode = "k"})
local function kinds_for(bm, dev)
  if dev == "cpu" then return bm.kinds end
  local per = kinds_on[bm] or {}
  kinds_on[bm] = per
  per[dev] = per[dev] or bm.kinds:to(dev)
  return per[dev]
end

-- the fused way: the program in the kernels, and a backward of its own
local function fused(T, sroot, mroot, q, k, v, m, causal, scale, bm, batch, both)
  local A = package.loaded["qkv.autograd"]
  local grads = A and A.enabled() and A.any(q, k, v, T.caps)
  local function wants(t) return grads and A.tracked(t) and FLOAT[t.dtype] end
  local prog, args, out, by, caps, gcaps = trace.compile(T, sroot, mroot, grads, wants)
  local spec = {prog = prog, args = args, out = out, by = by, caps = caps, capmod = T.capmod,
                fname = "attention"}
  local nq, nk = q:size(-2), k:size(-2)
  local dev = q.device
  if bm and not both then
    spec.kinds, spec.bq, spec.bk = kinds_for(bm, dev), bm.block[1], bm.block[2]
    if dev == "cpu" then spec.spans = bm.spans end
  elseif mroot then                   -- the blocks of this call's own mask
    local nb = #batch
    local H = nb > 0 and batch[nb] or 1
    local B = 1
    for d = 1, nb - 1 do B = B * batch[d] end
    local kb = trace.reads(mroot, T.b) and B or 1
    local kh = trace.reads(mroot, T.h) and H or 1
    local bq, bk = bm and bm.block[1] or DEFAULT_BLOCK, bm and bm.block[2] or DEFAULT_BLOCK
    local kspec = spec                -- on the CPU, with copies of the captured tensors
    if dev ~= "cpu" then
      kspec = {}
      for key, x in pairs(spec) do kspec[key] = x end
      kspec.caps = on_cpu(spec.caps)
    end
    local kinds, spans = call(qkv._block_kinds, kspec, kb, kh, nq, nk, bq, bk)
    if dev ~= "cpu" then kinds, spans = kinds:to(dev), nil end
    spec.kinds, spec.bq, spec.bk, spec.spans = kinds, bq, bk, spans
  end
  if m and m.dtype ~= "bool" then m = m:ne(0) end
  -- the halves natively where the device can (the GPU's tensor cores, the
  -- program compiled into them), else the dispatch computes in float32
  -- copies, both ways (lse is float32 for them)
  local o, lse = call(qkv._attention_lse, q, k, v, m, causal, scale, spec)
  if grads then
    local inputs = {q, k, v}
    for c, t in ipairs(caps) do inputs[3 + c] = t end
    A.record("FlexAttentionBackward", o, inputs, function(g)
      local gs = {}
      for key, x in pairs(spec) do gs[key] = x end
      gs.grads = {}
      local want = {}
      for _, c in ipairs(gcaps) do want[c] = true end
      for c, t in ipairs(caps) do
        gs.grads[c] = want[c] and qkv.zeros(t.shape, "float64", t.device) or false
      end
      local dq, dk, dv = call(qkv._attention_backward, q, k, v, o, g:to(o.dtype), m, causal,
                              scale, lse, gs)
      local r = {sum_to(dq, q):to(q.dtype), sum_to(dk, k):to(k.dtype), sum_to(dv, v):to(v.dtype)}
      for c, t in ipairs(caps) do
        r[3 + c] = gs.grads[c] and gs.grads[c]:to(t.dtype) or nil
      end
      return table.unpack(r, 1, 3 + #caps)
    end, {q, k, v, o})
  end
  return o
end

function M.attention(q, k, v, opts, ...)
  if select("#", ...) > 0 then fail("attention: takes (Q, K, V [, opts]), got more arguments") end
  if type(opts) ~= "table" then fail("attention: options must be a table, got %s", type(opts)) end
  local base = {}
  for key, x in pairs(opts) do
    if not KNOWN[key] then fail("attention: unknown option '%s'", tostring(key)) end
    if key ~= "score_mod" and key ~= "mask_mod" and key ~= "block_mask" then base[key] = x end
  end
  local score_mod, mask_mod, bm = opts.score_mod, opts.mask_mod, opts.block_mask
  if score_mod ~= nil and type(score_mod) ~= "function" then
    fail("attention: option 'score_mod' must be a function (score, b, h, i, j), got %s", type(score_mod))
  end
  if mask_mod ~= nil and type(mask_mod) ~= "function" then
    fail("attention: option 'mask_mod' must be a function (b, h, i, j), got %s", type(mask_mod))
  end
  if bm ~= nil and getmetatable(bm) ~= BlockMask then
    fail("attention: option 'block_mask' must be what qkv.block_mask gives, got %s", type(bm))
  end
  if bm and rawequal(mask_mod, bm.mask_mod) then mask_mod = nil end   -- the same mask, once
  check_operands(q, k, v)
  -- under autocast: q, k and v in the region's low dtype, as the plain
  -- attention and PyTorch's flex_attention take them (captured tensors
  -- as they are), and the rest outside the region, so that the composed
  -- path's own products are those of the same call on explicit casts
  local ac = package.loaded["qkv.amp.autocast"]
  if ac and (q.device == "cpu" or q.device == "cuda") and ac.is_autocast_enabled(q.device) then
    q, k, v = ac.args("attention", q, k, v)
    return ac.autocast({device_type = q.device, enabled = false}, M.attention, q, k, v, opts)
  end
  local m, causal, scale, weights = qkv._attention_opts(q, k, base)
  local batch = batch_of(q, k, v, m)
  local nq, nk = q:size(-2), k:size(-2)
  if bm then
    local nb = #batch
    local H = nb > 0 and batch[nb] or 1
    local B = 1
    for d = 1, nb - 1 do B = B * batch[d] end
    if bm.n_q ~= nq or bm.n_k ~= nk then
      fail("attention: block_mask was made for n_q = %d, n_k = %d, but Q is %s and K %s",
           bm.n_q, bm.n_k, shape(q), shape(k))
    end
    if (bm.B and bm.B ~= B and bm.kinds:size(1) ~= 1) or (bm.H and bm.H ~= H and bm.kinds:size(2) ~= 1) then
      fail("attention: block_mask was made for B = %s, H = %s, but the batch dims give B = %d, H = %d",
           tostring(bm.B), tostring(bm.H), B, H)
    end
    local s, K = bm.spans, bm.kinds
    if s ~= nil and not (open_tensor(s) and s.dtype == "int32" and s.device == "cpu" and
                         s:is_contiguous() and s:dim() == 4 and s:size(1) == K:size(1) and
                         s:size(2) == K:size(2) and s:size(3) == nq and s:size(4) == 2) then
      fail("attention: block_mask.spans must be the int32 (%d, %d, %d, 2) tensor block_mask made, got %s",
           K:size(1), K:size(2), nq, what_arg(s))
    end
  end
  local T = trace.new("attention", q.device)
  local sroot = score_mod and trace.trace(T, "score_mod", score_mod)
  local mroot = mask_mod and trace.trace(T, "mask_mod", mask_mod)
  if bm then
    local r = trace.trace(T, "mask_mod", bm.mask_mod)
    mroot = mroot and trace.both(T, mroot, r) or r
  end
  for c, t in ipairs(T.caps) do
    if t.device ~= q.device then
      fail("attention: %s: a captured tensor %s is on %s, but Q is on %s", T.capmod[c], shape(t),
           t.device, q.device)
    end
  end
  if weights then return composed(T, sroot, mroot, q, k, v, m, causal, scale, batch) end
  if q.device ~= "cpu" then             -- fused where the device's backend has it
    local e = entries(q.device)
    local A = package.loaded["qkv.autograd"]
    local grads = A and A.enabled() and A.any(q, k, v, T.caps)
    if not e.attention_mods or (grads and not e.attention_mods_backward) then
      return (composed(T, sroot, mroot, q, k, v, m, causal, scale, batch))
    end
  end
  return fused(T, sroot, mroot, q, k, v, m, causal, scale, bm, batch, mask_mod ~= nil and bm ~= nil)
end

-- the library of common variants (library.lua) joins this module
for name, f in pairs(require("qkv.variants.library")) do M[name] = f end

return qkv._strict(M, "qkv.variants")      -- a misspelt name is an error, not nil
