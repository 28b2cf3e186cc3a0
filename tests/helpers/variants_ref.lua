-- variants_ref.lua: the float64 references the variants suites
-- (tests/stdlib/test_variants*.lua) hold qkv.attention's score_mod,
-- mask_mod and block_mask against. Nothing here goes through
-- qkv.variants: the masks and biases are n_q x n_k tensors built from
-- plain tensor ops (arange, comparisons, index_select), then scores by
-- matmul, masked_fill, softmax, matmul; rows with no key give 0.
--
--   local V = dofile("tests/helpers/variants_ref.lua")
local lu = require "luaunit"
local t = qkv.test

local V = {}
local inf = math.huge

-- the batch dims q, k, v broadcast to (each (..., n, d))
function V.batch(...)
  local out = {}
  for _, x in ipairs{...} do
    local nb = x:dim() - 2
    local shift = #out - nb
    for _ = 1, -shift do table.insert(out, 1, 1) end
    shift = math.max(shift, 0)
    for d = 1, nb do
      local a, b = out[d + shift], x:size(d)
      out[d + shift] = a == 1 and b or a
    end
  end
  return out
end

--[[
The positions of every score of an attention whose output has the batch
dims `batch`, as float64 tensors that broadcast to (batch..., n_q, n_k):
i (n_q, 1) and j (1, n_k) from 1; h the index in the last batch dim and b
the index over the dims before it, flattened row-major, both from 1 (1
with no such dims), shaped (batch..., 1, 1). Here b is counted by an arange
over those dims' product, not as the variants' replay computes it.
]]
function V.pos(batch, nq, nk, dev)
  dev = dev or "cpu"
  local P = {}
  P.i = qkv.arange(1, nq + 1, "float64", dev):reshape(nq, 1)
  P.j = qkv.arange(1, nk + 1, "float64", dev):reshape(1, nk)
  local nb = #batch
  P.b = qkv.ones({1, 1}, "float64", dev)
  P.h = P.b
  if nb >= 1 then
    P.h = qkv.arange(1, batch[nb] + 1, "float64", dev):reshape(batch[nb], 1, 1)
  end
  if nb >= 2 then
    local shape, count = {}, 1
    for d = 1, nb - 1 do shape[d] = batch[d]; count = count * batch[d] end
    shape[nb], shape[nb + 1], shape[nb + 2] = 1, 1, 1
    P.b = qkv.arange(1, count + 1, "float64", dev):reshape(table.unpack(shape))
  end
  return P
end

-- x[idx] for a 1-D float64 index tensor-like idx of any shape (1-based,
-- integer valued): index_select on x flattened, reshaped as idx
function V.take(x, idx)
  local flat = idx:long():reshape(idx:numel())
  return x:reshape(x:numel()):index_select(1, flat):reshape(table.unpack(idx.shape))
end

--[[
The reference attention in float64: out and W, shaped (batch..., n_q, d_v)
and (batch..., n_q, n_k). o.keep: a bool tensor broadcasting to the
scores (true: the key takes part), nil for all; o.score(S, P): the new
scores from the scaled scores S and the positions P (V.pos), with tensor
ops; o.scale: as attention's (1/sqrt(d) by default). A score of -inf
counts as masked; a row with no key left gives zeros.
]]
function V.ref(q, k, v, o)
  o = o or {}
  q, k, v = q:double(), k:double(), v:double()
  local scale = o.scale or 1 / math.sqrt(q:size(-1))
  local S = q:matmul(k:transpose(-1, -2)) * scale
  local batch = V.batch(q, k, v)
  local full = {}
  for d, n in ipairs(batch) do full[d] = n end
  full[#full + 1], full[#full + 2] = q:size(-2), k:size(-2)
  S = S + qkv.zeros(full, "float64", S.device)
  local P = V.pos(batch, q:size(-2), k:size(-2), S.device)
  local S2 = o.score and o.score(S, P) or S
  S2 = S2 + qkv.zeros(full, "float64", S.device)
  local live = S2:ne(-inf)
  if o.keep then live = live:logical_and(o.keep) end
  local dead = live:logical_not()
  local none = live:any(-1, true):logical_not()
  local W = S2:masked_fill(dead, -inf):masked_fill(none, 0):softmax(-1):masked_fill(dead, 0)
  return W:matmul(v), W
end

-- the largest |a - b| (both as float64 on the host)
function V.maxdiff(a, b)
  if a:numel() == 0 then return 0 end
  return (a:cpu():double() - b:cpu():double()):abs():max():item()
end

-- got must be want within tol (absolute, the values being O(1)), of
-- want's shape, and got of dtype (when given)
function V.near(got, want, tol, what, dtype)
  lu.assertTrue(qkv.is_tensor(got), what .. ": not a tensor")
  if dtype then lu.assertEquals(got.dtype, dtype, what .. ": dtype") end
  lu.assertEquals(got.shape, want.shape, what .. ": shape")
  local d = V.maxdiff(got, want)
  lu.assertTrue(d <= tol, ("%s: max |got - want| = %.3g > %.3g"):format(what, d, tol))
end

V.TOL = {float64 = 1e-12, float32 = 1e-5, float16 = 2e-3, bfloat16 = 1.6e-2}
-- the weights path of the half types rounds the scores and the softmax to them
V.WTOL = {float64 = 1e-12, float32 = 1e-5, float16 = 4e-3, bfloat16 = 3e-2}

local function with(opts, key, val)
  local r = {}
  for kk, x in pairs(opts) do r[kk] = x end
  r[key] = val
  return r
end
V.with = with

--[[
qkv.attention(q, k, v, opts) on both paths against V.ref(q, k, v, ro):
weights = false gives out alone (the fused kernel), weights = true out
and W; each checked within the tolerance of q's dtype, or tol (a number
for both paths, or {fused, weights}). Returns the reference's out and W.
]]
function V.check(q, k, v, opts, ro, what, tol)
  local dt = q.dtype
  local tf, tw = V.TOL[dt], V.WTOL[dt]
  if type(tol) == "number" then tf, tw = tol, tol
  elseif type(tol) == "table" then tf, tw = tol[1], tol[2] end
  local want, W = V.ref(q, k, v, ro)
  local n = select("#", qkv.attention(q, k, v, with(opts, "weights", false)))
  lu.assertEquals(n, 1, what .. ": weights = false returns out alone")
  local out = qkv.attention(q, k, v, with(opts, "weights", false))
  V.near(out, want, tf, what .. " (fused) out", dt)
  local out2, W2 = qkv.attention(q, k, v, with(opts, "weights", true))
  V.near(out2, want, tw, what .. " (weights) out", dt)
  V.near(W2, W, tw, what .. " (weights) W", dt)
  return want, W
end

-- random q (batch_q..., nq, d), k and v (batch_kv..., nk, d|dv)
function V.qkv(bq, bk, nq, nk, d, dv, dtype)
  local function shape(b, n, dd)
    local s = {}
    for x, m in ipairs(b) do s[x] = m end
    s[#s + 1], s[#s + 2] = n, dd
    return s
  end
  dtype = dtype or "float64"
  local q = qkv.randn(shape(bq, nq, d), "float64"):to(dtype)
  local k = qkv.randn(shape(bk, nk, d), "float64"):to(dtype)
  local v = qkv.randn(shape(bk, nk, dv), "float64"):to(dtype)
  return q, k, v
end

--[[
The kinds a block mask must hold, by brute force from keep, a bool tensor
(B', H', n_q, n_k): per block of bq queries and bk keys (the last ones
shorter), 0 when no pair is kept, 2 when all are, 1 otherwise; as a
nested Lua list (B', H', nqb, nkb).
]]
function V.kinds(keep, bq, bk)
  local K = keep:tolist()
  local B, H, nq, nk = keep:size(1), keep:size(2), keep:size(3), keep:size(4)
  local r = {}
  for b = 1, B do
    r[b] = {}
    for h = 1, H do
      local rows = {}
      for qb = 1, (nq + bq - 1) // bq do
        local row = {}
        for kb = 1, (nk + bk - 1) // bk do
          local yes, no = 0, 0
          for i = (qb - 1) * bq + 1, math.min(qb * bq, nq) do
            for j = (kb - 1) * bk + 1, math.min(kb * bk, nk) do
              if K[b][h][i][j] then yes = yes + 1 else no = no + 1 end
            end
          end
          row[kb] = yes == 0 and 0 or no == 0 and 2 or 1
        end
        rows[qb] = row
      end
      r[b][h] = rows
    end
  end
  return r
end

--[[
The spans a block mask must hold, by brute force from keep (B', H', n_q,
n_k): per query the keys it keeps as one run {lo, hi}, 0-based, hi past
the last ({0, 0} for none), as a nested Lua list (B', H', n_q, 2); nil
when some query's kept keys are not one run.
]]
function V.spans(keep)
  local K = keep:tolist()
  local r = {}
  for b, kb in ipairs(K) do
    r[b] = {}
    for h, kh in ipairs(kb) do
      local rows = {}
      for i, ki in ipairs(kh) do
        local lo, hi, n = nil, 0, 0
        for j, x in ipairs(ki) do
          if x then lo, hi, n = lo or j - 1, j, n + 1 end
        end
        if n > 0 and n ~= hi - lo then return nil end
        rows[i] = {lo or 0, hi}
      end
      r[b][h] = rows
    end
  end
  return r
end

-- fails unless f() raises an error whose message holds every string of words
function V.raises(f, words, what)
  local ok, err = pcall(f)
  lu.assertFalse(ok, what .. ": no error")
  err = tostring(err)
  for _, w in ipairs(words) do
    lu.assertStrContains(err, w, false, what .. ": message")
  end
  return err
end

V.t = t
return V
