-- dist_ring.lua: the ring of qkv.dist.ring_attention (dist_attention.lua
-- checks the call and records the node; this file moves and computes).
--
--   forward(c) -> this rank's block of the output; keeps in c what the
--     backward needs
--   backward(c, g) -> dq, dk, dv, this rank's blocks
--   c: P, r, mpi, q, k, v (this rank's contiguous CPU blocks), mask (its
--     rows, keys global, or nil), causal, scale, bq, bk (block lengths),
--     nq, nk (global), out_shape (the block's output shape)
--
-- Each rank computes on the blocks it was given, k/v going round the
-- ring; under causal the key blocks wholly in a rank's future are
-- skipped, so rank P-1 computes P blocks and rank 0 one.

local qkv = require "qkv"

local M = {}

-- tags above those of qkv.dist's send/recv (2 tag + 1 <= 2^21 + 1)
local TAG_K, TAG_V, TAG_DK, TAG_DV = 3 << 20, (3 << 20) + 1, (3 << 20) + 2, (3 << 20) + 3

local function dims(t)
  local s = {}
  for i = 1, t.ndim do s[i] = t.shape[i] end
  return s
end

local function batch(s, keep)
  local b = {}
  for i = 1, #s - keep do b[i] = s[i] end
  return b
end

local function sum_to(g, shape)
  for _ = 1, g.ndim - #shape do g = g:sum(1) end
  for i = 1, #shape do
    if shape[i] == 1 and g.shape[i] ~= 1 then g = g:sum(i, true) end
  end
  return g
end

-- (acc, lse) and a block's (o, l) combined: the softmax over both key sets
local function combine(acc, lse, o, l)
  if acc == nil then return o, l end
  local mx = qkv.maximum(lse, l)
  mx = qkv.where(mx:eq(-math.huge), 0, mx)       -- rows with no key yet: no NaN
  local ea, eb = (lse - mx):exp(), (l - mx):exp()
  local sum = ea + eb
  local new = mx + sum:log()                     -- -inf where neither has a key
  local safe = qkv.where(sum:eq(0), 1, sum)
  return acc * (ea / safe):unsqueeze(-1) + o * (eb / safe):unsqueeze(-1), new
end

-- the block passed on round the ring: sends x to rank + 1, receives the
-- previous rank's into a new tensor; returns its requests and the tensor
local function pass(mpi, x, tag, P, r)
  local y = qkv.empty_like(x)
  return {mpi.isend(x, (r + 1) % P, tag), mpi.irecv(y, (r - 1) % P, tag)}, y
end

local function wait(reqs)
  for _, q in ipairs(reqs or {}) do q:wait() end
end

-- k and v passed on together: their requests and the received pair
local function pass_kv(c, kc, vc, tk, tv)
  local a, k2 = pass(c.mpi, kc, tk, c.P, c.r)
  local b, v2 = pass(c.mpi, vc, tv, c.P, c.r)
  return {a[1], a[2], b[1], b[2]}, k2, v2
end

---------------------------------------------------------------- blocks

-- what key block s (0-based) is to query block r: nil when it is wholly in
-- the future (causal), else the mask (nil for none) and the kernel's causal
-- flag. Query i (global) sees key j when j <= i + nk - nq: in the blocks,
-- local key jj for local query ii when jj <= ii + off
local function block_mask(m, causal, r, s, bq, bk, nq, nk)
  if m ~= nil and m.ndim >= 1 and m.shape[m.ndim] ~= 1 then
    m = m:narrow(-1, s * bk + 1, bk):contiguous()
  end
  if not causal then return true, m, false end
  local off = r * bq - s * bk + nk - nq
  if bq - 1 + off < 0 then return nil end                     -- no query sees a key
  if off >= bk - 1 then return true, m, false end             -- every query sees every key
  if off == bk - bq then return true, m, true end             -- the kernel's own causal
  local c = qkv.ones({bq, bk}, "bool"):tril(off)
  return true, m and qkv.logical_and(m, c) or c, false
end

local function blocks_forward(c)
  local P, r = c.P, c.r
  local kc, vc = c.k, c.v
  local acc, lse
  for t = 0, P - 1 do
    local s = (r - t) % P
    local reqs, nk_, nv_ = {}, nil, nil
    if t < P - 1 then reqs, nk_, nv_ = pass_kv(c, kc, vc, TAG_K, TAG_V) end
    local live, m, causal = block_mask(c.mask, c.causal, r, s, c.bq, c.bk, c.nq, c.nk)
    if live then
      local o, l = qkv._attention_lse(c.q, kc, vc, m, causal, c.scale)
      acc, lse = combine(acc, lse, o, l)
    end
    wait(reqs)
    if t < P - 1 then kc, vc = nk_, nv_ end
  end
  if acc == nil then                             -- no key for any query here
    acc = qkv.zeros(c.out_shape, c.q.dtype)
    lse = qkv.full(batch(c.out_shape, 1), -math.huge, c.q.dtype)
  end
  return acc, lse
end

-- dq of this rank's queries, dk and dv of its own key block: k, v and
-- their gradients so far go round the ring; after P steps each is home
local function blocks_backward(c, out, lse, g)
  local P, r = c.P, c.r
  local kc, vc = c.k, c.v
  local dk, dv = qkv.zeros(dims(c.k), c.k.dtype), qkv.zeros(dims(c.v), c.v.dtype)
  local dq
  for t = 0, P - 1 do
    local s = (r - t) % P
    local reqs, nk_, nv_ = {}, nil, nil
    if t < P - 1 then reqs, nk_, nv_ = pass_kv(c, kc, vc, TAG_K, TAG_V) end
    local live, m, causal = block_mask(c.mask, c.causal, r, s, c.bq, c.bk, c.nq, c.nk)
    if live then
      local gq, gk, gv = qkv._attention_backward(c.q, kc, vc, out, g, m, causal, c.scale, lse)
      dq = dq and dq + gq or gq
      dk = dk + sum_to(gk, dims(c.k))
      dv = dv + sum_to(gv, dims(c.v))
    end
    if P > 1 then                                -- the gradients follow their block
      local grads, ndk, ndv = pass_kv(c, dk, dv, TAG_DK, TAG_DV)
      wait(reqs)
      wait(grads)
      dk, dv = ndk, ndv
      if t < P - 1 then kc, vc = nk_, nv_ end
    end
  end
  dq = dq and sum_to(dq, dims(c.q)) or qkv.zeros(dims(c.q), c.q.dtype)
  return dq, dk, dv
end

---------------------------------------------------------------- entry

function M.forward(c)
  c.out, c.lse = blocks_forward(c)
  return c.out
end

function M.backward(c, g)
  return blocks_backward(c, c.out, c.lse, g)
end

return M
