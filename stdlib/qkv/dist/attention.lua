-- dist/attention.lua: attention over a sequence split across the ranks of
-- qkv.dist, for sequences too long for one process. Each rank holds a
-- contiguous block of the sequence (dim -2) of q, k and v, rank 0 the
-- first, every rank blocks of the same sizes; each gets back its block of
-- the output, what qkv.attention gives on the whole sequence.
--
--   ring_attention(q, k, v [, {causal=, mask=, scale=}])
--     q (..., n_q/P, d), k (..., n_k/P, d), v (..., n_k/P, d_v); float32 or
--     float64. The k/v blocks go round the ring (to rank + 1, from rank - 1;
--     the next block's transfer overlaps this one's compute) and each rank
--     keeps an online softmax over its queries: the partial results of
--     qkv._attention_lse, (out_j, lse_j), combine as out = Σ out_j
--     exp(lse_j - lse), lse = logsumexp_j lse_j. Differentiable: one node,
--     whose backward sends k/v round the ring again with their gradients
--     accumulating beside them (qkv._attention_backward with the global out
--     and lse, FlashAttention-2's backward one key block at a time). The
--     ring itself is in dist/ring.lua; this file checks the call and
--     records the node.
--   ulysses_attention(q, k, v [, {causal=, mask=, scale=}])
--     q, k, v (..., H, n/P, d), H divisible by P (DeepSpeed-Ulysses): an
--     all_to_all from sequence blocks to head groups (each rank H/P heads
--     over the whole sequence), qkv.attention there, an all_to_all back.
--     Differentiable through qkv.attention's rule and an all_to_all node
--     whose backward is the reverse all_to_all.
--
-- Both: causal is qkv.attention's on the whole sequence (key j for query
-- i when j <= i + n_k - n_q, global positions); mask is this rank's query
-- rows of the global mask, broadcastable to (..., n_q/P, n_k) with the
-- keys global (true = may attend). The ranks check together that they
-- were called alike, so a mismatch is an error on every rank. Both are
-- collectives, forward and backward: every rank calls them, and every
-- rank's backward must reach the node (as for DDP).
--
-- Balanced under causal: the ring skips the key blocks wholly in a rank's
-- future, which would leave rank P-1 P blocks and rank 0 one, so with
-- causal on more than one rank and both block lengths even the ring runs
-- on the zigzag layout (rank r computes on the halves r and 2P-1-r of the
-- 2P; dist/ring.lua), the halves moving there and the output back, and
-- each rank still gets its contiguous block (where n_q > n_k the first
-- n_q - n_k queries see no key, and no layout of halves is even). The
-- ring computes on the CPU (MPI moves CPU memory, and the CPU kernel
-- leaves the log-sum-exps the combination and the backward need): tensors
-- on another device go through CPU copies and the output and gradients
-- come back there.

local qkv = require "qkv"
local D = require "qkv.dist"
local Ring = require "qkv.dist.ring"
local what_arg = require("qkv.methods").what_arg
D._library(debug.getinfo(1, "S").source)

local M = {}
local fail, checktensor = D._fail, D._checktensor

---------------------------------------------------------------- shapes

local dims = Ring.dims

local function shape_text(s)
  local parts = {}
  for i = 1, #s do parts[i] = tostring(s[i]) end
  return "(" .. table.concat(parts, ", ") .. (#s == 1 and ",)" or ")")
end

-- the broadcast of shapes a and b (lists), or nil
local function broadcast(a, b)
  local n, out = math.max(#a, #b), {}
  for i = 1, n do
    local x, y = a[#a - n + i] or 1, b[#b - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    out[i] = x == 1 and y or x
  end
  return out
end

local batch = Ring.batch

---------------------------------------------------------------- checks


local OPTS = "causal, mask, scale"

local function options(fname, opts)
  if opts == nil then return false, nil, nil end
  if type(opts) ~= "table" then
    fail("dist.%s: options must be a table, got %s", fname, type(opts))
  end
  for k in pairs(opts) do
    if k ~= "causal" and k ~= "mask" and k ~= "scale" then
      fail("dist.%s: unknown option '%s' (it has %s)", fname, tostring(k), OPTS)
    end
  end
  if opts.causal ~= nil and type(opts.causal) ~= "boolean" then
    fail("dist.%s: option 'causal' must be a boolean, got %s", fname, type(opts.causal))
  end
  if opts.scale ~= nil and type(opts.scale) ~= "number" then
    fail("dist.%s: option 'scale' must be a number, got %s", fname, type(opts.scale))
  end
  if opts.mask ~= nil then
    if not qkv.is_tensor(opts.mask) or not pcall(function() return opts.mask.ndim end) then
      fail("dist.%s: option 'mask' must be a tensor, got %s", fname, what_arg(opts.mask))
    end
  end
  return opts.causal == true, opts.mask, opts.scale
end

-- q, k, v as attention takes them: (..., n, d) with at least `least` dims,
-- one d for q and k, one n for k and v, batch dims that broadcast
local function check_qkv(fname, q, k, v, least, layout)
  for i, p in ipairs({{"q", q, "n_q, d"}, {"k", k, "n_k, d"}, {"v", v, "n_k, d_v"}}) do
    if p[2].ndim < least then
      fail("dist.%s: bad argument #%d (%s must be (..., %s%s), at least %d-D, got %s)", fname, i,
           p[1], layout or "", p[3], least, shape_text(dims(p[2])))
    end
  end
  local sq, sk, sv = dims(q), dims(k), dims(v)
  if sq[#sq] ~= sk[#sk] then
    fail("dist.%s: q %s and k %s must have the same d (%d ≠ %d)", fname, shape_text(sq),
         shape_text(sk), sq[#sq], sk[#sk])
  end
  if sk[#sk - 1] ~= sv[#sv - 1] then
    fail("dist.%s: k %s and v %s must hold the same keys (n_k/P %d ≠ %d)", fname, shape_text(sk),
         shape_text(sv), sk[#sk - 1], sv[#sv - 1])
  end
  if not broadcast(broadcast(batch(sq, 2), batch(sk, 2)) or {0}, batch(sv, 2)) then
    fail("dist.%s: the batch dims of q %s, k %s and v %s do not broadcast", fname, shape_text(sq),
         shape_text(sk), shape_text(sv))
  end
  if q.device ~= k.device or q.device ~= v.device then
    fail("dist.%s: q, k and v must be on one device, got %s, %s and %s", fname, q.device,
         k.device, v.device)
  end
end

-- the mask as bool (true = may attend), or nil and why not: a float mask
-- holds 0 and 1 alone, not only 0 (PyTorch's additive mask is an error,
-- as qkv.attention's). Found before the ranks agree: values may differ
-- from rank to rank, and a rank that raised alone would leave the others
-- waiting in the ring.
local function mask_values(fname, m)
  if m == nil then return nil end
  return qkv._keep_mask(m, "dist." .. fname)
end

-- the mask checked against this rank's rows: broadcastable to (..., bq,
-- nk) (nk the global key count)
local function check_mask(fname, m, bq, nk, P)
  if m == nil then return nil end
  local s, n = dims(m), m.ndim
  local ok = (n < 1 or s[n] == nk or s[n] == 1) and (n < 2 or s[n - 1] == bq or s[n - 1] == 1)
  if not ok then
    fail("dist.%s: mask %s must be this rank's rows of the global mask, broadcastable to "
         .. "(..., n_q/P, n_k) = (..., %d, %d) (%d ranks)", fname, shape_text(s), bq, nk, P)
  end
  return m
end

local DT, DTNAME = D._dtypes, D._dtype_names
local NAMES = {"q", "k", "v", "mask"}

-- a rank's numbers in words: its blocks' dtypes and shapes, its options,
-- and whether its mask is one qkv refuses (mask_values' why)
local function blocks_text(row)
  local parts = {}
  for t = 1, 4 do
    local base = (t - 1) * 10
    if row[base + 2] >= 0 then
      local s = {}
      for j = 1, row[base + 2] do s[j] = row[base + 2 + j] end
      parts[#parts + 1] = ("%s %s %s"):format(NAMES[t], DTNAME[row[base + 1]] or "?",
                                              shape_text(s))
    else
      parts[#parts + 1] = "no mask"
    end
  end
  parts[#parts + 1] = row[41] == 1 and "causal" or "not causal"
  parts[#parts + 1] = ("scale %.17g"):format(string.unpack("<d", string.pack("<i8", row[42])))
  if row[43] == 1 then parts[#parts + 1] = "a mask not of 0 and 1, or all 0" end
  return table.concat(parts, ", ")
end
M._blocks_text = blocks_text

-- every rank was called with the same shapes, dtypes and options (and a
-- mask whose values qkv takes, or refuses, on all: why, from mask_values),
-- or an error on every rank naming what each had; then why on every rank
local function agree(fname, q, k, v, m, causal, scale, why)
  local d = {}
  for _, t in ipairs({q, k, v, m or false}) do
    d[#d + 1] = t and DT[t.dtype] or 0
    d[#d + 1] = t and t.ndim or -1
    for j = 1, 8 do d[#d + 1] = t and t.shape[j] or -1 end
  end
  d[#d + 1] = causal and 1 or 0
  d[#d + 1] = string.unpack("<i8", string.pack("<d", scale))
  d[#d + 1] = why and 1 or 0
  local groups = D._differ(d, blocks_text, fname)
  if not groups then
    if why then fail("%s", why) end
    return
  end
  local text = {}
  for i, g in ipairs(groups) do text[i] = g.ranks .. ": " .. g.key end
  fail("dist.%s: the ranks' blocks or options differ (each rank holds a block of the same "
       .. "shape): %s", fname, table.concat(text, "; "))
end

---------------------------------------------------------------- autograd

-- qkv.autograd when a node is to be recorded for these inputs, else nil
local function recording(...)
  local A = package.loaded["qkv.autograd"]
  if A and A.enabled() and A.any(...) then return A end
  return nil
end

---------------------------------------------------------------- ring

-- the default scale, 1/sqrt(d), before q's rank is checked
local function default_scale(q)
  return 1 / math.sqrt(math.max(q.ndim > 0 and q.shape[q.ndim] or 1, 1))
end

-- the output's shape: the scores' ((..., bq, nk), the batch dims of q, k,
-- v and the mask broadcast) with d_v last
local function out_shape(q, k, v, mask, bq, nk)
  local s = broadcast(broadcast(batch(dims(q), 2), batch(dims(k), 2)), batch(dims(v), 2))
  s[#s + 1], s[#s + 2] = bq, nk
  if mask then
    local m = broadcast(s, dims(mask))
    if m == nil then                   -- (the same on every rank: the ranks agreed on shapes)
      fail("dist.ring_attention: mask %s does not broadcast to the scores' shape %s",
           shape_text(dims(mask)), shape_text(s))
    end
    s = m
  end
  s[#s] = v.shape[v.ndim]
  return s
end

-- what both take first: the tensors and options checked, the world
local function prologue(F, q, k, v, opts)
  checktensor(F, q, 1, "q")
  checktensor(F, k, 2, "k")
  checktensor(F, v, 3, "v")
  local causal, mask, scale = options(F, opts)
  return causal, mask, scale or default_scale(q), D.world_size(), D.rank()
end

function M.ring_attention(q, k, v, opts)
  local F = "ring_attention"
  local causal, mask, scale, P, r = D._checked(F, prologue, F, q, k, v, opts)
  local keep, why = mask_values(F, mask)
  -- first the ranks compare their calls, so that the checks after fail
  -- on every rank alike
  agree(F, q, k, v, mask, causal, scale, why)
  check_qkv(F, q, k, v, 2)
  local dt = q.dtype
  if (dt ~= "float32" and dt ~= "float64") or k.dtype ~= dt or v.dtype ~= dt then
    fail("dist.ring_attention: q, k and v must be float32 or float64, one dtype (the fused "
         .. "kernel's, with its log-sum-exps), got %s, %s and %s", dt, k.dtype, v.dtype)
  end
  local bq, bk = q.shape[q.ndim - 1], k.shape[k.ndim - 1]
  mask = check_mask(F, keep, bq, P * bk, P)
  local device = q.device
  local function cpu(x) return x:to("cpu"):contiguous() end
  local A = recording(q, k, v)
  local c
  local function forward()
    c = {P = P, r = r, mpi = P > 1 and D._mpi() or nil, q = cpu(q), k = cpu(k), v = cpu(v),
         mask = mask and mask:to("cpu"), causal = causal, scale = scale, bq = bq, bk = bk,
         nq = P * bq, nk = P * bk, out_shape = out_shape(q, k, v, mask, bq, P * bk),
         keep = A ~= nil}
    return Ring.forward(c)
  end
  local out
  if A then out = A.no_grad(forward) else out = forward() end
  local y = device == "cpu" and out or out:to(device)
  if A then
    A.record("RingAttentionBackward", y, {q, k, v}, function(g)
      g = g:to("cpu"):to(out.dtype):contiguous()
      local dq, dk, dv = Ring.backward(c, g)
      if device ~= "cpu" then dq, dk, dv = dq:to(device), dk:to(device), dv:to(device) end
      return dq, dk, dv
    end, {q, k, v})
  end
  return y
end

---------------------------------------------------------------- Ulysses

-- D.all_to_all as an op of the graph: its gradient is the reverse all_to_all
local function all_to_all(t, split, cat)
  local A = recording(t)
  if not A then return D.all_to_all(t, split, cat) end
  local y = A.no_grad(D.all_to_all, t, split, cat)
  return A.record("AllToAllBackward", y, {t}, function(g) return D.all_to_all(g, cat, split) end)
end

-- this rank's rows of the mask made whole for its heads: the rows of
-- every rank gathered (unless the mask broadcasts over queries), and its
-- heads' slice where the mask has heads
local function ulysses_mask(m, H, P, r)
  if m == nil then return nil end
  if m.ndim >= 2 and m.shape[m.ndim - 1] ~= 1 and P > 1 then
    local g = D.all_gather(m:contiguous())           -- (P, ..., bq, nk)
    local order, n = {}, g.ndim
    for i = 2, n - 2 do order[#order + 1] = i end
    order[#order + 1], order[#order + 2], order[#order + 3] = 1, n - 1, n
    local s = dims(m)
    s[#s - 1] = s[#s - 1] * P
    m = g:permute(table.unpack(order)):reshape(table.unpack(s))
  end
  if m.ndim >= 3 and m.shape[m.ndim - 2] ~= 1 then
    m = m:narrow(-3, r * (H // P) + 1, H // P)
  end
  return m
end

function M.ulysses_attention(q, k, v, opts)
  local F = "ulysses_attention"
  local causal, mask, scale, P, r = D._checked(F, prologue, F, q, k, v, opts)
  local keep, why = mask_values(F, mask)
  agree(F, q, k, v, mask, causal, scale, why)
  check_qkv(F, q, k, v, 3, "H, ")
  local H = q.shape[q.ndim - 2]
  for i, p in ipairs({{"q", q}, {"k", k}, {"v", v}}) do
    local h = p[2].shape[p[2].ndim - 2]
    if h % P ~= 0 or h ~= H then
      fail("dist.ulysses_attention: bad argument #%d (%s %s: its heads (dim -3, %d) must be q's "
           .. "(%d) and divide among the %d ranks)", i, p[1], shape_text(dims(p[2])), h, H, P)
    end
  end
  mask = check_mask(F, keep, q.shape[q.ndim - 1], P * k.shape[k.ndim - 1], P)
  local mh = mask and mask.ndim >= 3 and mask.shape[mask.ndim - 2]
  if mh and mh ~= 1 and mh ~= H then
    fail("dist.ulysses_attention: mask %s: its heads (dim -3, %d) must be q's (%d) or 1",
         shape_text(dims(mask)), mh, H)
  end
  mask = ulysses_mask(mask, H, P, r)
  local ql, kl, vl = all_to_all(q, -3, -2), all_to_all(k, -3, -2), all_to_all(v, -3, -2)
  local o = qkv.attention(ql, kl, vl, {mask = mask, causal = causal, scale = scale,
                                       weights = false})
  return all_to_all(o, -2, -3)
end

return M
