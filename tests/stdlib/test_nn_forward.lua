-- test_nn_forward.lua: qkv.nn's modules (docs/autograd.md, "qkv.nn")
-- against the float64 plain-loop references of tests/helpers/attn_ref.lua
-- composed by hand from each module's own weights: Linear, GELU,
-- Sequential, SelfAttention, CrossAttention, MultiHeadAttention (with
-- masks), MultiHeadCrossAttention, TokenAligner, AlignedCrossAttention;
-- initialisation, printing, cosine_similarity and the errors. What a
-- module holds (load/state_dict, named_parameters, sharing, parameters set
-- to nil) is test_nn_parameters.lua's.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local nn = qkv.nn

math.randomseed(20261121)
local T, close, fails = R.T, R.close, R.fails
local function rt(shape) return (R.mk(shape, "float32")) end

-- the reference of x W (+ b) for a (d_in, d_out) W: an attention module's
-- W_Q.., or a Linear's weight:t() (its weight is PyTorch's (d_out, d_in))
local function lin(x, W, b) return R.project(T(x), T(W), b and T(b)) end

-- multi-head attention by hand: project, split, attend, merge, W_O
local function mha_ref(m, xq, xkv, opts)
  local h = m.h
  local Q = R.heads(lin(xq, m.W_Q), h)
  local K = R.heads(lin(xkv, m.W_K), h)
  local V = R.heads(lin(xkv, m.W_V), h)
  local out, w = R.attention(Q, K, V, opts)
  return R.project(R.merge(out), T(m.W_O)), w
end

TestLinear = {}

function TestLinear:testForwardIsXWPlusB()
  local m = nn.Linear(6, 3)
  lu.assertEquals(tostring(m.weight.shape), "(3, 6)")
  lu.assertEquals(tostring(m.bias.shape), "(3,)")
  local x = rt{2, 5, 6}
  close(m(x), lin(x, m.weight:t(), m.bias), nil, "Linear")
end

function TestLinear:testNoBias()
  local m = nn.Linear(4, 2, {bias = false})
  lu.assertNil(m.bias)
  local x = rt{3, 4}
  close(m(x), lin(x, m.weight:t()), nil, "Linear no bias")
  lu.assertEquals(#m:parameters(), 1)
end

-- PyTorch's nn.Linear init: uniform in [-1/sqrt(d_in), 1/sqrt(d_in)]
function TestLinear:testInitBoundsAndSeed()
  qkv.seed(3)
  local m = nn.Linear(64, 512)
  local bound = 1 / math.sqrt(64)
  local W = m.weight
  lu.assertTrue(W:abs():max():item() <= bound)
  lu.assertTrue(W:abs():max():item() > 0.99 * bound)
  lu.assertTrue(math.abs(W:mean():item()) < 0.01 * bound * 10)
  -- uniform variance: bound^2 / 3
  lu.assertAlmostEquals(W:var():item(), bound ^ 2 / 3, 0.02 * bound ^ 2)
  lu.assertTrue(m.bias:abs():max():item() <= bound)
  qkv.seed(3)
  lu.assertEquals((nn.Linear(64, 512).weight - W):abs():max():item(), 0)
end

function TestLinear:testFloat64()
  local m = nn.Linear(5, 2, {dtype = "float64"})
  lu.assertEquals(m.weight.dtype, "float64")
  local x = R.mk({3, 5}, "float64")
  close(m(x), lin(x, m.weight:t(), m.bias), nil, "Linear float64")
end

-- no inputs or no outputs, as PyTorch's nn.Linear: Linear(0, 3) has a
-- (3, 0) weight and a bias of zeros (PyTorch's bound for no inputs is 0),
-- and a (2, 0) x gives the bias on each row
function TestLinear:testZeroFeatures()
  local m = nn.Linear(0, 3)
  lu.assertEquals(m.weight.shape, qkv.zeros(3, 0).shape)
  m.bias = qkv.tensor{1, 2, 3}
  lu.assertEquals(m(qkv.zeros(2, 0)):tolist(), {{1, 2, 3}, {1, 2, 3}})
  lu.assertEquals(m(qkv.zeros(0)):tolist(), {1, 2, 3})
  for _, v in ipairs(nn.Linear(0, 3).bias:tolist()) do lu.assertEquals(1 / v, math.huge) end
  lu.assertEquals(nn.Linear(3, 0)(qkv.ones(2, 3)).shape, qkv.zeros(2, 0).shape)
  lu.assertEquals(nn.Linear(0, 0)(qkv.ones(2, 0)).shape, qkv.zeros(2, 0).shape)
  fails("Linear: d_in must be a non-negative integer, got -1", nn.Linear, -1, 3)
  fails("Linear: d_out must be a non-negative integer, got 1.5", nn.Linear, 2, 1.5)
end

-- F.linear's shapes beyond (out, in) and (out,), with PyTorch 2's values:
-- a 1-D weight (in,) reduces input's last dim, and a 0-d bias (or (1,))
-- is added to every output
function TestLinear:testFunctionalWeight1DAndBias0D()
  local F = nn.functional
  local x, w1 = qkv.tensor{{1, 2, 3}, {4, 5, 6}}, qkv.tensor{1, 0, -1}
  local W = qkv.tensor{{1, 0, -1}, {2, 1, 0}}
  lu.assertEquals(F.linear(x, w1):tolist(), {-2, -2})
  local y = F.linear(qkv.tensor{1, 2, 3}, w1, qkv.tensor(0.5))
  lu.assertEquals({y:dim(), y:item()}, {0, -1.5})
  lu.assertEquals(F.linear(qkv.ones(2, 2, 3), w1, qkv.tensor(1)):tolist(), {{1, 1}, {1, 1}})
  lu.assertEquals(F.linear(x, W, qkv.tensor(0.5)):tolist(), {{-1.5, 4.5}, {-1.5, 13.5}})
  lu.assertEquals(F.linear(x, W, qkv.tensor{0.5}):tolist(), {{-1.5, 4.5}, {-1.5, 13.5}})
  lu.assertEquals(F.linear(qkv.ones(2, 2, 3), W, qkv.tensor(0.5)):tolist(),
                  {{{0.5, 3.5}, {0.5, 3.5}}, {{0.5, 3.5}, {0.5, 3.5}}})
  lu.assertEquals(F.linear(qkv.zeros(2, 0), qkv.zeros(0)):tolist(), {0, 0})
  -- the gradients (PyTorch's, float64): the 0-d bias gets the sum
  local xd = x:double()
  local g = qkv.grad(function(w, b) return F.linear(xd, w, b):sum() end,
                     {w1:double(), qkv.tensor(0.5, "float64")})
  lu.assertEquals({g[1]:tolist(), g[2]:item()}, {{5, 7, 9}, 2})
  g = qkv.grad(function(w, b) return F.linear(xd, w, b):sum() end,
               {W:double(), qkv.tensor(0.5, "float64")})
  lu.assertEquals(g[2]:item(), 4)
  -- what PyTorch refuses
  fails("linear: bias is (3,) but weight is (2, 3): expected (out_features,) = (2,) or 0-d",
        F.linear, x, W, qkv.tensor{1, 2, 3})
  fails("linear: bias is (1,) but weight is (3,): expected a 0-d bias with a 1-D weight",
        F.linear, x, w1, qkv.tensor{1})
  fails("linear: weight must be (out_features, in_features) or (in_features,), got ()",
        F.linear, x, qkv.tensor(2))
  fails("linear: input is () but weight is (3,)", F.linear, qkv.tensor(2), w1)
end

TestSequential = {}

function TestSequential:testLinearGeluLinear()
  local s = nn.Sequential(nn.Linear(6, 4), nn.GELU(), nn.Linear(4, 3))
  lu.assertEquals(#s, 3)
  local x = rt{5, 6}
  local ref = lin(x, s[1].weight:t(), s[1].bias)
  ref = R.project(R.gelu(ref), T(s[3].weight:t()), T(s[3].bias))
  close(s(x), ref, nil, "Sequential")
  lu.assertEquals(nn.Identity()(x), x)
end

function TestSequential:testPrintsLikePyTorch()
  local s = nn.Sequential(nn.Linear(6, 4), nn.GELU())
  lu.assertEquals(tostring(s), "Sequential(\n  (1): Linear(in_features=6, out_features=4, bias=true)\n"
                               .. "  (2): GELU()\n)")
end

TestAttentionModules = {}

function TestAttentionModules:testSelfAttention()
  local m = nn.SelfAttention(8, 4)
  lu.assertEquals(tostring(m.W_Q.shape), "(8, 4)")
  local x = rt{5, 8}
  local out, w = m(x)
  local rout, rw = R.attention(lin(x, m.W_Q), lin(x, m.W_K), lin(x, m.W_V))
  close(out, rout, nil, "SelfAttention out")
  close(w, rw, nil, "SelfAttention weights")
end

function TestAttentionModules:testSelfAttentionCausal()
  local m = nn.SelfAttention(6, 6)
  local x = rt{2, 4, 6}
  local out, w = m(x, {causal = true})
  local rout, rw = R.attention(lin(x, m.W_Q), lin(x, m.W_K), lin(x, m.W_V), {causal = true})
  close(out, rout, nil, "causal out")
  close(w, rw, nil, "causal weights")
  lu.assertEquals(w:detach()[1][1][2], 0)
end

function TestAttentionModules:testCrossAttentionShapes()
  local m = nn.CrossAttention(8, 4)
  local text, image = rt{3, 8}, rt{6, 8}
  local out, w = m(text, image)
  lu.assertEquals(tostring(out.shape), "(3, 4)")
  lu.assertEquals(tostring(w.shape), "(3, 6)")
  local rout, rw = R.attention(lin(text, m.W_Q), lin(image, m.W_K), lin(image, m.W_V))
  close(out, rout, nil, "CrossAttention out")
  close(w, rw, nil, "CrossAttention weights")
end

function TestAttentionModules:testMultiHeadCrossAttention()
  local m = nn.MultiHeadCrossAttention(16, 4)
  local text, image = rt{3, 16}, rt{9, 16}
  local out, w = m(text, image)
  lu.assertEquals(tostring(w.shape), "(4, 3, 9)")
  local rout, rw = mha_ref(m, text, image)
  close(out, rout, nil, "MHCA out")
  close(w, rw, nil, "MHCA weights")
end

-- a (B, 1, n) padding mask is given a head dim: (B, 1, 1, n)
function TestAttentionModules:testMultiHeadAttentionPaddingMask()
  local m = nn.MultiHeadAttention(8, 2)
  local x = rt{2, 5, 8}
  local mask = qkv.padding({3, 5}, 5)
  local out, w = m(x, {mask = mask})
  lu.assertEquals(tostring(w.shape), "(2, 2, 5, 5)")
  local rm = {shape = {2, 1, 1, 5}, data = R.flatten(mask:tolist())}
  local rout, rw = mha_ref(m, x, x, {mask = rm})
  close(out, rout, nil, "MHA masked out")
  close(w, rw, nil, "MHA masked weights")
  lu.assertEquals(w[1]:narrow(3, 4, 2):abs():sum():item(), 0)
end

function TestAttentionModules:testMultiHeadAttentionCausal()
  local m = nn.MultiHeadAttention(12, 3)
  local x = rt{6, 12}
  local out, w = m(x, {causal = true})
  local rout, rw = mha_ref(m, x, x, {causal = true})
  close(out, rout, nil, "MHA causal out")
  close(w, rw, nil, "MHA causal weights")
end

TestAlignment = {}

function TestAlignment:testLinearAndMlpAligners()
  local x = rt{7, 12}
  local a = nn.TokenAligner(12, 5, "linear")
  close(a(x), lin(x, a.proj.weight:t(), a.proj.bias), nil, "linear aligner")
  local m = nn.TokenAligner(12, 5, "mlp")
  local ref = R.gelu(lin(x, m.proj[1].weight:t(), m.proj[1].bias))
  ref = R.project(ref, T(m.proj[3].weight:t()), T(m.proj[3].bias))
  close(m(x), ref, nil, "mlp aligner")
  lu.assertEquals(nn.TokenAligner(5, 5, "identity")(x), x)
  lu.assertEquals(a:nparams(), 12 * 5 + 5)
end

function TestAlignment:testAlignedCrossAttention()
  local m = nn.AlignedCrossAttention(24, 8, 2)
  local text, image = rt{5, 8}, rt{16, 24}
  local out, w = m(text, image)
  lu.assertEquals(tostring(out.shape), "(5, 8)")
  lu.assertEquals(tostring(w.shape), "(2, 5, 16)")
  local p = m.aligner.proj
  local aligned = R.tensor(lin(image, p.weight:t(), p.bias))
  local rout, rw = mha_ref(m.cross_attn, text, aligned)
  close(out, rout, 1e-5, "aligned out")
  close(w, rw, 1e-5, "aligned weights")
end

TestCosine = {}

function TestCosine:testBroadcastTable()
  local a, b = rt{4, 16}, rt{9, 16}
  local c = qkv.cosine_similarity(a:unsqueeze(2), b:unsqueeze(1))
  lu.assertEquals(tostring(c.shape), "(4, 9)")
  local A, B = a:tolist(), b:tolist()
  for i = 1, 4 do
    for j = 1, 9 do
      local d, na, nb = 0, 0, 0
      for k = 1, 16 do
        d = d + A[i][k] * B[j][k]; na = na + A[i][k] ^ 2; nb = nb + B[j][k] ^ 2
      end
      lu.assertAlmostEquals(c[i][j], d / math.sqrt(na * nb), 1e-6)
    end
  end
end

-- PyTorch 2's eps: each norm clamped to eps on its own, a·b / (max(|a|,
-- eps) max(|b|, eps)), where a·b / max(|a||b|, eps) gave 0.01 for two
-- equal vectors of norm 1e-5; a·a that overflows float32 gives 0 (a / inf),
-- not NaN; gradients through it against finite differences
function TestCosine:testEpsPerNorm()
  local a = qkv.tensor({{1e-5, 0}, {3, 4}, {0, 0}}, "float64")
  local b = qkv.tensor({{1e-5, 0}, {4, 3}, {1, 0}}, "float64")
  local function ref(x, y, eps)
    local d = x[1] * y[1] + x[2] * y[2]
    local nx, ny = math.sqrt(x[1] ^ 2 + x[2] ^ 2), math.sqrt(y[1] ^ 2 + y[2] ^ 2)
    return d / (math.max(nx, eps) * math.max(ny, eps))
  end
  for _, eps in ipairs{1e-8, 0.5} do
    local c = qkv.cosine_similarity(a, b, -1, eps):tolist()
    local A, B = a:tolist(), b:tolist()
    for i = 1, 3 do
      local want = ref(A[i], B[i], eps)
      lu.assertTrue(math.abs(c[i] - want) <= 1e-15 * math.max(1, math.abs(want)),
                    ("eps %g row %d: %.17g, want %.17g"):format(eps, i, c[i], want))
    end
  end
  lu.assertAlmostEquals(qkv.cosine_similarity(a, b):tolist()[1], 1, 1e-15)
  local big = qkv.tensor({{1e20, 1e20}})
  lu.assertEquals(qkv.cosine_similarity(big, big):tolist(), {0})
  qkv.test.gradcheck(function(x, y) return qkv.cosine_similarity(x, y) end,
                     {qkv.randn(3, 4, "float64"), qkv.randn(3, 4, "float64")})
end

function TestCosine:testZeroVectorAndDim()
  local z = qkv.zeros(1, 3)
  lu.assertEquals(qkv.cosine_similarity(z, qkv.ones(1, 3)):item(), 0)
  local a = qkv.tensor{{1, 0}, {0, 1}}
  lu.assertAlmostEquals(qkv.cosine_similarity(a, a, 1)[1], 1, 1e-7)
end

TestErrors = {}

function TestErrors:testBadArguments()
  fails({"TokenAligner", "identity", "768 and 512"}, nn.TokenAligner, 768, 512, "identity")
  fails({"TokenAligner", "method", "'linear'", "conv"}, nn.TokenAligner, 8, 8, "conv")
  fails({"MultiHeadAttention", "d_model = 10", "h = 3"}, nn.MultiHeadAttention, 10, 3)
  fails({"Linear", "d_in", "non-negative integer", "-1"}, nn.Linear, -1, 3)   -- 0 is PyTorch's too
  fails({"Linear", "d_out", "2.5"}, nn.Linear, 3, 2.5)
  fails({"SelfAttention", "x must be a tensor", "string"}, nn.SelfAttention(4, 2), "x")
  fails({"CrossAttention", "image", "nil"}, nn.CrossAttention(4, 2), rt{2, 4})
  fails({"Sequential", "argument #2"}, nn.Sequential, nn.GELU(), 3)
  fails({"cosine_similarity", "b must be a tensor"}, qkv.cosine_similarity, rt{2}, {1, 2})
end

function TestErrors:testShapeErrorsComeFromThePrimitives()
  fails({"project", "(3, 5)", "(4, 2)"}, nn.SelfAttention(4, 2), rt{3, 5})
  local m = nn.SelfAttention(4, 2)
  fails({"load", "W_Q", "(4, 2)", "(4, 3)"}, m.load, m, nn.SelfAttention(4, 3))
  fails({"load", "no tensor 'W_K'"}, m.load, m, {W_Q = m.W_Q})
  fails({"load", "unexpected 'extra'"}, m.load, m, {W_Q = m.W_Q, W_K = m.W_K, W_V = m.W_V, extra = m.W_V})
end

os.exit(lu.LuaUnit.run(), true)
