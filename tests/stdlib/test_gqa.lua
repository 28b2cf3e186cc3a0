-- test_gqa.lua: grouped-query attention, enable_gqa = true in qkv.attention
-- and F.scaled_dot_product_attention (stdlib/qkv/gqa.lua): against
-- PyTorch's SDPA with enable_gqa=True (tests/fixtures/sdpa/torch_gqa.lua,
-- written by torch_gqa.py), on both paths (fused, and weights = true with
-- W); against the float64 reference of tests/helpers/variants_ref.lua on K
-- and V repeated per group for masks and score_mod/mask_mod that read h;
-- gradcheck and the groups' summed dK, dV; no copy of K and V; the errors.
local lu = require "luaunit"
local T = dofile("tests/fixtures/sdpa/torch_gqa.lua")
local V = dofile("tests/helpers/variants_ref.lua")
local F = qkv.nn.functional

qkv.set_default_device("cpu")
qkv.manual_seed(490)

-- K (B, H_kv, n, d) repeated per group to (B, H, n, d): query head h's
-- key/value head is ceil(h / G), as PyTorch's repeat_interleave
local function expand(k, G) return k:repeat_interleave(G, 2) end

local function opts_of(c)
  local o = {}
  if c.kind == "bool" then o.mask = qkv.tensor(c.mask, "bool")
  elseif c.kind == "causal" then o.is_causal = true
  elseif c.kind == "scale" then o.scale = 0.3 end
  return o
end

-- qkv.attention(q, k, v, o) with enable_gqa on both paths against V.ref on
-- K and V repeated per group (ro: V.ref's options): out, and W
local function check(q, k, v, o, ro, what, tol)
  tol = tol or 1e-12
  local G = q:size(-3) // k:size(-3)
  local want, W = V.ref(q, expand(k, G), expand(v, G), ro)
  local oo = {}
  for key, x in pairs(o) do oo[key] = x end
  oo.enable_gqa, oo.weights = true, false
  V.near(qkv.attention(q, k, v, oo), want, tol, what .. " fused")
  oo.weights = true
  local out, got = qkv.attention(q, k, v, oo)
  V.near(out, want, tol, what .. " weights = true")
  V.near(got, W, tol, what .. " W")
end

TestGQA = {}

function TestGQA:testPyTorchFixtures()
  for n, c in ipairs(T) do
    local q, k, v = qkv.tensor(c.q, "float64"), qkv.tensor(c.k, "float64"), qkv.tensor(c.v, "float64")
    local want = qkv.tensor(c.out, "float64")
    local what = ("case %d (%s, H %d, H_kv %d)"):format(n, c.kind, q:size(2), k:size(2))
    -- F.scaled_dot_product_attention takes every kind, as PyTorch's
    local so = {enable_gqa = true}
    if c.kind == "bool" then so.attn_mask = qkv.tensor(c.mask, "bool")
    elseif c.kind == "float" then so.attn_mask = qkv.tensor(c.mask, "float64")
    elseif c.kind == "causal" then so.is_causal = true
    elseif c.kind == "scale" then so.scale = 0.3 end
    V.near(F.scaled_dot_product_attention(q, k, v, so), want, 1e-12, what .. " F.sdpa")
    if c.kind ~= "float" then
      local o = opts_of(c)
      o.enable_gqa, o.weights = true, false
      V.near(qkv.attention(q, k, v, o), want, 1e-12, what .. " fused")
      o.weights = true
      local out, W = qkv.attention(q, k, v, o)
      V.near(out, want, 1e-12, what .. " weights = true")
      lu.assertEquals(W.shape, {q:size(1), q:size(2), q:size(3), k:size(3)}, what .. " W's shape")
      -- float32 on the AVX2 path
      o.weights = false
      V.near(qkv.attention(q:float(), k:float(), v:float(), o), want, 1e-5, what .. " float32")
    end
  end
end

function TestGQA:testAgainstRepeatedHeads()
  -- every group size of H = 12, masks with and without a heads dim
  local B, H, nq, nk = 2, 12, 9, 11
  for _, Hk in ipairs{1, 2, 3, 4, 6, 12} do
    local G = H // Hk
    local q = qkv.randn(B, H, nq, 8, "float64")
    local k, v = qkv.randn(B, Hk, nk, 8, "float64"), qkv.randn(B, Hk, nk, 5, "float64")
    local masks = {false, qkv.rand(B, H, nq, nk):gt(0.4), qkv.rand(nq, nk):gt(0.4),
                   qkv.rand(B, 1, nq, nk):gt(0.4)}
    for x, m in ipairs(masks) do
      local what = ("H_kv %d mask %d"):format(Hk, x)
      local o = {enable_gqa = true, mask = m or nil, causal = x == 3}
      local ro = {keep = m or nil}
      if x == 3 then
        local P = V.pos({B, H}, nq, nk)
        ro.keep = m:logical_and(P.j:le(P.i + nk - nq))
      end
      check(q, k, v, o, ro, what)
    end
  end
end

function TestGQA:testDecodeStep()
  -- one query per head: each group's queries are one call's rows (the
  -- cache read once a key/value head); what each query sees is unchanged
  local B, H, Hk, nk = 2, 8, 2, 13
  local q = qkv.randn(B, H, 1, 16, "float64")
  local k, v = qkv.randn(B, Hk, nk, 16, "float64"), qkv.randn(B, Hk, nk, 8, "float64")
  local P = V.pos({B, H}, 1, nk)
  local pad = qkv.rand(B, 1, nk):gt(0.7):logical_and(P.j:reshape(1, 1, nk):gt(1))
  for _, c in ipairs{{{}, {}}, {{causal = true}, {}},                       -- all keys: qkv's causal, one query
                     {{is_causal = true}, {keep = P.j:le(1)}},             -- PyTorch's: key 1 alone
                     {{key_padding_mask = pad}, {keep = pad:logical_not():reshape(B, 1, 1, nk)}},
                     {{scale = 0.2}, {scale = 0.2}}} do
    local what = "decode " .. tostring(next(c[1]))
    check(q, k, v, c[1], c[2], what)
    check(q:float(), k:float(), v:float(), c[1], c[2], what .. " float32", 1e-5)
  end
  lu.assertTrue(qkv.test.gradcheck(function(a, b, c)
    return (qkv.attention(a, b, c, {enable_gqa = true, weights = false}))
  end, {q, k, v}), "gradcheck of a decode step")
  -- F.scaled_dot_product_attention's decode step takes the same way
  local want = V.ref(q, expand(k, 4), expand(v, 4), {})
  V.near(F.scaled_dot_product_attention(q, k, v, {enable_gqa = true}), want, 1e-12, "F.sdpa decode")
  V.near(F.scaled_dot_product_attention(q, k, v, {enable_gqa = true, is_causal = true}),
         (V.ref(q, expand(k, 4), expand(v, 4), {keep = P.j:le(1)})), 1e-12, "F.sdpa decode, is_causal")
end

function TestGQA:testKeyPaddingMask()
  -- (n_k), (B, 1, n_k) and (B, H, n_k): key_padding_mask's dims before n_k
  -- are the batch dims, its heads dim split as Q's
  local B, H, Hk, nq, nk = 2, 6, 2, 5, 7
  local q = qkv.randn(B, H, nq, 4, "float64")
  local k, v = qkv.randn(B, Hk, nk, 4, "float64"), qkv.randn(B, Hk, nk, 4, "float64")
  local pads = {qkv.tensor({false, false, true, false, false, false, true}),
                qkv.rand(B, 1, nk):gt(0.6), qkv.rand(B, H, nk):gt(0.6)}
  local first = qkv.ones(nk, "bool")
  first[1] = false
  for x, pad in ipairs(pads) do
    pad = pad:logical_and(first)                      -- every query keeps a key
    local s = pad.shape
    table.insert(s, #s, 1)                            -- (..., 1, n_k): the query dim
    check(q, k, v, {key_padding_mask = pad}, {keep = pad:logical_not():reshape(table.unpack(s))},
          "key_padding_mask " .. x)
  end
  V.raises(function() return qkv.attention(q, k, v, {enable_gqa = true, key_padding_mask = qkv.ones({B, 4, nk}, "bool")}) end,
           {"attention: enable_gqa: the key_padding_mask (2, 4, 7) has 4 heads where Q has H = 6"}, "its heads")
end

function TestGQA:testVariantsSeeTheQueryHead()
  -- a score_mod and a mask_mod that read b and h get the query's own, h
  -- up to H, under a block mask made with B and H nil
  local B, H, Hk, n = 2, 6, 2, 40
  local q = qkv.randn(B, H, n, 8, "float64")
  local k, v = qkv.randn(B, Hk, n, 8, "float64"), qkv.randn(B, Hk, n, 8, "float64")
  local slopes = qkv.alibi_slopes(H)
  local o = {score_mod = function(s, b, h, i, j) return s + slopes[h] * (j - i) + b end,
             mask_mod = function(b, h, i, j) return (i - j):abs():lt(h * 3 + b) end}
  local P = V.pos({B, H}, n, n)
  local sl = slopes:double():reshape(H, 1, 1)
  local ro = {score = function(S) return S + sl * (P.j - P.i) + P.b end,
              keep = (P.i - P.j):abs():lt(P.h * 3 + P.b)}
  check(q, k, v, o, ro, "gqa + mods")
  -- the same under a block mask (B and H nil), and in float32
  local bm = qkv.block_mask(qkv.variants.sliding_window(10), nil, nil, n, n)
  local P2 = V.pos({B, H}, n, n)
  local keep = P2.j:le(P2.i):logical_and(P2.j:gt(P2.i - 10))
  check(q, k, v, {block_mask = bm}, {keep = keep}, "gqa + block mask")
  local f = qkv.attention(q:float(), k:float(), v:float(), {enable_gqa = true, weights = false,
                          score_mod = o.score_mod, mask_mod = o.mask_mod})
  V.near(f, (V.ref(q, k:repeat_interleave(3, 2), v:repeat_interleave(3, 2), ro)), 1e-5, "float32 mods")
end

function TestGQA:testPerHeadBlockMasks()
  -- a block mask made for B and H (each query head its own window, each
  -- batch item its own offset): the grouped call regroups its blocks and
  -- spans, and equals the same call on K and V repeated per head
  local B, H, Hk, n = 2, 6, 3, 70
  local q = qkv.randn(B, H, n, 8, "float64")
  local k, v = qkv.randn(B, Hk, n, 8, "float64"), qkv.randn(B, Hk, n, 8, "float64")
  local kr, vr = k:repeat_interleave(2, 2), v:repeat_interleave(2, 2)
  local mm = function(b, h, i, j) return j:le(i):logical_and(j:gt(i - h * 5 - b)) end
  local mh = function(_, h, i, j) return j:le(i):logical_and(j:gt(i - h * 5)) end
  local mb = function(b, _, i, j) return j:le(i - b) end
  for _, dims in ipairs{{B, H, mm}, {nil, H, mh}, {B, nil, mb}} do
    local bm = qkv.block_mask(dims[3], dims[1], dims[2], n, n, {block = 16})
    lu.assertNotNil(bm.spans, "one run a query")
    for _, dt in ipairs{"float64", "float32"} do
      local a, b, c, ar, br = q:to(dt), k:to(dt), v:to(dt), kr:to(dt), vr:to(dt)
      local want = qkv.attention(a, ar, br, {block_mask = bm, weights = false})
      local got = qkv.attention(a, b, c, {enable_gqa = true, block_mask = bm, weights = false})
      local tol = dt == "float64" and 1e-12 or 1e-5
      V.near(got, want, tol, ("%s B %s H %s"):format(dt, tostring(dims[1]), tostring(dims[2])))
      -- its mask_mod passed as mask_mod too, and with weights
      local out, W = qkv.attention(a, b, c, {enable_gqa = true, block_mask = bm, mask_mod = bm.mask_mod})
      local out2, W2 = qkv.attention(a, ar, br, {block_mask = bm})
      V.near(out, out2, tol, dt .. " weights out")
      V.near(W, W2, tol, dt .. " weights W")
    end
  end
  -- gradients through the regrouped block mask, as on K and V repeated
  -- (float32: the backward's register kernel, on AVX-512, over each
  -- partial tile's band)
  local bm = qkv.block_mask(mm, B, H, n, n, {block = 16})
  local g = qkv.randn(B, H, n, 8, "float64")
  local function grads(kk, vv, gqa, dt)
    local a, b, c = q:to(dt):clone():requires_grad_(), kk:to(dt):clone():requires_grad_(),
                    vv:to(dt):clone():requires_grad_()
    qkv.attention(a, b, c, {enable_gqa = gqa, block_mask = bm, weights = false}):backward(g:to(dt))
    return a.grad:double(), b.grad:double(), c.grad:double()
  end
  local rq, rk, rv = grads(kr, vr, false, "float64")
  for _, dt in ipairs{"float64", "float32"} do
    local dq, dk, dv = grads(k, v, true, dt)
    local tol = dt == "float64" and 1e-12 or 2e-5
    V.near(dq, rq, tol, dt .. " dq")
    V.near(dk, rk:unflatten(2, {Hk, 2}):sum(3), tol, dt .. " dk")
    V.near(dv, rv:unflatten(2, {Hk, 2}):sum(3), tol, dt .. " dv")
  end
end

function TestGQA:testGradients()
  local q = qkv.randn(2, 4, 5, 3, "float64")
  local k, v = qkv.randn(2, 2, 6, 3, "float64"), qkv.randn(2, 2, 6, 2, "float64")
  for _, w in ipairs{false, true} do
    local function f(a, b, c) return (qkv.attention(a, b, c, {enable_gqa = true, causal = true, weights = w})) end
    lu.assertTrue(qkv.test.gradcheck(f, {q, k, v}), "gradcheck weights = " .. tostring(w))
  end
  -- dK and dV: each group's sum, as on K and V repeated per group
  local G = qkv.randn(2, 4, 5, 2, "float64")
  local g = qkv.grad(function(a, b, c)
    return (qkv.attention(a, b, c, {enable_gqa = true, weights = false}) * G):sum()
  end, {q, k, v})
  local r = qkv.grad(function(a, b, c)
    return (qkv.attention(a, b:repeat_interleave(2, 2), c:repeat_interleave(2, 2), {weights = false}) * G):sum()
  end, {q, k, v})
  for x, name in ipairs{"dq", "dk", "dv"} do
    lu.assertEquals(g[x].shape, ({q, k, v})[x].shape, name .. " shape")
    V.near(g[x], r[x], 1e-12, name)
  end
  -- float32, causal, the kernel's own tiles (n_k past one of its 256-key
  -- tiles, 3 query tiles): each group's dK and dV summed where they lie,
  -- never a whole (..., H, n_k, d) one: _attention_backward's dK is K's
  local GQ = require "qkv.gqa"
  local q3, k3, v3 = qkv.randn(1, 6, 300, 16), qkv.randn(1, 2, 300, 16), qkv.randn(1, 2, 300, 8)
  local G3 = qkv.randn(1, 6, 300, 8)
  for _, causal in ipairs{false, true} do
    local o = {enable_gqa = true, causal = causal, weights = false}
    local g3 = qkv.grad(function(a, b, c) return (qkv.attention(a, b, c, o) * G3):sum() end, {q3, k3, v3})
    local r3 = qkv.grad(function(a, b, c)
      return (qkv.attention(a, b:repeat_interleave(3, 2), c:repeat_interleave(3, 2),
                            {causal = causal, weights = false}) * G3):sum()
    end, {q3, k3, v3})
    for x, name in ipairs{"dq", "dk", "dv"} do V.near(g3[x], r3[x], 1e-5, "float32 " .. name) end
  end
  local a5, b5, c5 = GQ.split("attention", q3, k3, v3, nil)
  local out = qkv.attention(a5, b5, c5, {weights = false})
  local dq, dk, dv = qkv._attention_backward(a5, b5, c5, out, G3:unflatten(2, {2, 3}), nil, false, 0.25)
  lu.assertEquals(dq.shape, {1, 2, 3, 300, 16})
  lu.assertEquals(dk.shape, {1, 2, 1, 300, 16})
  lu.assertEquals(dv.shape, {1, 2, 1, 300, 8})
  -- through F.scaled_dot_product_attention and a score_mod
  lu.assertTrue(qkv.test.gradcheck(function(a, b, c)
    return F.scaled_dot_product_attention(a, b, c, {enable_gqa = true,
      score_mod = function(s, _, h, i, j) return s - h * 0.1 * (i - j):abs() end})
  end, {q, k, v}))
end

function TestGQA:testNoCopyAndPlainCalls()
  -- K and V are read where they lie: the grouped K is a view of K
  local GQ = require "qkv.gqa"
  local q, k, v = qkv.randn(1, 8, 4, 16), qkv.randn(1, 2, 6, 16), qkv.randn(1, 2, 6, 16)
  local q5, k5, v5, _, G = GQ.split("attention", q, k, v, nil)
  lu.assertEquals(G, 4)
  lu.assertEquals(q5.shape, {1, 2, 4, 4, 16})
  lu.assertEquals(k5.shape, {1, 2, 1, 6, 16})
  -- views: a write into K, V or Q shows in them
  k[{1, 2, 3, 4}], v[{1, 1, 6, 16}], q[{1, 7, 2, 5}] = 11, 12, 13
  lu.assertEquals(k5[{1, 2, 1, 3, 4}], 11, "K not copied")
  lu.assertEquals(v5[{1, 1, 1, 6, 16}], 12, "V not copied")
  lu.assertEquals(q5[{1, 2, 3, 2, 5}], 13, "Q not copied")
  -- enable_gqa = false, and H_kv = H, are the plain call
  local kk, vv = qkv.randn(1, 8, 6, 16), qkv.randn(1, 8, 6, 16)
  V.near(qkv.attention(q, kk, vv, {enable_gqa = true, weights = false}),
         qkv.attention(q, kk, vv, {weights = false}), 0, "H_kv = H")
  V.near(qkv.attention(q, kk, vv, {enable_gqa = false, weights = false}),
         qkv.attention(q, kk, vv, {weights = false}), 0, "enable_gqa = false")
  lu.assertEquals(select("#", qkv.attention(q, k, v, {enable_gqa = true, weights = false})), 1,
                  "weights = false returns out alone")
end

function TestGQA:testDevice()
  local ok, why = qkv.cuda_available()
  if not ok then lu.skip("needs the CUDA device: " .. tostring(why)) end
  local q, k, v = qkv.randn(2, 6, 5, 8), qkv.randn(2, 3, 7, 8), qkv.randn(2, 3, 7, 8)
  local want = qkv.attention(q, k, v, {enable_gqa = true, weights = false})
  for _, w in ipairs{false, true} do
    local got = qkv.attention(q:cuda(), k:cuda(), v:cuda(), {enable_gqa = true, weights = w})
    lu.assertEquals(got.device, "cuda")
    V.near(got:cpu(), want, 1e-5, "cuda weights = " .. tostring(w))
  end
end

function TestGQA:testErrors()
  local q, k, v = qkv.randn(2, 6, 5, 8), qkv.randn(2, 4, 7, 8), qkv.randn(2, 4, 7, 8)
  V.raises(function() return qkv.attention(q, k, v, {enable_gqa = true}) end,
           {"attention: enable_gqa: Q's heads H = 6 must be a multiple of K's and V's H_kv = 4 (Q (2, 6, 5, 8), K (2, 4, 7, 8))"},
           "H not a multiple")
  V.raises(function() return qkv.attention(q, k:narrow(2, 1, 3), v:narrow(2, 1, 2), {enable_gqa = true}) end,
           {"attention: enable_gqa: K and V must have the same heads H_kv, got K (2, 3, 7, 8) and V (2, 2, 7, 8)"},
           "K and V differ")
  V.raises(function() return qkv.attention(qkv.randn(5, 8), qkv.randn(7, 8), qkv.randn(7, 8), {enable_gqa = true}) end,
           {"attention: enable_gqa needs Q, K and V with a heads dim (..., H, n, d)"}, "no heads dim")
  V.raises(function() return qkv.attention(q, k, v, {enable_gqa = 1}) end,
           {"attention: enable_gqa must be a boolean, got number"}, "not a boolean")
  local k3, v3 = qkv.randn(2, 3, 7, 8), qkv.randn(2, 3, 7, 8)
  V.raises(function() return qkv.attention(q, k3, v3, {enable_gqa = true, mask = qkv.ones({2, 4, 5, 7}, "bool")}) end,
           {"attention: enable_gqa: the mask (2, 4, 5, 7) has 4 heads where Q has H = 6 (it takes H or 1)"},
           "mask's heads")
  local bm = qkv.block_mask(function(b, h, i, j) return j:le(i + h) end, nil, 4, 5, 7)
  V.raises(function() return qkv.attention(q, k3, v3, {enable_gqa = true, block_mask = bm}) end,
           {"attention: enable_gqa: the block_mask was made for B = nil, H = 4, but Q gives B = 2, H = 6"},
           "a block mask of other heads")
  V.raises(function() return F.scaled_dot_product_attention(q, k, v, {enable_gqa = true}) end,
           {"scaled_dot_product_attention", "H = 6 must be a multiple of", "H_kv = 4"}, "F.sdpa")
  V.raises(function() return F.scaled_dot_product_attention(q, k3, v3, {enable_gqa = 2}) end,
           {"scaled_dot_product_attention", "enable_gqa"}, "F.sdpa flag")
  local closed
  do local t <close> = qkv.randn(2, 6, 5, 8); closed = t end
  V.raises(function() return qkv.attention(closed, k3, v3, {enable_gqa = true}) end,
           {"attention: Q must be a tensor, got a closed tensor"}, "closed Q")
  -- the process goes on
  lu.assertEquals(qkv.attention(q, k3, v3, {enable_gqa = true, weights = false}).shape, {2, 6, 5, 8})
end

os.exit(lu.LuaUnit.run(), true)
