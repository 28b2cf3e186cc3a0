-- dist/ring.lua: the ring of qkv.dist.ring_attention (dist/attention.lua
-- checks the call and records the node; this file moves and computes).
--
--   forward(c) -> this rank's block of the output; keeps in c what the
--     backward needs
--   backward(c, g) -> dq, dk, dv, this rank's blocks
--   c: P, r, mpi, q, k, v (this rank's contiguous CPU blocks), mask (its
--     rows, keys global, or nil), causal, scale, bq, bk (block lengths),
--     nq, nk (global), out_shape (the block's output shape), keep (a
--     backward is to come)
--
-- Two layouts. Blocks: each rank computes on the blocks it was given, k/v
-- going round the ring; under causal the key blocks wholly in a rank's
-- future are skipped, so rank P-1 computes P blocks and rank 0 one.
-- Zigzag (causal, P > 1, both block lengths even): the sequences are cut
-- into 2P chunks and rank r computes on chunks r and 2P-1-r, of q and of
-- the k/v it starts the ring with (as in Striped/zigzag ring attention,
-- zhuzilin's ring-flash-attention): each step's 2 x 2 chunk pairs are
-- full, skipped or diagonal by their global positions, and every rank
-- computes about the same. The halves move there point to point before
-- the ring, the mask's rows with q's, and the output (the gradients, in
-- the backward) move back, so the caller sees contiguous blocks.
--
-- M.stats: the last forward's count, per rank: layout ("blocks" or
-- "zigzag"), calls (kernel calls), pairs (blocks, or chunk pairs, that
-- were computed), work (the (query, key) scores those needed: a full
-- pair counts its size, a diagonal one what causal leaves of it); the
-- backward adds back_calls, back_pairs, back_work. M.zigzag = false turns
-- the zigzag off (tests compare the two).

local qkv = require "qkv"

local M = {zigzag = true}

-- tags above those of qkv.dist's send/recv (2 tag + 1 <= 2^21 + 1)
local TAG_K, TAG_V, TAG_DK, TAG_DV = 3 << 20, (3 << 20) + 1, (3 << 20) + 2, (3 << 20) + 3
-- the moves between layouts: two tags each (the slot a half goes to)
local TAG_MOVE = (3 << 20) + 8
local MQ, MK, MV, MMASK, MOUT, MG, MDQ, MDK, MDV = 0, 2, 4, 6, 8, 10, 12, 14, 16

-- t's sizes as a list
function M.dims(t)
  local s = {}
  for i = 1, t.ndim do s[i] = t.shape[i] end
  return s
end
local dims = M.dims

function M.batch(s, keep)
  local b = {}
  for i = 1, #s - keep do b[i] = s[i] end
  return b
end

-- s with its element at -2 (or -1) set to n
local function with(s, n, at)
  local t = {}
  for i = 1, #s do t[i] = s[i] end
  t[#t + 1 + (at or -2)] = n
  return t
end

-- g summed down to a shape (a list of sizes), as autograd's rules do
local sum_to = require("qkv.derivatives").sum_to

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

-- the (query, key) scores a rows x cols block needs when local key jj is
-- seen by local query ii for jj <= ii + off
local function visible(rows, cols, off)
  local n = 0
  for i = 0, rows - 1 do n = n + math.max(0, math.min(cols, i + off + 1)) end
  return n
end

local function new_stats(layout)
  return {layout = layout, calls = 0, pairs = 0, work = 0, back_calls = 0, back_pairs = 0,
          back_work = 0}
end

local function count(st, back, calls, pairs, work)
  local p = back and "back_" or ""
  st[p .. "calls"] = st[p .. "calls"] + calls
  st[p .. "pairs"] = st[p .. "pairs"] + pairs
  st[p .. "work"] = st[p .. "work"] + work
end

---------------------------------------------------------------- blocks

-- what key block s (0-based) is to query block r: nil when it is wholly in
-- the future (causal), else the mask (nil for none), the kernel's causal
-- flag and the scores needed. Query i (global) sees key j when j <= i +
-- nk - nq: in the blocks, local key jj for local query ii when jj <= ii +
-- off
local function block_mask(m, causal, r, s, bq, bk, nq, nk)
  if m ~= nil and m.ndim >= 1 and m.shape[m.ndim] ~= 1 then
    m = m:narrow(-1, s * bk + 1, bk):contiguous()
  end
  if not causal then return true, m, false, bq * bk end
  local off = r * bq - s * bk + nk - nq
  if bq - 1 + off < 0 then return nil end                     -- no query sees a key
  local work = visible(bq, bk, off)
  if off >= bk - 1 then return true, m, false, work end       -- every query sees every key
  if off == bk - bq then return true, m, true, work end       -- the kernel's own causal
  local c = qkv.ones({bq, bk}, "bool"):tril(off)
  return true, m and qkv.logical_and(m, c) or c, false, work
end

local function blocks_forward(c)
  local P, r = c.P, c.r
  local kc, vc = c.k, c.v
  local acc, lse
  for t = 0, P - 1 do
    local s = (r - t) % P
    local reqs, nk_, nv_ = {}, nil, nil
    if t < P - 1 then reqs, nk_, nv_ = pass_kv(c, kc, vc, TAG_K, TAG_V) end
    local live, m, causal, work = block_mask(c.mask, c.causal, r, s, c.bq, c.bk, c.nq, c.nk)
    if live then
      local o, l = qkv._attention_lse(c.q, kc, vc, m, causal, c.scale)
      acc, lse = combine(acc, lse, o, l)
      count(c.stats, false, 1, 1, work)
    end
    wait(reqs)
    if t < P - 1 then kc, vc = nk_, nv_ end
  end
  if acc == nil then                             -- no key for any query here
    acc = qkv.zeros(c.out_shape, c.q.dtype)
    lse = qkv.full(M.batch(c.out_shape, 1), -math.huge, c.q.dtype)
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
    local live, m, causal, work = block_mask(c.mask, c.causal, r, s, c.bq, c.bk, c.nq, c.nk)
    if live then
      local gq, gk, gv = qkv._attention_backward(c.q, kc, vc, out, g, m, causal, c.scale, lse)
      dq = dq and dq + gq or gq
      dk = dk + sum_to(gk, dims(c.k))
      dv = dv + sum_to(gv, dims(c.v))
      count(c.stats, true, 1, 1, work)
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

---------------------------------------------------------------- zigzag

-- a tensor made here and no longer needed: its memory goes back now
local function close(t)
  if t ~= nil then getmetatable(t).__close(t) end
end

-- x's halves along dim -2, contiguous (new tensors or views, never x)
local function cut(x, n, at)
  at = at or -2
  n = n or x.shape[x.ndim + 1 + at] // 2
  return {x:narrow(at, 1, n):contiguous(), x:narrow(at, n + 1, n):contiguous()}
end

-- halves h = {first, second} along dim -2 (contiguous) moved between the
-- layouts: to the zigzag (rank r's halves are chunks 2r and 2r+1 of 2P;
-- it ends with chunks r and 2P-1-r) or, with back, the other way. Starts
-- the messages and returns a function that waits for them and gives the
-- moved halves. h is the move's: the halves sent are closed once sent,
-- the one that stays is handed on
local function move(c, h, tag, back)
  local P, r = c.P, c.r
  local function zig(i) return i == 1 and r or 2 * P - 1 - r end    -- chunk in zigzag slot i
  local function zig_owner(j)                                          -- rank and slot of chunk j
    if j < P then return j, 1 end
    return 2 * P - 1 - j, 2
  end
  tag = TAG_MOVE + tag
  local got, reqs, sent = {}, {}, {}
  for i = 1, 2 do                                -- where my halves go
    local j = back and zig(i) or 2 * r + i - 1
    local dst, slot
    if back then dst, slot = j // 2, j % 2 + 1 else dst, slot = zig_owner(j) end
    if dst == r then
      got[slot] = h[i]
    else
      reqs[#reqs + 1] = c.mpi.isend(h[i], dst, tag + slot)
      sent[#sent + 1] = h[i]
    end
  end
  for i = 1, 2 do                                -- where the halves I get come from
    if not got[i] then
      local j = back and 2 * r + i - 1 or zig(i)
      local src = back and (zig_owner(j)) or j // 2
      got[i] = qkv.empty_like(h[1])
      reqs[#reqs + 1] = c.mpi.irecv(got[i], src, tag + i)
    end
  end
  return function()
    wait(reqs)
    for _, x in ipairs(sent) do close(x) end
    return got
  end
end

-- moved halves put together, the halves' own memory let go
local function joined(h)
  local x = qkv.cat({h[1], h[2]}, -2)
  close(h[1])
  close(h[2])
  return x
end

-- a chunk of rows x cols against one of keys: "skip" (no query sees a
-- key), "full" (every query every key) or the diagonal's offset (local
-- key jj for local query ii when jj <= ii + off)
local function pattern(rows, cols, off)
  if rows - 1 + off < 0 then return "skip" end
  if off >= cols - 1 then return "full" end
  return off
end

-- the ways to cover a step's 2 x 2 chunk pairs (query half, key half) by
-- kernel calls, fewest calls first: each call is {query halves, key halves}
local GROUPINGS = {
  {{{1, 2}, {1, 2}}},
  {{{1, 2}, {1}}, {{1, 2}, {2}}},
  {{{1}, {1, 2}}, {{2}, {1, 2}}},
  {{{1}, {1}}, {{1}, {2}}, {{2}, {1}}, {{2}, {2}}},
}

-- the kernel calls of step s (the k/v chunks s and 2P-1-s for the queries
-- of chunks r and 2P-1-r): the first grouping whose every call is full or
-- the kernel's own causal (on the call's rows and keys) for each of its
-- pairs, else one call a pair, a diagonal one with its tril as a mask.
-- Each call: {A = query halves, B = key halves, causal = the kernel's flag,
-- tril = the offset of a mask to build, pairs = its pairs, work = scores}
local function plan(c, s)
  local P, cq, ck = c.P, c.bq // 2, c.bk // 2
  local qc, kc = {c.r, 2 * P - 1 - c.r}, {s, 2 * P - 1 - s}
  local off, pat = {}, {}
  for a = 1, 2 do
    off[a], pat[a] = {}, {}
    for b = 1, 2 do
      off[a][b] = qc[a] * cq - kc[b] * ck + c.nk - c.nq       -- global positions
      pat[a][b] = pattern(cq, ck, off[a][b])
    end
  end
  for gi, grouping in ipairs(GROUPINGS) do
    local calls, good = {}, true
    for _, g in ipairs(grouping) do
      local A, B = g[1], g[2]
      local rows, cols = #A * cq, #B * ck
      local pairs, work, full, diag = 0, 0, true, true
      for ia, a in ipairs(A) do
        for ib, b in ipairs(B) do
          local p = pat[a][b]
          if p ~= "skip" then pairs, work = pairs + 1, work + visible(cq, ck, off[a][b]) end
          full = full and p == "full"
          diag = diag and p == pattern(cq, ck, (ia - 1) * cq - (ib - 1) * ck + cols - rows)
        end
      end
      if pairs > 0 then
        local call = {A = A, B = B, causal = not full, pairs = pairs, work = work}
        if not (full or diag) then
          if gi < #GROUPINGS then good = false; break end
          call.causal, call.tril = false, pat[A[1]][B[1]]
        end
        calls[#calls + 1] = call
      end
    end
    if good then return calls, kc end
  end
end

-- the user's mask for a call's query halves and key chunks, with the
-- call's tril
local function call_mask(c, call, kc)
  local cq, ck, m = c.bq // 2, c.bk // 2, c.zmask
  if m ~= nil then
    local n = m.ndim
    if #call.A == 1 and n >= 2 and m.shape[n - 1] ~= 1 then
      m = m:narrow(-2, (call.A[1] - 1) * cq + 1, cq)
    end
    if n >= 1 and m.shape[n] ~= 1 then
      local parts = {}
      for i, b in ipairs(call.B) do parts[i] = m:narrow(-1, kc[b] * ck + 1, ck) end
      m = #parts == 1 and parts[1] or qkv.cat(parts, -1)
    end
    m = m:contiguous()
  end
  if call.tril then
    local t = qkv.ones({cq, ck}, "bool"):tril(call.tril)
    m = m and qkv.logical_and(m, t) or t
  end
  return m
end

-- x's rows (dim -2, or -1 for lse) for a call's query halves, from x
-- whole and its halves
local function rows_of(call, whole, halves)
  return #call.A == 2 and whole or halves[call.A[1]]
end

-- x's halves along dim -2 (or `at`) as views (the kernels take strides)
local function views(x, n, at)
  at = at or -2
  return {x:narrow(at, 1, n), x:narrow(at, n + 1, n)}
end

-- the k and v of a call's key halves
local function keys_of(call, kc, vc, ck)
  if #call.B == 2 then return kc, vc end
  local b = call.B[1]
  return kc:narrow(-2, (b - 1) * ck + 1, ck), vc:narrow(-2, (b - 1) * ck + 1, ck)
end

-- the received k/v a step has done with
local function done_with(c, kc, vc)
  if kc ~= c.zk then close(kc); close(vc) end
end

-- the forward on the zigzag layout: c.zq (and its halves c.qh), c.zk,
-- c.zv, c.zmask; the output and the lse there
local function zig_forward(c)
  local P, r, cq, ck = c.P, c.r, c.bq // 2, c.bk // 2
  local acc, lse = {}, {}
  local kc, vc = c.zk, c.zv
  for t = 0, P - 1 do
    local s = (r - t) % P
    local reqs, nk_, nv_ = {}, nil, nil
    if t < P - 1 then reqs, nk_, nv_ = pass_kv(c, kc, vc, TAG_K, TAG_V) end
    local calls, kcs = plan(c, s)
    for _, call in ipairs(calls) do
      local kk, vv = keys_of(call, kc, vc, ck)
      local o, l = qkv._attention_lse(rows_of(call, c.zq, c.qh), kk, vv, call_mask(c, call, kcs),
                                      call.causal, c.scale)
      for i, a in ipairs(call.A) do
        local oa, la = o, l
        if #call.A == 2 then
          oa, la = o:narrow(-2, (i - 1) * cq + 1, cq), l:narrow(-1, (i - 1) * cq + 1, cq)
        end
        acc[a], lse[a] = combine(acc[a], lse[a], oa, la)
      end
      count(c.stats, false, 1, call.pairs, call.work)
    end
    wait(reqs)
    done_with(c, kc, vc)
    if t < P - 1 then kc, vc = nk_, nv_ end
  end
  for a = 1, 2 do                                -- a half that no key reached
    if acc[a] == nil then
      acc[a] = qkv.zeros(with(c.out_shape, cq), c.q.dtype)
      lse[a] = qkv.full(with(M.batch(c.out_shape, 1), cq, -1), -math.huge, c.q.dtype)
    end
  end
  local out, l = qkv.cat(acc, -2), qkv.cat(lse, -1)
  for a = 1, 2 do close(acc[a]); close(lse[a]) end
  return out, l
end

-- the backward on the zigzag layout: out, lse and g there; the halves of
-- dq of its query chunks, and dk and dv of its k/v chunks, which go round
-- the ring with them
local function zig_backward(c, out, lse, g)
  local P, r, cq, ck = c.P, c.r, c.bq // 2, c.bk // 2
  local oh, gh, lh = views(out, cq), views(g, cq), cut(lse, cq, -1)
  local kd, vd = dims(c.zk), dims(c.zv)
  local khd, vhd = with(kd, ck), with(vd, ck)
  local kc, vc = c.zk, c.zv
  local dk, dv = qkv.zeros(kd, c.k.dtype), qkv.zeros(vd, c.v.dtype)
  local dq = {}
  for t = 0, P - 1 do
    local s = (r - t) % P
    local reqs, nk_, nv_ = {}, nil, nil
    if t < P - 1 then reqs, nk_, nv_ = pass_kv(c, kc, vc, TAG_K, TAG_V) end
    local calls, kcs = plan(c, s)
    for _, call in ipairs(calls) do
      local kk, vv = keys_of(call, kc, vc, ck)
      local gq, gk, gv = qkv._attention_backward(rows_of(call, c.zq, c.qh), kk, vv,
        rows_of(call, out, oh), rows_of(call, g, gh), call_mask(c, call, kcs), call.causal,
        c.scale, rows_of(call, lse, lh))
      for i, a in ipairs(call.A) do
        local x = #call.A == 2 and gq:narrow(-2, (i - 1) * cq + 1, cq) or gq
        dq[a] = dq[a] and dq[a] + x or x
      end
      if #call.B == 2 then
        dk:add_(sum_to(gk, kd))
        dv:add_(sum_to(gv, vd))
      else
        local b = call.B[1]
        dk:narrow(-2, (b - 1) * ck + 1, ck):add_(sum_to(gk, khd))
        dv:narrow(-2, (b - 1) * ck + 1, ck):add_(sum_to(gv, vhd))
      end
      count(c.stats, true, 1, call.pairs, call.work)
    end
    local grads, ndk, ndv = pass_kv(c, dk, dv, TAG_DK, TAG_DV)   -- they follow their chunks
    wait(reqs)
    wait(grads)
    done_with(c, kc, vc)
    close(dk)
    close(dv)
    dk, dv = ndk, ndv
    if t < P - 1 then kc, vc = nk_, nv_ end
  end
  local qhd = with(dims(c.zq), cq)
  for a = 1, 2 do
    dq[a] = dq[a] and sum_to(dq[a], qhd):contiguous() or qkv.zeros(qhd, c.q.dtype)
  end
  close(lh[1])
  close(lh[2])
  return dq, dk, dv
end

---------------------------------------------------------------- entry

function M.forward(c)
  local zig = M.zigzag and c.causal and c.P > 1 and c.bq % 2 == 0 and c.bk % 2 == 0
  c.zigzag = zig
  c.stats = new_stats(zig and "zigzag" or "blocks")
  M.stats = c.stats
  if not zig then
    c.out, c.lse = blocks_forward(c)
    return c.out
  end
  local m = c.mask
  local rows = m ~= nil and m.ndim >= 2 and m.shape[m.ndim - 1] ~= 1
  -- one at a time, so that a single tensor's halves are in flight
  c.zq = joined(move(c, cut(c.q), MQ, false)())
  c.zk = joined(move(c, cut(c.k), MK, false)())
  c.zv = joined(move(c, cut(c.v), MV, false)())
  c.zmask = rows and joined(move(c, cut(m), MMASK, false)()) or m
  c.qh = views(c.zq, c.bq // 2)                  -- q whole and in halves, for the calls
  c.zout, c.zlse = zig_forward(c)
  local out = joined(move(c, cut(c.zout), MOUT, true)())
  if not c.keep then                             -- no backward to come
    for _, x in ipairs({c.zq, c.zk, c.zv, c.zout, c.zlse, rows and c.zmask}) do
      if x then close(x) end
    end
  end
  return out
end

function M.backward(c, g)
  if not c.zigzag then return blocks_backward(c, c.out, c.lse, g) end
  local zg = joined(move(c, cut(g), MG, false)())
  local dq, dk, dv = zig_backward(c, c.zout, c.zlse, zg)
  close(zg)
  local function back(x, tag)
    local h = cut(x)
    close(x)
    return joined(move(c, h, tag, true)())
  end
  return joined(move(c, dq, MDQ, true)()), back(dk, MDK), back(dv, MDV)
end

return M
