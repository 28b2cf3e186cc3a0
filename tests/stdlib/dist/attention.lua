-- attention.lua: run by test_dist_attention.lua on 2 and 4 ranks (mpirun),
-- and alone (a world of one). Every rank builds the same global q, k, v
-- (a fixed seed), takes its block of the sequence, and checks
-- dist.ring_attention and dist.ulysses_attention against its block of
-- qkv.attention on the whole tensors, output and gradients (of
-- (out * G):sum() for a fixed G), and the ring's layout (blocks or zigzag)
-- and how even its work is over the ranks. Each check prints "ok <name>"
-- once it holds; a failed one raises, which ends the whole job.
-- a line at a time: mpirun passes on each rank's output as it reads it,
-- and a block cut mid-line would splice another rank's lines into it
io.stdout:setvbuf("line")
local d = qkv.dist
local Ring = require "qkv.dist.ring"
local R, W = d.rank(), d.world_size()

local function fail(name, msg) error(("%s on rank %d: %s"):format(name, R, msg), 2) end

local function ok(cond, name, msg)
  if not cond then fail(name, msg or "failed") end
  print("ok " .. name)
end

-- got is want to within tol, elementwise (a NaN anywhere fails)
local function close(got, want, tol, name)
  if tostring(got.shape) ~= tostring(want.shape) then
    fail(name, ("shape %s, want %s"):format(tostring(got.shape), tostring(want.shape)))
  end
  if got.dtype ~= want.dtype then fail(name, ("dtype %s, want %s"):format(got.dtype, want.dtype)) end
  local e = (got:double() - want:double()):abs():max():item()
  if not (e <= tol) then fail(name, ("max abs diff %g > %g"):format(e, tol)) end
  print("ok " .. name)
end

-- this rank's block of rows (dim -2) of x; x itself where that dim is 1
local function block(x)
  if x == nil or x.ndim < 2 or x:size(-2) == 1 then return x end
  local n = x:size(-2) // W
  return x:narrow(-2, R * n + 1, n):contiguous()
end

local function shape(batch, n, last)
  local s = {}
  for i, b in ipairs(batch) do s[i] = b end
  s[#s + 1], s[#s + 2] = n, last
  return s
end

-- every rank's value of x, as a list (rank 0 first)
local function gather(x)
  return d.all_gather(qkv.tensor({x}, "float64")):reshape(-1):tolist()
end

-- the ring's layout (on more than one rank) and the spread of its work
-- over the ranks: each rank's (query, key) scores computed, forward and
-- backward (stdlib/qkv/dist/ring.lua's stats). The forward's and the
-- backward's are the same, all ranks' add up to the scores causal
-- leaves; balanced: within one chunk pair (bq/2 x bk/2 scores) of each
-- other, or not
local function ring_stats(c, name)
  local st = Ring.stats
  if W == 1 then return end
  if c.layout then
    ok(st.layout == c.layout, name .. " layout", ("%s, want %s"):format(st.layout, c.layout))
  end
  ok(st.back_work == st.work and st.back_pairs == st.pairs and st.back_calls == st.calls,
     name .. " backward work", ("forward %d scores in %d calls, backward %d in %d"):format(
       st.work, st.calls, st.back_work, st.back_calls))
  if c.calls then
    ok(st.calls == c.calls(W), name .. " calls", ("%d kernel calls, want %d"):format(st.calls,
       c.calls(W)))
  end
  local works, calls = gather(st.work), gather(st.calls)
  local lo, hi = math.huge, -math.huge
  for _, w in ipairs(works) do lo, hi = math.min(lo, w), math.max(hi, w) end
  -- together the ranks compute each score that causal leaves once
  local nq, nk, total, want = c.bq * W, c.bk * W, 0, 0
  for _, w in ipairs(works) do total = total + math.tointeger(w) end
  for i = 0, nq - 1 do
    want = want + (c.causal and math.max(0, math.min(nk, i + nk - nq + 1)) or nk)
  end
  ok(total == want, name .. " work total", ("%d scores, want %d"):format(total, want))
  local unit = (c.bq // 2) * (c.bk // 2)
  for i, w in ipairs(works) do works[i], calls[i] = ("%d"):format(w), ("%d"):format(calls[i]) end
  if R == 0 then
    print(("work %s (%s): per rank %s scores in %s calls; spread %d, chunk pair %d"):format(
          name, st.layout, table.concat(works, " "), table.concat(calls, " "), hi - lo, unit))
  end
  if c.balanced ~= nil then
    ok((hi - lo <= unit) == c.balanced, name .. (c.balanced and " balanced" or " unbalanced"),
       ("per rank %s, spread %d, chunk pair %d"):format(table.concat(works, " "), hi - lo, unit))
  end
  return hi - lo
end

-- c: {name, batch = {..} (q's), kbatch = {..} (k's and v's, else q's),
-- bq, bk (rows per rank), d, dv, dtype, causal, scale, mask = function(nq,
-- nk) -> the global mask or nil, ulysses = whether to run it too, zigzag
-- = false to turn the ring's zigzag off, layout = the ring's expected,
-- balanced = whether its work is to be, calls = function(P) -> the ring's
-- kernel calls on each rank}; returns the ring's work spread
local function case(c)
  local spread
  qkv.manual_seed(c.seed or 7)
  local dt = c.dtype or "float64"
  local nq, nk = c.bq * W, c.bk * W
  local kb = c.kbatch or c.batch
  local q = qkv.randn(shape(c.batch, nq, c.d), dt)
  local k = qkv.randn(shape(kb, nk, c.d), dt)
  local v = qkv.randn(shape(kb, nk, c.dv), dt)
  local mask = c.mask and c.mask(nq, nk)
  local o = {causal = c.causal, mask = mask, scale = c.scale, weights = false}
  -- the whole attention in one process, and its gradients
  local Q, K, V = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
  local full = qkv.attention(Q, K, V, o)
  local G = qkv.randn(full.shape, dt)
  ;(full * G):sum():backward()
  -- the reference is not all zeros (every query masked)
  ok(Q.grad:abs():max():item() > 0 and V.grad:abs():max():item() > 0, c.name .. " reference")
  local tol, gtol = dt == "float64" and 1e-12 or 1e-5, dt == "float64" and 1e-11 or 2e-5
  local fns = {ring = d.ring_attention}
  if c.ulysses then fns.ulysses = d.ulysses_attention end
  for _, which in ipairs({"ring", "ulysses"}) do
    local f = fns[which]
    if f then
      local name = which .. " " .. c.name
      local qb, kb_, vb = block(q):requires_grad_(), block(k):requires_grad_(), block(v):requires_grad_()
      local was = Ring.zigzag
      if c.zigzag == false then Ring.zigzag = false end
      local out = f(qb, kb_, vb, {causal = c.causal, mask = block(mask), scale = c.scale})
      close(out, block(full:detach()), tol, name .. " out")
      ;(out * block(G)):sum():backward()
      Ring.zigzag = was
      close(qb.grad, block(Q.grad), gtol, name .. " dq")
      close(kb_.grad, block(K.grad), gtol, name .. " dk")
      close(vb.grad, block(V.grad), gtol, name .. " dv")
      if which == "ring" then spread = ring_stats(c, name) end
    end
  end
  return spread
end

-- a bool mask with some rows (queries) fully masked, one in every rank's
-- block, and random holes elsewhere
local function holes(lead)
  return function(nq, nk)
    local m = qkv.rand(shape(lead, nq, nk), "float64"):gt(0.3)
    local b = nq // W
    for r = 0, W - 1 do m:narrow(-2, r * b + math.min(2, b), 1):fill_(false) end
    return m
  end
end

case{name = "plain", batch = {2, 4}, bq = 3, bk = 3, d = 5, dv = 6, ulysses = true}
case{name = "causal", batch = {2, 4}, bq = 3, bk = 3, d = 5, dv = 6, causal = true, ulysses = true,
     layout = "blocks"}
case{name = "mask", batch = {2, 4}, bq = 3, bk = 3, d = 5, dv = 4, mask = holes({2, 4}),
     ulysses = true}
case{name = "mask causal", batch = {2, 4}, bq = 4, bk = 4, d = 3, dv = 3, mask = holes({}),
     causal = true, ulysses = true, layout = "zigzag", balanced = true}
-- n_q = 2 n_k and n_k = 2 n_q: causal aligned to the last key, as attention's
case{name = "nq=2nk causal", batch = {4}, bq = 4, bk = 2, d = 4, dv = 5, causal = true,
     ulysses = true, layout = "zigzag"}
case{name = "nk=2nq causal", batch = {4}, bq = 2, bk = 4, d = 4, dv = 5, causal = true,
     ulysses = true, layout = "zigzag", balanced = true}
case{name = "nq=2nk", batch = {2, 4}, bq = 4, bk = 2, d = 4, dv = 4, ulysses = true}
case{name = "nk=3nq causal mask", batch = {2}, bq = 2, bk = 6, d = 4, dv = 2, causal = true,
     mask = holes({}), layout = "zigzag", balanced = true}
-- masks broadcast: the keys only, and the queries of one batch
case{name = "key mask", batch = {2, 4}, bq = 2, bk = 3, d = 4, dv = 4, ulysses = true,
     mask = function(_, nk)
       local l = {}
       for j = 1, nk do l[j] = j % 3 ~= 2 end
       return qkv.tensor(l)
     end}
case{name = "scale", batch = {4}, bq = 3, bk = 2, d = 4, dv = 3, causal = true, scale = 0.3,
     ulysses = true, layout = "blocks"}
-- no batch dims; k and v broadcast over q's batch (ring)
case{name = "2-D", batch = {}, bq = 5, bk = 3, d = 4, dv = 2, causal = true, layout = "blocks"}
case{name = "k broadcast", batch = {3, 2}, kbatch = {1, 2}, bq = 2, bk = 2, d = 3, dv = 3,
     mask = holes({3, 1})}
case{name = "float32", batch = {2, 4}, bq = 4, bk = 4, d = 8, dv = 8, causal = true,
     dtype = "float32", mask = holes({}), ulysses = true, layout = "zigzag"}

-- the zigzag layout (causal, both block lengths even): every rank the same
-- work, where the blocks give rank P-1 P times rank 0's
case{name = "zigzag", batch = {2, 3}, bq = 6, bk = 6, d = 5, dv = 4, causal = true,
     layout = "zigzag", balanced = true, calls = function(P) return P end}
case{name = "zigzag off", batch = {2, 3}, bq = 6, bk = 6, d = 5, dv = 4, causal = true,
     zigzag = false, layout = "blocks", balanced = false}
case{name = "zigzag mask", batch = {2, 3}, bq = 6, bk = 6, d = 4, dv = 3, causal = true,
     mask = holes({2, 1}), layout = "zigzag", balanced = true}
case{name = "zigzag nk=2nq", batch = {3}, bq = 4, bk = 8, d = 4, dv = 5, causal = true,
     layout = "zigzag", balanced = true}
case{name = "zigzag nk=2nq off", batch = {3}, bq = 4, bk = 8, d = 4, dv = 5, causal = true,
     zigzag = false, layout = "blocks", balanced = false}
-- n_q > n_k: the first n_q - n_k queries see no key, so no layout of
-- halves is even; the zigzag still spreads the work better than the blocks
local zq = case{name = "zigzag nq=2nk", batch = {3}, bq = 8, bk = 4, d = 4, dv = 5,
                causal = true, mask = holes({}), layout = "zigzag"}
local bq_ = case{name = "zigzag nq=2nk off", batch = {3}, bq = 8, bk = 4, d = 4, dv = 5,
                 causal = true, mask = holes({}), zigzag = false, layout = "blocks"}
if W > 1 then
  ok(zq < bq_, "zigzag nq=2nk spread", ("zigzag %d, blocks %d"):format(zq, bq_))
end
-- block lengths that do not split in two: the blocks
case{name = "odd blocks", batch = {2}, bq = 5, bk = 5, d = 3, dv = 3, causal = true,
     mask = holes({}), layout = "blocks"}
case{name = "odd keys", batch = {2}, bq = 4, bk = 3, d = 3, dv = 3, causal = true,
     layout = "blocks"}
-- not causal: the blocks, balanced as they are
case{name = "plain even", batch = {2}, bq = 4, bk = 4, d = 3, dv = 3, layout = "blocks",
     balanced = true}

-- without grad wanted, no graph
local x = qkv.randn(2, 4, 3, 5, "float64")
local y = d.ring_attention(x, x, x, {causal = true})
ok(y.grad_fn == nil and not y.requires_grad, "ring no graph")
y = d.ulysses_attention(x, x, x)
ok(y.grad_fn == nil and not y.requires_grad, "ulysses no graph")

-- errors, on every rank alike
local function err(name, want, f, ...)
  local good, msg = pcall(f, ...)
  ok(not good and tostring(msg):find(want, 1, true) ~= nil, name, tostring(msg))
end
if W > 1 then
  -- blocks of different sizes: every rank names what each had
  local n = R == 1 and 4 or 3
  local mine = qkv.zeros(2, n, 4, "float64")
  err("ring blocks differ", "dist.ring_attention: the ranks' blocks or options differ",
      d.ring_attention, mine, mine, mine)
  err("ring blocks differ named", "rank 1: q float64 (2, 4, 4), k float64 (2, 4, 4)",
      d.ring_attention, mine, mine, mine)
  local h = qkv.zeros(4, n, 2)
  err("ulysses blocks differ", "dist.ulysses_attention: the ranks' blocks or options differ",
      d.ulysses_attention, h, h, h)
  local z = qkv.zeros(4, 3, 2, "float64")
  err("ring options differ", "not causal", d.ring_attention, z, z, z, {causal = R == 0})
  -- a float mask qkv takes on one rank and refuses on the others (0 and
  -- -inf, PyTorch's additive form): an error on every rank, not a hang
  local m = R == 0 and qkv.ones(3, 3 * W, "float64") or qkv.zeros(3, 3 * W, "float64")
  m[{1, 1}] = R == 0 and 1 or -math.huge
  for _, which in ipairs({"ring", "ulysses"}) do
    err(which .. " mask values differ", "a mask not of 0 and 1, or all 0",
        d[which .. "_attention"], z, z, z, {mask = m})
  end
  local odd = qkv.zeros(W + 1, 3, 2, "float64")
  err("ulysses heads", ("its heads (dim -3, %d) must be q's (%d) and divide among the %d ranks")
      :format(W + 1, W + 1, W), d.ulysses_attention, odd, odd, odd)
end
local z = qkv.zeros(4, 3, 2, "float64")
err("ring dtype", "dist.ring_attention: q, k and v must be float32 or float64",
    d.ring_attention, z:half(), z:half(), z:half())
-- a mask whose batch dims do not broadcast: an error naming both shapes
-- (it was an internal one, the length of a nil value)
err("ring mask batch dims", "dist.ring_attention: mask (5, 3, " .. 3 * W .. ") does not broadcast "
    .. "to the scores' shape (4, 3, " .. 3 * W .. ")", d.ring_attention, z, z, z,
    {mask = qkv.ones(5, 3, 3 * W, "bool")})
d.barrier()
print("ok done")
