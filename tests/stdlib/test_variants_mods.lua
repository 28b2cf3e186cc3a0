-- test_variants_mods.lua: arbitrary score_mods and mask_mods against the
-- float64 reference of tests/helpers/variants_ref.lua: qkv.and_masks and
-- qkv.or_masks (nested), a score_mod, a mask_mod, causal = true and a mask
-- tensor in one call, qkv.where inside mods, captured tensors indexed with
-- expressions (bias[{h, i - j + n}], nested loads, strided views), every
-- operation a mod may use, constant and -inf scores, rows and calls with
-- no key. Both paths each time (weights = false and true).
local lu = require "luaunit"
local V = dofile("tests/helpers/variants_ref.lua")
local VA = qkv.variants

qkv.set_default_device("cpu")
qkv.manual_seed(4848)

-- a (n_q, n_k) float64 tensor of f(i, j), computed in Lua
local function grid(nq, nk, f)
  local rows = {}
  for i = 1, nq do
    local r = {}
    for j = 1, nk do r[j] = f(i, j) end
    rows[i] = r
  end
  return qkv.tensor(rows, "float64")
end

local function ids_of(n, len)
  local r = {}
  for x = 1, n do r[x] = (x - 1) // len + 1 end
  return qkv.tensor(r, "int64")
end

TestCombine = {}

function TestCombine:testAndMasks()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 150, 150, 16, 8)
  local ids = ids_of(150, 37)
  local P = V.pos({2, 3}, 150, 150)
  local I = ids:double()
  local doc = I:reshape(150, 1):eq(I:reshape(1, 150))
  V.check(q, k, v, {mask_mod = qkv.and_masks(VA.causal(), VA.document(ids))},
          {keep = doc:logical_and(P.j:le(P.i))}, "and_masks(causal, document)")
  V.check(q, k, v, {mask_mod = qkv.and_masks(VA.causal(), VA.document(ids), VA.sliding_window(20))},
          {keep = doc:logical_and(P.j:le(P.i)):logical_and(P.j:gt(P.i - 20))}, "and_masks of three")
  V.check(q, k, v, {mask_mod = qkv.and_masks(VA.prefix_lm(40))},
          {keep = P.j:le(P.i):logical_or(P.j:le(40))}, "and_masks of one")
end

function TestCombine:testOrMasks()
  -- Longformer's local window and global tokens: the first 4 keys for all,
  -- and the first 4 queries see everything
  local q, k, v = V.qkv({2, 2}, {2, 2}, 140, 150, 16, 8)
  local P = V.pos({2, 2}, 140, 150)
  local glob = function(b, h, i, j) return j:le(4) | i:le(4) end
  V.check(q, k, v, {mask_mod = qkv.or_masks(VA.sliding_window(10, {causal = false}), glob)},
          {keep = (P.i - P.j):abs():lt(10):logical_or(P.j:le(4)):logical_or(P.i:le(4))},
          "or_masks(window, global)")
end

function TestCombine:testNested()
  local q, k, v = V.qkv({3}, {3}, 150, 130, 16, 8)
  local P = V.pos({3}, 150, 130)
  -- heads differ: (causal or head 2's window of 50) and not the diagonal
  local per_head = function(b, h, i, j) return h:eq(2) & (i - j):abs():lt(50) end
  local off_diag = function(b, h, i, j) return ~i:eq(j) end
  local g = qkv.and_masks(qkv.or_masks(VA.causal(), per_head), off_diag)
  local keep = P.j:le(P.i):logical_or(P.h:eq(2):logical_and((P.i - P.j):abs():lt(50)))
    :logical_and(P.i:ne(P.j))
  V.check(q, k, v, {mask_mod = g}, {keep = keep}, "and(or(causal, head 2 window), not diagonal)")
end

function TestCombine:testEverythingInOneCall()
  -- score_mod + mask_mod + causal = true + a mask tensor, all and-ed
  local B, H, nq, nk = 2, 3, 130, 150
  local q, k, v = V.qkv({B, H}, {B, H}, nq, nk, 16, 8)
  local P = V.pos({B, H}, nq, nk)
  local sl = qkv.tensor({0.3, -0.2, 0.1}, "float64")
  for _, mshape in ipairs{{nq, nk}, {B, 1, nq, nk}, {B, H, nq, nk}} do
    local m = qkv.rand(mshape, "float64"):gt(0.2)
    local opts = {score_mod = function(s, b, h, i, j) return s + sl[h] * (j - i) / 10 end,
                  mask_mod = VA.sliding_window(60, {causal = false}), causal = true, mask = m}
    local keep = (P.i - P.j):abs():lt(60):logical_and(P.j:le(P.i + nk - nq)):logical_and(m)
    local S3 = sl:reshape(H, 1, 1)
    V.check(q, k, v, opts, {keep = keep, score = function(S) return S + S3 * (P.j - P.i) / 10 end},
            "score_mod + mask_mod + causal + mask " .. #mshape .. "-D")
  end
end

function TestCombine:testKeyPaddingMask()
  local q, k, v = V.qkv({2, 2}, {2, 2}, 100, 120, 16, 8)
  local P = V.pos({2, 2}, 100, 120)
  local pad = qkv.arange(1, 121, "float64"):reshape(1, 1, 120):gt(qkv.tensor({100, 70}, "float64"):reshape(2, 1, 1))
  V.check(q, k, v, {mask_mod = VA.causal(30), key_padding_mask = pad},
          {keep = P.j:le(P.i + 30):logical_and(pad:logical_not():reshape(2, 1, 1, 120))},
          "mask_mod + key_padding_mask")
end

---------------------------------------------------------------- qkv.where

TestWhere = {}

function TestWhere:testWhereInScoreMod()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 150, 140, 16, 8)
  local f = function(s, b, h, i, j) return qkv.where(j:gt(i), s * 0.5, s - (i - j) * 0.05) end
  V.check(q, k, v, {score_mod = f}, {score = function(S, P)
    return qkv.where(P.j:gt(P.i):logical_or(qkv.zeros_like(S, {dtype = "bool"})), S * 0.5, S - (P.i - P.j) * 0.05)
  end}, "where in score_mod")
end

function TestWhere:testWhereWithNumbersAndBooleans()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 150, 150, 16, 8)
  local P = V.pos({2, 3}, 150, 150)
  -- a boolean where: head 1 looks back, the others forward
  local g = function(b, h, i, j) return qkv.where(h:eq(1), j:le(i), j:ge(i)) end
  local keep = P.h:eq(1):logical_and(P.j:le(P.i)):logical_or(P.h:ne(1):logical_and(P.j:ge(P.i)))
  -- a numeric where of two numbers: a bonus for even keys
  local f = function(s, b, h, i, j) return s + qkv.where((j % 2):eq(0), 0.75, -0.25) end
  local bonus = grid(150, 150, function(_, j) return j % 2 == 0 and 0.75 or -0.25 end)
  V.check(q, k, v, {score_mod = f, mask_mod = g}, {keep = keep, score = function(S) return S + bonus end},
          "where of booleans and of numbers")
end

function TestWhere:testScoreMinusInfMasks()
  -- a score of -inf drops the key as a mask does; rows left with none give 0
  local q, k, v = V.qkv({2}, {2}, 100, 100, 8, 8)
  local f = function(s, b, h, i, j) return qkv.where(j:le(i - 10), s, -math.huge) end
  local out = V.check(q, k, v, {score_mod = f}, {score = function(S, P)
    return S:masked_fill(P.j:gt(P.i - 10):logical_or(qkv.zeros_like(S, {dtype = "bool"})), -math.huge)
  end}, "-inf scores")
  lu.assertEquals(out:narrow(-2, 1, 10):abs():max():item(), 0)
end

---------------------------------------------------------------- captured tensors

TestCaptured = {}

function TestCaptured:testRelativeBias()
  -- bias (H, n_q + n_k - 1) indexed by h and i - j + n_k: every element is
  -- read by some pair, the first and the last ones by the corners
  local H, nq, nk = 3, 150, 130
  local bias = qkv.randn(H, nq + nk - 1, "float64")
  local q, k, v = V.qkv({2, H}, {2, H}, nq, nk, 16, 8)
  local P = V.pos({2, H}, nq, nk)
  local B = V.take(bias, (P.h - 1) * (nq + nk - 1) + P.i - P.j + nk)
  V.check(q, k, v, {score_mod = function(s, b, h, i, j) return s + bias[{h, i - j + nk}] end},
          {score = function(S) return S + B end}, "bias[{h, i - j + n_k}]")
  for _, dt in ipairs{"float32", "float16", "bfloat16"} do
    local bd = bias:to(dt)
    local Bd = V.take(bd:double(), (P.h - 1) * (nq + nk - 1) + P.i - P.j + nk)
    V.check(q, k, v, {score_mod = function(s, b, h, i, j) return s + bd[{h, i - j + nk}] end},
            {score = function(S) return S + Bd end}, "bias of " .. dt)
  end
end

function TestCaptured:testPerQueryAndDenseBias()
  local nq, nk = 120, 140
  local q, k, v = V.qkv({2, 2}, {2, 2}, nq, nk, 16, 8)
  local P = V.pos({2, 2}, nq, nk)
  local t = qkv.randn(2, 2, nq, "float64")           -- t[{b, h, i}]
  local M = qkv.randn(nk, nq, "float64")
  local D = M:t()                                    -- a strided (n_q, n_k) view
  local f = function(s, b, h, i, j) return s + t[{b, h, i}] * 2 + D[{i, j}] end
  local T = V.take(t, ((P.b - 1) * 2 + P.h - 1) * nq + P.i)
  V.check(q, k, v, {score_mod = f}, {score = function(S) return S + T * 2 + D:contiguous() end},
          "t[{b, h, i}] and a transposed D[{i, j}]")
end

function TestCaptured:testNestedLoadsAndIntegerTensors()
  -- a per-document bias: emb[{h, doc[j]}], doc an int32 tensor, and a
  -- mask of documents from int64 ids with a narrowed (offset) view
  local n, H = 150, 2
  local doc = ids_of(n, 45):to("int32")
  local emb = qkv.randn(H, 4, "float64")
  local big = qkv.cat({qkv.tensor({7, 7, 7}, "int64"), ids_of(n, 30)}, 1)
  local ids = big:narrow(1, 4, n)
  local q, k, v = V.qkv({H}, {H}, n, n, 16, 8)
  local P = V.pos({H}, n, n)
  local f = function(s, b, h, i, j) return s + emb[{h, doc[j]}] end
  local g = function(b, h, i, j) return ids[i]:eq(ids[j]) | j:eq(1) end
  local E = V.take(emb, (P.h - 1) * 4 + V.take(doc:double(), P.j))
  local I = ids:double()
  V.check(q, k, v, {score_mod = f, mask_mod = g},
          {score = function(S) return S + E end,
           keep = I:reshape(n, 1):eq(I:reshape(1, n)):logical_or(P.j:eq(1))}, "nested loads")
end

function TestCaptured:testIndexOutOfRangeIsAnError()
  -- bias[{h, i - j + n_k}] with a bias one too short: the corner pair
  -- (i = n_q, j = 1) reads past it, an error on both paths, never a read
  local H, nq, nk = 2, 70, 80
  local bias = qkv.randn(H, nq + nk - 2, "float64")
  local q, k, v = V.qkv({H}, {H}, nq, nk, 8, 8)
  for _, w in ipairs{false, true} do
    V.raises(function()
      return qkv.attention(q, k, v, {score_mod = function(s, b, h, i, j) return s + bias[{h, i - j + nk}] end,
                                     weights = w})
    end, {"attention", "score_mod"}, "out of range, weights = " .. tostring(w))
  end
end

---------------------------------------------------------------- operations

TestOps = {}

-- each score_mod with its tensor form (S the scores, P the positions, X
-- a grid of Lua values where tensors lack the op)
local function opcases(nq, nk)
  local R = {}
  R[#R + 1] = {"log sqrt abs",
    function(s, b, h, i, j) return s + ((j - i):abs() + 1):log() * 0.1 - j:sqrt() * 0.05 end,
    function(S, P) return S + ((P.j - P.i):abs() + 1):log() * 0.1 - P.j:sqrt() * 0.05 end}
  R[#R + 1] = {"sigmoid sin cos /",
    function(s, b, h, i, j) return s * (h / 4):sigmoid() + (i * 0.1):sin() - (j * 0.07):cos() end,
    function(S, P) return S * (P.h / 4):sigmoid() + (P.i * 0.1):sin() - (P.j * 0.07):cos() end}
  R[#R + 1] = {"relu minimum maximum clamp ^",
    function(s, b, h, i, j) return (s - 0.5):relu() + s:minimum(0.3):maximum(-0.7) + s:clamp(-1, 1) ^ 2 end,
    function(S) return (S - 0.5):relu() + S:minimum(0.3):maximum(-0.7) + S:clamp(-1, 1):pow(2) end}
  R[#R + 1] = {"exp tanh unary -",
    function(s, b, h, i, j) return -(-s):exp() * 0.01 + (s * 2):tanh() end,
    function(S) return -(-S):exp() * 0.01 + (S * 2):tanh() end}
  -- // and % as Lua's (floor), negative operands included
  local X = grid(nq, nk, function(i, j) return ((i // 7) % 3) * 0.2 - ((j - i) % 5) / 5 + ((j - i) // 9) * 0.01 end)
  R[#R + 1] = {"// and %",
    function(s, b, h, i, j) return s + ((i // 7) % 3) * 0.2 - ((j - i) % 5) / 5 + ((j - i) // 9) * 0.01 end,
    function(S) return S + X end}
  R[#R + 1] = {"numbers first", function(s, b, h, i, j) return 2 * s - 1 / (1 + j) end,
    function(S, P) return S * 2 - (P.j + 1):pow(-1) end}
  R[#R + 1] = {"a constant", function(s, b, h, i, j) return 0 end, function(S) return S * 0 end}
  R[#R + 1] = {"the score alone", function(s, b, h, i, j) return s end, function(S) return S end}
  return R
end

function TestOps:testEveryOperation()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 130, 150, 16, 8)
  for _, c in ipairs(opcases(130, 150)) do
    V.check(q, k, v, {score_mod = c[2]}, {score = c[3]}, c[1])
  end
end

function TestOps:testComparisonsInMasks()
  local q, k, v = V.qkv({3}, {3}, 150, 150, 8, 8)
  local P = V.pos({3}, 150, 150)
  local cases = {
    {"lt", function(b, h, i, j) return j:lt(i) end, P.j:lt(P.i)},
    {"ge ne", function(b, h, i, j) return j:ge(i - 30) & j:ne(i) end, P.j:ge(P.i - 30):logical_and(P.j:ne(P.i))},
    {"gt le |", function(b, h, i, j) return j:gt(i + 50) | j:le(5) end, P.j:gt(P.i + 50):logical_or(P.j:le(5))},
    {"eq of chunks", function(b, h, i, j) return (i // 16):eq(j // 16) end,
     grid(150, 150, function(i, j) return (i // 16 == j // 16) and 1 or 0 end):ne(0)},
    {"~ of h", function(b, h, i, j) return ~(h:eq(2) & j:gt(i)) end,
     P.h:eq(2):logical_and(P.j:gt(P.i)):logical_not()},
    {"logical methods", function(b, h, i, j) return j:le(i):logical_and(j:gt(i - 9)):logical_or(i:eq(1)) end,
     P.j:le(P.i):logical_and(P.j:gt(P.i - 9)):logical_or(P.i:eq(1))},
  }
  for _, c in ipairs(cases) do V.check(q, k, v, {mask_mod = c[2]}, {keep = c[3]}, c[1]) end
end

-- index arithmetic the CPU evaluates as lines, c + d x on each row of a
-- tile (times or over a number per row), where only lines and the float
-- score read it: the same values as the ops' own, also where a mask or a
-- load reads the same index value and a line must give its row too
function TestOps:testIndexArithmeticAsLines()
  local B, H, nq, nk = 2, 3, 130, 150
  local P = V.pos({B, H}, nq, nk)
  local sl = qkv.tensor({0.37, -0.21, 0.113}, "float64")
  local S3 = sl:reshape(H, 1, 1)
  local bias = qkv.randn(H, nq + nk, "float64")
  local Bi, Hi = P.b, P.h
  local cases = {
    {"slope (j - i)", function(s, b, h, i, j) return s + sl[h] * (j - i) end,
     function(S) return S + S3 * (P.j - P.i) end},
    {"(i - j + 7) / 4 - (b + h)", function(s, b, h, i, j) return (i - j + 7) / 4 - (b + h) + s end,
     function(S) return S + (P.i - P.j + 7) / 4 - (Bi + Hi) end},
    {"-(slope (j - i)) / 3", function(s, b, h, i, j) return s - (-(j - i) * sl[h]) / 3 end,
     function(S) return S - (-(P.j - P.i) * S3) / 3 end},
    {"j - i + 0.5 (not whole)", function(s, b, h, i, j) return s * 0.1 * (j - i + 0.5) end,
     function(S) return S * 0.1 * (P.j - P.i + 0.5) end},
    {"a line read by a load too", function(s, b, h, i, j) return s + sl[h] * (i - j) + bias[{h, i - j + nk}] end,
     function(S) return S + S3 * (P.i - P.j) + V.take(bias, (P.h - 1) * (nq + nk) + P.i - P.j + nk) end},
  }
  local window = function(b, h, i, j) return (j - i):abs():lt(40) end
  local keep = (P.j - P.i):abs():lt(40)
  for _, dt in ipairs{"float32", "float64"} do
    local q, k, v = V.qkv({B, H}, {B, H}, nq, nk, 16, 8, dt)
    local bm = qkv.block_mask(window, nil, nil, nq, nk, {block = 16})
    for _, c in ipairs(cases) do
      V.check(q, k, v, {score_mod = c[2]}, {score = c[3]}, c[1] .. " " .. dt)
      V.check(q, k, v, {score_mod = c[2], mask_mod = window}, {score = c[3], keep = keep},
              c[1] .. " and a window over j - i, " .. dt)
      V.check(q, k, v, {score_mod = c[2], block_mask = bm}, {score = c[3], keep = keep},
              c[1] .. " and a block mask, " .. dt)
    end
  end
end

-- random index arithmetic (i, j, b, h and constants under + - * / and
-- negation), added to the score or scaling it: the one Lua function runs
-- on the tracer's symbols and on the reference's float64 tensors alike
local function random_term(rnd, depth)
  local leaves = {"i", "j", "b", "h", "int", "float"}
  if depth == 0 or rnd(3) == 1 then
    local l = leaves[rnd(#leaves)]
    if l == "int" then local c = rnd(11) - 6; return function() return c end, tostring(c) end
    if l == "float" then local c = rnd(100) / 37; return function() return c end, ("%.4f"):format(c) end
    return function(b, h, i, j) return ({b = b, h = h, i = i, j = j})[l] end, l
  end
  local fa, sa = random_term(rnd, depth - 1)
  local op = rnd(6)
  if op == 6 then return function(...) return -fa(...) end, "-(" .. sa .. ")" end
  local fb, sb = random_term(rnd, depth - 1)
  if op == 1 then return function(...) return fa(...) + fb(...) end, "(" .. sa .. " + " .. sb .. ")" end
  if op == 2 then return function(...) return fa(...) - fb(...) end, "(" .. sa .. " - " .. sb .. ")" end
  if op == 3 then return function(...) return fa(...) * fb(...) end, "(" .. sa .. " * " .. sb .. ")" end
  if op == 4 then     -- by a number never 0
    local c = ({2, 3, -4, 0.5, 7})[rnd(5)]
    return function(...) return fa(...) / c end, "(" .. sa .. " / " .. c .. ")"
  end
  return function(b, h, i, j, ...) return fa(b, h, i, j, ...) / (h + 0.5) end, "(" .. sa .. " / (h + 0.5))"
end

function TestOps:testRandomIndexArithmetic()
  local B, H, nq, nk = 2, 3, 70, 90
  local P = V.pos({B, H}, nq, nk)
  local seed = 4242
  local rnd = (function()
    local x = seed
    return function(n) x = (x * 1103515245 + 12345) % 2147483648; return x % n + 1 end
  end)()
  local window = function(b, h, i, j) return (j - i):abs():lt(25) end
  local keep = (P.j - P.i):abs():lt(25)
  local q32, k32, v32 = V.qkv({B, H}, {B, H}, nq, nk, 16, 8, "float32")
  local q64, k64, v64 = q32:double(), k32:double(), v32:double()
  for n = 1, 40 do
    local g, text = random_term(rnd, 3)
    -- small, so that the softmax stays away from overflow whatever g is
    local scaled = rnd(2) == 1
    local f = scaled and function(s, b, h, i, j) return s * (1 + 1e-4 * g(b, h, i, j)) end
                      or function(s, b, h, i, j) return s + 1e-3 * g(b, h, i, j) end
    local ref = function(S) return f(S, P.b, P.h, P.i, P.j) end
    local what = ("random %d: %s %s"):format(n, scaled and "s * (1 + 1e-4 g)" or "s + 1e-3 g", text)
    for _, t in ipairs{{q32, k32, v32}, {q64, k64, v64}} do
      V.check(t[1], t[2], t[3], {score_mod = f}, {score = ref}, what)
      if n % 4 == 0 then
        V.check(t[1], t[2], t[3], {score_mod = f, mask_mod = window}, {score = ref, keep = keep},
                what .. " with a window")
      end
    end
  end
end

function TestOps:testScoreModOfTheScaledScore()
  local q, k, v = V.qkv({2}, {2}, 90, 110, 16, 8)
  V.check(q, k, v, {score_mod = function(s, b, h, i, j) return s * s:abs():sqrt() end, scale = 0.37},
          {scale = 0.37, score = function(S) return S * S:abs():sqrt() end}, "scale 0.37")
end

function TestOps:testIdentityModsEqualPlainAttention()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 150, 130, 16, 8)
  local plain = qkv.attention(q, k, v, {weights = false})
  local out = qkv.attention(q, k, v, {score_mod = function(s, b, h, i, j) return s end,
                                      mask_mod = function(b, h, i, j) return j:ge(1) end, weights = false})
  V.near(out, plain, 1e-12, "identity mods")
end

---------------------------------------------------------------- no key

TestNoKey = {}

function TestNoKey:testEveryKeyMasked()
  for _, bq in ipairs{{}, {2, 3}} do
    local q, k, v = V.qkv(bq, bq, 80, 100, 8, 8)
    local out = qkv.attention(q, k, v, {mask_mod = function(b, h, i, j) return j:lt(0) end, weights = false})
    lu.assertEquals(out:abs():max():item(), 0)
    local out2, W = qkv.attention(q, k, v, {mask_mod = function(b, h, i, j) return j:lt(0) end})
    lu.assertEquals(out2:abs():max():item(), 0)
    lu.assertEquals(W:abs():max():item(), 0)
    local _, Wr = V.ref(q, k, v)
    lu.assertEquals(W.shape, Wr.shape)
  end
end

function TestNoKey:testSomeHeadsEmpty()
  -- head 2 sees nothing; the others a window
  local q, k, v = V.qkv({2, 3}, {2, 3}, 150, 150, 8, 8)
  local P = V.pos({2, 3}, 150, 150)
  local g = function(b, h, i, j) return h:ne(2) & (i - j):abs():lt(h * 20) end
  local out = V.check(q, k, v, {mask_mod = g},
                      {keep = P.h:ne(2):logical_and((P.i - P.j):abs():lt(P.h * 20))}, "head 2 empty")
  lu.assertEquals(out:select(2, 2):abs():max():item(), 0)
end

function TestNoKey:testEmptyLengths()
  local q, k, v = V.qkv({2}, {2}, 0, 10, 8, 8)
  local out = qkv.attention(q, k, v, {mask_mod = VA.causal(), weights = false})
  lu.assertEquals(out.shape, {2, 0, 8})
  q, k, v = V.qkv({2}, {2}, 10, 0, 8, 8)
  out = qkv.attention(q, k, v, {mask_mod = VA.causal(), weights = false})
  lu.assertEquals(out.shape, {2, 10, 8})
  lu.assertEquals(out:abs():sum():item(), 0)
end

os.exit(lu.LuaUnit.run(), true)
