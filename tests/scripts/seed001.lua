-- seed001.lua: the worked examples of seed 001 against float64 values
-- computed here with plain loops, both returned and as printed (4 decimals).
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")

---------------------------------------------------------------- references

local function matmul(a, b)
  local c = {}
  for i = 1, #a do
    c[i] = {}
    for j = 1, #b[1] do
      local s = 0
      for k = 1, #b do s = s + a[i][k] * b[k][j] end
      c[i][j] = s
    end
  end
  return c
end

local function transpose(a)
  local t = {}
  for j = 1, #a[1] do
    t[j] = {}
    for i = 1, #a do t[j][i] = a[i][j] end
  end
  return t
end

local function scale(a, s)
  local c = {}
  for i = 1, #a do
    c[i] = {}
    for j = 1, #a[i] do c[i][j] = a[i][j] * s end
  end
  return c
end

local function softmax_rows(a)
  local c = {}
  for i = 1, #a do
    local m, sum = -math.huge, 0
    for _, v in ipairs(a[i]) do m = math.max(m, v) end
    c[i] = {}
    for j, v in ipairs(a[i]) do c[i][j] = math.exp(v - m); sum = sum + c[i][j] end
    for j = 1, #c[i] do c[i][j] = c[i][j] / sum end
  end
  return c
end

-- every intermediate of softmax(Q K^T / sqrt(d_k)) V
local function reference(Xq, Xkv, W_Q, W_K, W_V)
  local r = {Q = matmul(Xq, W_Q), K = matmul(Xkv, W_K), V = matmul(Xkv, W_V)}
  r.QK = matmul(r.Q, transpose(r.K))
  r.scaled = scale(r.QK, 1 / math.sqrt(#W_K[1]))
  r.weights = softmax_rows(r.scaled)
  r.out = matmul(r.weights, r.V)
  return r
end

local X = {{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 1, 1}}
local W_Q = {{1, 0}, {0, 1}, {1, 0}, {0, 1}}
local W_K = {{0, 1}, {1, 0}, {0, 1}, {1, 0}}
local self_ref = reference(X, X, W_Q, W_K, W_Q)
-- cross: all three W are W_Q
local cross_ref = reference({X[1], X[2]}, X, W_Q, W_Q, W_Q)

---------------------------------------------------------------- helpers

-- the numbers of the tensor printed right after `title`
local function printed(stdout, title)
  local s = stdout:find(title, 1, true)
  lu.assertNotNil(s, "not printed: " .. title)
  local body = stdout:sub(s + #title):match("^%s*(tensor%b())")
  lu.assertNotNil(body, "no tensor after " .. title)
  return U.numbers(body)
end

local function flat(t, out)
  out = out or {}
  for _, v in ipairs(t) do
    if type(v) == "table" then flat(v, out) else out[#out + 1] = v end
  end
  return out
end

-- the printed 4-decimal strings are those of the float64 reference
local function assertPrinted(stdout, title, ref)
  local got, want = printed(stdout, title), flat(ref)
  lu.assertEquals(#got, #want, title)
  for i = 1, #want do
    lu.assertEquals(string.format("%.4f", got[i]), string.format("%.4f", want[i]), title .. " #" .. i)
  end
end

local function assertClose(t, ref, tol, what)
  local v = U.values(t)
  lu.assertEquals(#v, #ref, what)
  lu.assertTrue(U.maxdiff(v, ref) <= (tol or 1e-5), what .. ": off by " .. U.maxdiff(v, ref))
end

local function assertRowsSumToOne(t)
  for i, row in ipairs(U.values(t)) do
    local s = 0
    for _, w in ipairs(row) do
      lu.assertTrue(w > 0 and w < 1, "weight outside (0, 1): " .. w)
      s = s + w
    end
    lu.assertAlmostEquals(s, 1, 1e-5, "row " .. i)
  end
end

local function assertPNG(r, name, min)
  local found = false
  for _, f in ipairs(r.pngs) do found = found or f == name end
  lu.assertTrue(found, name .. " was not written; got " .. table.concat(r.pngs, ", "))
  local img = qkv.plot.read_png(r.out .. "/" .. name)
  local w, h = img.width or img.w, img.height or img.h
  lu.assertTrue(w >= min and h >= min and w <= 4000 and h <= 4000,
                name .. " is " .. tostring(w) .. "x" .. tostring(h))
end

local runs = {}
local function run(script)
  runs[script] = runs[script] or U.run(script)
  return runs[script]
end

---------------------------------------------------------------- self-attention

local SELF = "scripts/001_self_attention.lua"
local TestSeed001SelfAttention = {}

function TestSeed001SelfAttention:test_projections()
  local r = run(SELF).results
  -- Q = V = [[2, 0], [0, 2], [2, 2]], K = [[0, 2], [2, 0], [2, 2]]
  assertClose(r.Q, self_ref.Q, 0, "Q")
  assertClose(r.K, self_ref.K, 0, "K")
  assertClose(r.V, self_ref.V, 0, "V")
  lu.assertEquals(self_ref.K, {{0, 2}, {2, 0}, {2, 2}})
end

function TestSeed001SelfAttention:test_scores()
  local r = run(SELF).results
  -- [[0, 4, 4], [4, 0, 4], [4, 4, 8]], as the document says
  lu.assertEquals(self_ref.QK, {{0, 4, 4}, {4, 0, 4}, {4, 4, 8}})
  assertClose(r.QK, self_ref.QK, 0, "Q K^T")
  assertClose(r.scaled, self_ref.scaled, 1e-5, "scaled")
end

function TestSeed001SelfAttention:test_weights()
  local r = run(SELF).results
  assertClose(r.weights, self_ref.weights, 1e-5, "weights")
  assertRowsSumToOne(r.weights)
  -- softmax([0, 2.83, 2.83]): 1 / (1 + 2 e^2.83) = 0.0287, not the document's 0.106
  lu.assertAlmostEquals(U.values(r.weights)[1][1], 1 / (1 + 2 * math.exp(2 * math.sqrt(2))), 1e-6)
end

function TestSeed001SelfAttention:test_output()
  local r = run(SELF).results
  assertClose(r.Attention, self_ref.out, 1e-5, "Attention")
  assertClose(r.fused, self_ref.out, 1e-5, "qkv.attention")
  -- not the document's [[0.894, 1.788], [0.894, 1.788], [1.154, 2.309]]
  lu.assertTrue(math.abs(U.values(r.Attention)[1][1] - 0.894) > 0.1)
end

function TestSeed001SelfAttention:test_printed()
  local out = run(SELF).stdout
  assertPrinted(out, "Q = X W_Q:", self_ref.Q)
  assertPrinted(out, "K = X W_K:", self_ref.K)
  assertPrinted(out, "V = X W_V:", self_ref.V)
  assertPrinted(out, "Q K^T:", self_ref.QK)
  assertPrinted(out, "Q K^T / sqrt(2):", self_ref.scaled)
  assertPrinted(out, "Attention weights:", self_ref.weights)
  assertPrinted(out, "Attention(Q, K, V) = weights V:", self_ref.out)
  lu.assertStrContains(out, "tensor([[0.0287, 0.4856, 0.4856],")
  lu.assertStrContains(out, "        [0.0529, 0.0529, 0.8943]])")
  lu.assertStrContains(out, "tensor([[1.0287, 1.9426],")
  lu.assertStrContains(out, "        [1.8943, 1.8943]])")
end

function TestSeed001SelfAttention:test_png()
  local r = run(SELF)
  assertPNG(r, "001_self_attention.png", 200)
  lu.assertEquals(#r.pngs, 1)
  U.clean(r)
end

---------------------------------------------------------------- cross-attention

local CROSS = "scripts/001_cross_attention.lua"
local TestSeed001CrossAttention = {}

function TestSeed001CrossAttention:test_projections()
  local r = run(CROSS).results
  lu.assertEquals(cross_ref.Q, {{2, 0}, {0, 2}})
  assertClose(r.Q, cross_ref.Q, 0, "Q")
  assertClose(r.K, cross_ref.K, 0, "K")
  assertClose(r.V, cross_ref.V, 0, "V")
end

function TestSeed001CrossAttention:test_scores()
  local r = run(CROSS).results
  lu.assertEquals(cross_ref.QK, {{4, 0, 4}, {0, 4, 4}})
  assertClose(r.QK, cross_ref.QK, 0, "Q K^T")
  assertClose(r.scaled, cross_ref.scaled, 1e-5, "scaled")
end

function TestSeed001CrossAttention:test_weights()
  local r = run(CROSS).results
  lu.assertEquals(r.A.shape, {2, 3})
  assertClose(r.A, cross_ref.weights, 1e-5, "A")
  assertRowsSumToOne(r.A)
  -- the document's A has exact zeros; softmax never gives one for a finite score
  local e = math.exp(2 * math.sqrt(2))
  lu.assertAlmostEquals(U.values(r.A)[1][2], 1 / (1 + 2 * e), 1e-6)
  lu.assertAlmostEquals(U.values(r.A)[1][1], e / (1 + 2 * e), 1e-6)
end

function TestSeed001CrossAttention:test_output()
  local r = run(CROSS).results
  lu.assertEquals(r.output.shape, {2, 2})
  assertClose(r.output, cross_ref.out, 1e-5, "output")
  assertClose(r.fused, cross_ref.out, 1e-5, "qkv.attention")
  -- not the document's [[2, 1], [1, 2]]
  lu.assertTrue(U.maxdiff(U.values(r.output), {{2, 1}, {1, 2}}) > 0.05)
end

function TestSeed001CrossAttention:test_printed()
  local out = run(CROSS).stdout
  assertPrinted(out, "1. Q = X_q W_Q:", cross_ref.Q)
  assertPrinted(out, "K = X_kv W_K:", cross_ref.K)
  assertPrinted(out, "V = X_kv W_V:", cross_ref.V)
  assertPrinted(out, "2. Q K^T:", cross_ref.QK)
  assertPrinted(out, "3. Q K^T / sqrt(2):", cross_ref.scaled)
  assertPrinted(out, "4. A = softmax_row(Q K^T / sqrt(2)):", cross_ref.weights)
  assertPrinted(out, "5. Cross-Attention Output = A V:", cross_ref.out)
  lu.assertStrContains(out, "tensor([[0.4856, 0.0287, 0.4856],")
  lu.assertStrContains(out, "tensor([[1.9426, 1.0287],\n        [1.0287, 1.9426]])")
  lu.assertStrContains(out, "Output shape: (2, 2)")
end

function TestSeed001CrossAttention:test_png()
  local r = run(CROSS)
  assertPNG(r, "001_cross_attention.png", 200)
  lu.assertEquals(#r.pngs, 1)
  U.clean(r)
end

return {TestSeed001SelfAttention = TestSeed001SelfAttention,
        TestSeed001CrossAttention = TestSeed001CrossAttention}
