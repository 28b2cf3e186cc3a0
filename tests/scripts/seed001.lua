-- seed001.lua: the worked examples of seed 001 against float64 values
-- computed with util.lua's plain loops, both returned and as printed (4
-- decimals).
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")

---------------------------------------------------------------- references

local X = {{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 1, 1}}
local W_Q = {{1, 0}, {0, 1}, {1, 0}, {0, 1}}
local W_K = {{0, 1}, {1, 0}, {0, 1}, {1, 0}}
local self_ref = U.attention(X, X, W_Q, W_K, W_Q)
-- cross: all three W are W_Q
local cross_ref = U.attention({X[1], X[2]}, X, W_Q, W_Q, W_Q)

local run = U.cached

---------------------------------------------------------------- self-attention

local SELF = "scripts/001_self_attention.lua"
local TestSeed001SelfAttention = {}

function TestSeed001SelfAttention:test_projections()
  local r = run(SELF).results
  -- Q = V = [[2, 0], [0, 2], [2, 2]], K = [[0, 2], [2, 0], [2, 2]]
  U.assertClose(r.Q, self_ref.Q, 0, "Q")
  U.assertClose(r.K, self_ref.K, 0, "K")
  U.assertClose(r.V, self_ref.V, 0, "V")
  lu.assertEquals(self_ref.K, {{0, 2}, {2, 0}, {2, 2}})
end

function TestSeed001SelfAttention:test_scores()
  local r = run(SELF).results
  -- [[0, 4, 4], [4, 0, 4], [4, 4, 8]], as the document says
  lu.assertEquals(self_ref.QK, {{0, 4, 4}, {4, 0, 4}, {4, 4, 8}})
  U.assertClose(r.QK, self_ref.QK, 0, "Q K^T")
  U.assertClose(r.scaled, self_ref.scaled, 1e-5, "scaled")
end

function TestSeed001SelfAttention:test_weights()
  local r = run(SELF).results
  U.assertClose(r.weights, self_ref.weights, 1e-5, "weights")
  U.assertRowsSumToOne(r.weights, true)   -- each in (0, 1)
  -- softmax([0, 2.83, 2.83]): 1 / (1 + 2 e^2.83) = 0.0287, not the document's 0.106
  lu.assertAlmostEquals(U.values(r.weights)[1][1], 1 / (1 + 2 * math.exp(2 * math.sqrt(2))), 1e-6)
end

function TestSeed001SelfAttention:test_output()
  local r = run(SELF).results
  U.assertClose(r.Attention, self_ref.out, 1e-5, "Attention")
  U.assertClose(r.fused, self_ref.out, 1e-5, "qkv.attention")
  -- not the document's [[0.894, 1.788], [0.894, 1.788], [1.154, 2.309]]
  lu.assertTrue(math.abs(U.values(r.Attention)[1][1] - 0.894) > 0.1)
end

function TestSeed001SelfAttention:test_printed()
  local out = run(SELF).stdout
  U.assertPrinted(out, "Q = X W_Q:", self_ref.Q)
  U.assertPrinted(out, "K = X W_K:", self_ref.K)
  U.assertPrinted(out, "V = X W_V:", self_ref.V)
  U.assertPrinted(out, "Q K^T:", self_ref.QK)
  U.assertPrinted(out, "Q K^T / sqrt(2):", self_ref.scaled)
  U.assertPrinted(out, "Attention weights:", self_ref.weights)
  U.assertPrinted(out, "Attention(Q, K, V) = weights V:", self_ref.out)
  lu.assertStrContains(out, "tensor([[0.0287, 0.4856, 0.4856],")
  lu.assertStrContains(out, "        [0.0529, 0.0529, 0.8943]])")
  lu.assertStrContains(out, "tensor([[1.0287, 1.9426],")
  lu.assertStrContains(out, "        [1.8943, 1.8943]])")
end

function TestSeed001SelfAttention:test_png()
  local r = run(SELF)
  U.assertPng(r, "001_self_attention.png")
  lu.assertEquals(#r.pngs, 1)
end

---------------------------------------------------------------- cross-attention

local CROSS = "scripts/001_cross_attention.lua"
local TestSeed001CrossAttention = {}

function TestSeed001CrossAttention:test_projections()
  local r = run(CROSS).results
  lu.assertEquals(cross_ref.Q, {{2, 0}, {0, 2}})
  U.assertClose(r.Q, cross_ref.Q, 0, "Q")
  U.assertClose(r.K, cross_ref.K, 0, "K")
  U.assertClose(r.V, cross_ref.V, 0, "V")
end

function TestSeed001CrossAttention:test_scores()
  local r = run(CROSS).results
  lu.assertEquals(cross_ref.QK, {{4, 0, 4}, {0, 4, 4}})
  U.assertClose(r.QK, cross_ref.QK, 0, "Q K^T")
  U.assertClose(r.scaled, cross_ref.scaled, 1e-5, "scaled")
end

function TestSeed001CrossAttention:test_weights()
  local r = run(CROSS).results
  lu.assertEquals(r.A.shape, {2, 3})
  U.assertClose(r.A, cross_ref.weights, 1e-5, "A")
  U.assertRowsSumToOne(r.A, true)   -- each in (0, 1)
  -- the document's A has exact zeros; softmax never gives one for a finite score
  local e = math.exp(2 * math.sqrt(2))
  lu.assertAlmostEquals(U.values(r.A)[1][2], 1 / (1 + 2 * e), 1e-6)
  lu.assertAlmostEquals(U.values(r.A)[1][1], e / (1 + 2 * e), 1e-6)
end

function TestSeed001CrossAttention:test_output()
  local r = run(CROSS).results
  lu.assertEquals(r.output.shape, {2, 2})
  U.assertClose(r.output, cross_ref.out, 1e-5, "output")
  U.assertClose(r.fused, cross_ref.out, 1e-5, "qkv.attention")
  -- not the document's [[2, 1], [1, 2]]
  lu.assertTrue(U.maxdiff(U.values(r.output), {{2, 1}, {1, 2}}) > 0.05)
end

function TestSeed001CrossAttention:test_printed()
  local out = run(CROSS).stdout
  U.assertPrinted(out, "1. Q = X_q W_Q:", cross_ref.Q)
  U.assertPrinted(out, "K = X_kv W_K:", cross_ref.K)
  U.assertPrinted(out, "V = X_kv W_V:", cross_ref.V)
  U.assertPrinted(out, "2. Q K^T:", cross_ref.QK)
  U.assertPrinted(out, "3. Q K^T / sqrt(2):", cross_ref.scaled)
  U.assertPrinted(out, "4. A = softmax_row(Q K^T / sqrt(2)):", cross_ref.weights)
  U.assertPrinted(out, "5. Cross-Attention Output = A V:", cross_ref.out)
  lu.assertStrContains(out, "tensor([[0.4856, 0.0287, 0.4856],")
  lu.assertStrContains(out, "tensor([[1.9426, 1.0287],\n        [1.0287, 1.9426]])")
  lu.assertStrContains(out, "Output shape: (2, 2)")
end

function TestSeed001CrossAttention:test_png()
  local r = run(CROSS)
  U.assertPng(r, "001_cross_attention.png")
  lu.assertEquals(#r.pngs, 1)
end

return {TestSeed001SelfAttention = TestSeed001SelfAttention,
        TestSeed001CrossAttention = TestSeed001CrossAttention}
