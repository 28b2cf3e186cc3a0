-- test_variants_device.lua: attention's variants on the GPU device
-- ("cuda": a GPU, or build/fakecuda.so, the CPU's kernels behind the
-- plugin's interface, under make test's device pass; or build/simcuda.so).
-- Variants there run fused where the plugin fills attention_mods (the
-- GPU's, vm/cuda/mods.cu), composed otherwise (the fake device); every
-- library variant, a
-- mix of mods with captured tensors, a block mask and the gradients must
-- equal the CPU's results and the float64 reference of
-- tests/helpers/variants_ref.lua (computed on the host). Skipped, with
-- the reason, where qkv.cuda_available() is false (run it alone with
-- QKV_CUDA_PLUGIN=build/fakecuda.so to use the fake device).
local lu = require "luaunit"
local V = dofile("tests/helpers/variants_ref.lua")
local VA = qkv.variants

qkv.set_default_device("cpu")            -- tensors go to the device by :cuda() alone
qkv.manual_seed(4850)
local GPU, WHY = qkv.cuda_available()

local function need() if not GPU then lu.skip("needs the CUDA device: " .. tostring(WHY)) end end

local function cu(...)
  local r = {}
  for x, a in ipairs{...} do r[x] = a:cuda() end
  return table.unpack(r)
end

-- opts on the device (the mods capture device tensors) against the same
-- call on the CPU (the fused kernel) and the reference; both paths
local function same(q, k, v, opts_dev, opts_cpu, ro, what)
  local want, W = V.ref(q, k, v, ro)
  local qd, kd, vd = cu(q, k, v)
  local tol = V.TOL[q.dtype]
  for _, w in ipairs{false, true} do
    local label = what .. (w and " (weights)" or " (fused)")
    local od = V.with(opts_dev, "weights", w)
    local out, Wd = qkv.attention(qd, kd, vd, od)
    lu.assertEquals(out.device, "cuda", label .. ": device")
    local cpu = qkv.attention(q, k, v, V.with(opts_cpu, "weights", w))
    V.near(out:cpu(), cpu, tol, label .. " = the CPU's", q.dtype)
    V.near(out:cpu(), want, tol, label .. " = the reference")
    if w then
      lu.assertEquals(Wd.device, "cuda", label .. ": W's device")
      V.near(Wd:cpu(), W, tol, label .. " W")
    else
      lu.assertNil(Wd, label .. ": weights = false returns out alone")
    end
  end
end

local function slopes_of(H)
  local s = {}
  for h = 1, H do s[h] = 2 ^ (-8 * h / H) end
  return s
end

TestDevice = {}

function TestDevice:testMasks()
  need()
  local nq, nk = 150, 130
  local q, k, v = V.qkv({2, 3}, {2, 3}, nq, nk, 16, 8)
  local P = V.pos({2, 3}, nq, nk)
  local ids, kids = {}, {}
  for x = 1, nq do ids[x] = (x - 1) // 40 end
  for x = 1, nk do kids[x] = (x - 1) // 35 end
  local I, K = qkv.tensor(ids, "int64"), qkv.tensor(kids, "int64")
  local cases = {
    {"causal(5)", VA.causal(5), nil, P.j:le(P.i + 5)},
    {"causal_end", VA.causal_end(nq, nk), nil, P.j:le(P.i + nk - nq)},
    {"sliding_window(20)", VA.sliding_window(20), nil, P.j:le(P.i):logical_and(P.j:gt(P.i - 20))},
    {"window both sides", VA.sliding_window(20, {causal = false}), nil, (P.i - P.j):abs():lt(20)},
    {"prefix_lm(30)", VA.prefix_lm(30), nil, P.j:le(P.i):logical_or(P.j:le(30))},
    {"document(q ids, kv ids)", VA.document(I:cuda(), K:cuda()), VA.document(I, K),
     I:double():reshape(nq, 1):eq(K:double():reshape(1, nk))},
    {"and_masks, or_masks", qkv.and_masks(VA.causal(), qkv.or_masks(VA.sliding_window(10),
                                                        function(b, h, i, j) return j:le(5) end)),
     nil, P.j:le(P.i):logical_and(P.j:gt(P.i - 10):logical_or(P.j:le(5)))},
    {"per (b, h)", function(b, h, i, j) return (i - j):abs():lt(h * 10 + b * 7) end, nil,
     (P.i - P.j):abs():lt(P.h * 10 + P.b * 7)},
    {"no key at all", function(b, h, i, j) return j:lt(0) end, nil, P.j:lt(0)},
  }
  for _, c in ipairs(cases) do
    same(q, k, v, {mask_mod = c[2]}, {mask_mod = c[3] or c[2]}, {keep = c[4]}, c[1])
  end
end

function TestDevice:testScores()
  need()
  local nq, nk, H = 140, 150, 4
  local q, k, v = V.qkv({2, H}, {2, H}, nq, nk, 16, 8)
  local P = V.pos({2, H}, nq, nk)
  local sl = qkv.tensor(slopes_of(H), "float64")
  local bias = qkv.randn(H, nq + nk - 1, "float64")
  local function rel(b) return function(s, _, h, i, j) return s + b[{h, i - j + nk}] end end
  local B = V.take(bias, (P.h - 1) * (nq + nk - 1) + P.i - P.j + nk)
  local S3 = sl:reshape(H, 1, 1)
  local cases = {
    {"alibi(slopes)", VA.alibi(sl:cuda()), VA.alibi(sl), function(S) return S + S3 * (P.j - P.i) end},
    {"softcap(2)", VA.softcap(2), nil, function(S) return (S / 2):tanh() * 2 end},
    {"bias[{h, i - j + n_k}]", rel(bias:cuda()), rel(bias), function(S) return S + B end},
    {"t5_bias", VA.t5_bias(bias:narrow(2, 1, 32):cuda()), VA.t5_bias(bias:narrow(2, 1, 32)), nil},
    {"where", function(s, b, h, i, j) return qkv.where(j:gt(i), s / 2, s - 1) end, nil,
     function(S) return qkv.where(P.j:gt(P.i):logical_or(qkv.zeros_like(S, {dtype = "bool"})), S / 2, S - 1) end},
  }
  for _, c in ipairs(cases) do
    if c[4] then
      same(q, k, v, {score_mod = c[2]}, {score_mod = c[3] or c[2]}, {score = c[4]}, c[1])
    else                                       -- against the CPU alone
      for _, w in ipairs{false, true} do
        local out = qkv.attention(q:cuda(), k:cuda(), v:cuda(), {score_mod = c[2], weights = w})
        V.near(out:cpu(), qkv.attention(q, k, v, {score_mod = c[3], weights = w}), 1e-12, c[1])
      end
    end
  end
end

function TestDevice:testFloat32AndAMix()
  need()
  local nq, nk = 130, 130
  local q, k, v = V.qkv({3}, {3}, nq, nk, 16, 8, "float32")
  local P = V.pos({3}, nq, nk)
  local sl = qkv.tensor({0.25, 0.125, 0.0625}, "float32")
  local mods = function(s2) return {
    score_mod = function(s, b, h, i, j) return ((s + s2[h] * (j - i)) / 4):tanh() * 4 end,
    mask_mod = qkv.and_masks(VA.sliding_window(50), function(b, h, i, j) return (i // 32):eq(j // 32) | j:le(3) end),
    causal = true} end
  local chunk = {}
  for i = 1, nq do
    chunk[i] = {}
    for j = 1, nk do chunk[i][j] = (i // 32 == j // 32) or j <= 3 end
  end
  same(q, k, v, mods(sl:cuda()), mods(sl),
       {score = function(S) return ((S + sl:double():reshape(3, 1, 1) * (P.j - P.i)) / 4):tanh() * 4 end,
        keep = P.j:le(P.i):logical_and(P.j:gt(P.i - 50)):logical_and(qkv.tensor(chunk, "bool"))},
       "float32 mix")
end

function TestDevice:testBlockMask()
  need()
  local nq, nk = 150, 140
  local q, k, v = V.qkv({2, 2}, {2, 2}, nq, nk, 16, 8)
  local P = V.pos({2, 2}, nq, nk)
  local bm = qkv.block_mask(VA.sliding_window(30), nil, nil, nq, nk, {block = {32, 48}})
  same(q, k, v, {block_mask = bm, mask_mod = VA.causal(-2)}, {block_mask = bm, mask_mod = VA.causal(-2)},
       {keep = P.j:le(P.i - 2):logical_and(P.j:gt(P.i - 30))}, "block_mask + mask_mod")
  V.raises(function()
    return qkv.attention(q:narrow(-2, 1, 100):cuda(), k:cuda(), v:cuda(), {block_mask = bm})
  end, {"block_mask"}, "other lengths on the device")
end

function TestDevice:testGradients()
  need()
  local nq, nk, H = 100, 120, 2
  local q, k, v = V.qkv({2, H}, {2, H}, nq, nk, 8, 8)
  local bias = qkv.randn(H, nq + nk - 1, "float64")
  local G = qkv.randn(2, H, nq, 8, "float64")
  local function loss(Gx)
    return function(q, k, v, b)
      local out = qkv.attention(q, k, v, {
        score_mod = function(s, _, h, i, j) return (s + b[{h, j - i + nq}]) * 0.5 end,
        mask_mod = VA.sliding_window(40), weights = false})
      return (out * Gx):sum()
    end
  end
  local gc = qkv.grad(loss(G), {q, k, v, bias})
  local gd = qkv.grad(loss(G:cuda()), {q:cuda(), k:cuda(), v:cuda(), bias:cuda()})
  for x, name in ipairs{"dq", "dk", "dv", "dbias"} do
    lu.assertEquals(gd[x].device, "cuda", name)
    V.near(gd[x]:cpu(), gc[x], 1e-10, "device " .. name .. " = the CPU's")
    lu.assertTrue(gc[x]:abs():max():item() > 0, name)
  end
end

function TestDevice:testCapturedOnTheHostIsAnError()
  need()
  local q = qkv.randn(3, 20, 4, "float64"):cuda()
  local sl = qkv.tensor({1, 2, 3}, "float64")
  V.raises(function()
    return qkv.attention(q, q, q, {score_mod = function(s, b, h, i, j) return s + sl[h] end})
  end, {"attention", "score_mod", "cpu", "cuda"}, "a host tensor captured for the device")
end

--[[
BUG? (stdlib/qkv/variants/library.lua, commit 98f12c2): the library's
variants that make their own tensors (alibi(H): qkv.alibi_slopes;
document_lengths: the ids) make them on the default device, so with q on
the GPU and the CPU the default (the usual way to move data: x:cuda()),
they are "a captured tensor on another device". Input: q (3, 20, 4) on
cuda, {score_mod = qkv.variants.alibi(3)}. Expected: ALiBi's attention on
the device, as for slopes given on it. Got: "attention: score_mod: a
captured tensor (3,) is on cpu, but Q is on cuda".
]]
function TestDevice:testLibraryTensorsFollowQ()
  need()
  local q, k, v = V.qkv({3}, {3}, 60, 60, 8, 8)
  local qd, kd, vd = cu(q, k, v)
  local out = qkv.attention(qd, kd, vd, {score_mod = VA.alibi(3), weights = false})
  V.near(out:cpu(), qkv.attention(q, k, v, {score_mod = VA.alibi(3), weights = false}), 1e-12, "alibi(3)")
  out = qkv.attention(qd, kd, vd, {mask_mod = VA.document_lengths({20, 40}), weights = false})
  V.near(out:cpu(), qkv.attention(q, k, v, {mask_mod = VA.document_lengths({20, 40}), weights = false}),
         1e-12, "document_lengths")
end

os.exit(lu.LuaUnit.run(), true)
