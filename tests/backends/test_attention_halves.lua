-- test_attention_halves.lua: the fused attention (weights = false) on
-- float16 and bfloat16 q, k, v on the CPU's float32 kernels, which widen
-- each tile as they read it and round o and the gradients once as they
-- write them (vm/cpu/attention.c's halves jobs, attention_bwd.c's items),
-- where the dispatch made float32 copies of the whole operands before.
-- Both are the same float32 arithmetic on the same values, so each result
-- must have the bits of the float32 path run on float32 copies of the
-- inputs (the float32 path is checked against float64 in
-- test_attention.lua): forward, log-sum-exps, dQ, dK, dV, across the
-- kernels' tiles (384 queries and 96 keys forward, 128 x 256 backward)
-- and a decode step's few queries (attention_decode.c, which reads the
-- halves as they are and is where their float32 copies go),
-- heads' strided rows, transposed and broadcast operands, masks, grouped
-- heads, the variants' score_mod and block masks, NaN and rows with no
-- key. The plain forward on a CPU with AMX is the tile unit's kernel
-- (test_attention_bf16.lua), so it is compared there only where the
-- flags list none.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local shell = dofile("tests/helpers/shell.lua")
local VA = qkv.variants
qkv.set_default_device("cpu")

local DTS = {"bfloat16", "float16"}

-- a and b hold the same values, NaN where the other has NaN
local function same(a, b, what)
  lu.assertEquals(a.dtype, b.dtype, what .. ": dtype")
  lu.assertEquals(R.sstr(R.shape(a)), R.sstr(R.shape(b)), what .. ": shape")
  local x, y = a:float(), b:float()
  local nan = x:ne(x)
  lu.assertTrue(nan:eq(y:ne(y)):all():item(), what .. ": NaN at other places")
  local eq = x:eq(y):logical_or(nan)
  if not eq:all():item() then
    lu.fail(("%s: %d of %d differ (max %g)"):format(what, (eq:logical_not()):sum():item(),
                                                     x:numel(), (x - y):abs():masked_fill(nan, 0):max():item()))
  end
end

local function f32(...)
  local r = {}
  for i, x in ipairs{...} do r[i] = x:float() end
  return table.unpack(r)
end

-- forward and backward of (Q, K, V) against float32 copies: out and lse
-- from _attention_lse, dQ, dK, dV from _attention_backward on the halves'
-- own out and a gradient G, both read by the float32 run as float32
local function check(name, Q, K, V, mask, causal, scale)
  local dt = Q.dtype
  local o, lse = qkv._attention_lse(Q, K, V, mask, causal, scale)
  local o32, lse32 = qkv._attention_lse(Q:float(), K:float(), V:float(), mask, causal, scale)
  same(o, o32:to(dt), name .. ": out")
  same(lse, lse32, name .. ": lse")
  local G = qkv.randn(o.shape):to(dt)
  local g = {qkv._attention_backward(Q, K, V, o, G, mask, causal, scale, lse)}
  local g32 = {qkv._attention_backward(Q:float(), K:float(), V:float(), o:float(), G:float(),
                                       mask, causal, scale, lse)}
  for i, w in ipairs{"dQ", "dK", "dV"} do same(g[i], g32[i]:to(dt), name .. ": " .. w) end
  return o
end

TestAttentionHalves = {}

function TestAttentionHalves:testShapesAcrossTiles()
  qkv.seed(11)
  local cases = {
    {"one query, one key", {1, 1, 1, 1}, false},
    {"blocks' edges", {17, 65, 32, 17}, false},
    {"d_k 1", {33, 65, 1, 3}, false},
    {"d_k 72, d_v 125, causal n_q > n_k", {40, 23, 72, 125}, true},
    {"causal n_k > n_q", {23, 100, 16, 96}, true},
    {"two query tiles, key tiles, causal", {400, 300, 32, 16}, true},
    {"backward's tiles", {300, 520, 40, 24}, false},
    -- a decode step's few queries (attention_decode.c, float16 as bfloat16
    -- and float32: float16 took the tile path, an ulp off float32's)
    {"decode step", {2, 700, 80, 80}, false},
    {"decode step, causal, d_k ~= d_v", {8, 600, 64, 16}, true},
    {"decode step, d 40 (8 lanes)", {3, 500, 40, 24}, false},
  }
  for _, dt in ipairs(DTS) do
    for _, c in ipairs(cases) do
      local nq, nk, dk, dv = table.unpack(c[2])
      local Q, K, V = qkv.randn(2, nq, dk):to(dt), qkv.randn(2, nk, dk):to(dt), qkv.randn(2, nk, dv):to(dt)
      check(dt .. " " .. c[1], Q, K, V, nil, c[3], 1 / math.sqrt(dk))
    end
  end
end

function TestAttentionHalves:testViewsMasksAndScales()
  qkv.seed(12)
  for _, dt in ipairs(DTS) do
    local x = qkv.randn(2, 150, 3 * 96):to(dt)
    -- heads of a fused projection: rows 288 apart, as MiniLM's
    local q, k, v = qkv.heads(x:narrow(3, 1, 96), 3), qkv.heads(x:narrow(3, 97, 96), 3),
                    qkv.heads(x:narrow(3, 193, 96), 3)
    check(dt .. " heads views, causal", q, k, v, nil, true, 0.125)
    -- features not adjacent: transposed operands (the backward's rows are copies)
    local Qt, Kt, Vt = qkv.randn(24, 50):to(dt), qkv.randn(24, 70):to(dt), qkv.randn(40, 70):to(dt)
    check(dt .. " transposed", Qt:t(), Kt:t(), Vt:t(), nil, false, 0.3)
    -- K and V of one batch for Q's 2 x 3; a mask with rows that keep no key
    local m = qkv.rand(2, 3, 20, 33):gt(0.4)
    m[1][2][5] = false
    local o = check(dt .. " broadcast K, V and a mask", qkv.randn(2, 3, 20, 24):to(dt),
                    qkv.randn(33, 24):to(dt), qkv.randn(33, 8):to(dt), m, true, -0.2)
    lu.assertEquals(o[1][2][5]:float():abs():sum():item(), 0, dt .. ": a row with no key")
  end
end

function TestAttentionHalves:testNaNStaysInItsQuery()
  qkv.seed(13)
  for _, dt in ipairs(DTS) do
    local Q, K, V = qkv.randn(19, 32):to(dt), qkv.randn(40, 32):to(dt), qkv.randn(40, 16):to(dt)
    Q[3][5] = 0 / 0
    local o = check(dt .. " NaN in query 3", Q, K, V, nil, false, 0.2)
    local rows = o:float():ne(o:float()):any(2):tolist()
    for i = 1, 19 do lu.assertEquals(rows[i], i == 3, dt .. " row " .. i) end
  end
end

function TestAttentionHalves:testGroupedHeads()
  -- 6 query heads on 2 key/value heads: each group's dK and dV summed in
  -- float32 over its items, rounded once
  qkv.seed(14)
  for _, dt in ipairs(DTS) do
    local Q = qkv.randn(2, 2, 3, 70, 32):to(dt)
    local K, V = qkv.randn(2, 2, 1, 90, 32):to(dt), qkv.randn(2, 2, 1, 90, 16):to(dt)
    check(dt .. " grouped", Q, K, V, nil, true, 0.17)
  end
end

function TestAttentionHalves:testPlainForwardWithoutTileUnit()
  if shell.has_amx() then return lu.skip("AMX: the bfloat16 forward is the tile unit's kernel") end
  qkv.seed(15)
  for _, dt in ipairs(DTS) do
    local Q, K, V = qkv.randn(3, 130, 64):to(dt), qkv.randn(3, 170, 64):to(dt), qkv.randn(3, 170, 48):to(dt)
    local o = qkv.attention(Q, K, V, {weights = false, causal = true})
    same(o, qkv.attention(Q:float(), K:float(), V:float(), {weights = false, causal = true}):to(dt),
         dt .. " qkv.attention")
  end
end

function TestAttentionHalves:testVariantsForward()
  -- score_mod and block masks run on the halves' float32 tiles alike
  qkv.seed(16)
  local H, n = 4, 300
  local bm = qkv.block_mask(VA.sliding_window(40), nil, H, n, n)
  for _, dt in ipairs(DTS) do
    local Q, K, V = qkv.randn(2, H, n, 32):to(dt), qkv.randn(2, H, n, 32):to(dt), qkv.randn(2, H, n, 32):to(dt)
    for name, o in pairs{alibi = {score_mod = VA.alibi(H)}, window = {block_mask = bm},
                         ["softcap + window"] = {score_mod = VA.softcap(2), block_mask = bm}} do
      o.weights = false
      same(qkv.attention(Q, K, V, o), qkv.attention(Q:float(), K:float(), V:float(), o):to(dt),
           dt .. " " .. name)
    end
  end
end

function TestAttentionHalves:testVariantsBackwardAgainstFloat64()
  -- ALiBi and a window's block mask: the backward's own kernel on the
  -- halves' items; against float64 autograd on the same values (the
  -- halves' out is rounded, so their gradients are not float32's bits)
  qkv.seed(17)
  local H, n = 2, 200
  local bm = qkv.block_mask(VA.sliding_window(30), nil, H, n, n)
  local opts = {score_mod = VA.alibi(H), block_mask = bm, weights = false}
  for _, dt in ipairs(DTS) do
    local x = {qkv.randn(2, H, n, 32):to(dt), qkv.randn(2, H, n, 32):to(dt), qkv.randn(2, H, n, 24):to(dt)}
    local h, d = {}, {}
    for i = 1, 3 do
      h[i] = x[i]:detach():requires_grad_()
      d[i] = x[i]:double():requires_grad_()
    end
    local G = qkv.randn(2, H, n, 24):to(dt)
    qkv.attention(h[1], h[2], h[3], opts):backward(G)
    qkv.attention(d[1], d[2], d[3], opts):backward(G:double())
    for i, w in ipairs{"dQ", "dK", "dV"} do
      lu.assertEquals(h[i].grad.dtype, dt, w)
      R.close(h[i].grad, d[i].grad, dt == "bfloat16" and 2e-2 or 3e-3, dt .. " " .. w)
    end
  end
end
