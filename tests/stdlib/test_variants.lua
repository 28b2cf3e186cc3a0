-- test_variants.lua: every variant of the library (qkv.variants: causal,
-- causal_end, sliding_window, document, document_lengths, prefix_lm,
-- alibi, softcap, t5_bias, relative_buckets) against the float64
-- reference of tests/helpers/variants_ref.lua, whose masks and biases are
-- built here from plain tensor ops; both paths (weights = false, the
-- fused kernel; weights = true, out and W), n_q ≠ n_k, sizes that cross
-- the kernels' 64-blocks; every batch rank; float64, float32, float16 and
-- bfloat16. test_variants_mods.lua has the combinations, _blocks the
-- block masks, _grad the gradients, _device the fake device.
local lu = require "luaunit"
local V = dofile("tests/helpers/variants_ref.lua")
local S = dofile("tests/helpers/shell.lua")
local VA = qkv.variants

qkv.set_default_device("cpu")            -- the fused CPU kernels; _device has the GPU's
qkv.manual_seed(48)

-- document ids (n): runs of random lengths 1..maxlen, numbered from 1
local function runs(n, maxlen, seed)
  math.randomseed(seed)
  local ids, d = {}, 1
  while #ids < n do
    for _ = 1, math.random(1, maxlen) do if #ids < n then ids[#ids + 1] = d end end
    d = d + 1
  end
  return ids
end

-- T5's bucket of a relative position rel = j - i, from the definition
-- (Raffel et al.; as Hugging Face's T5Attention._relative_position_bucket)
local function t5_bucket(rel, nb, md, bidirectional)
  local ret, n = 0, nil
  if bidirectional then
    nb = nb // 2
    if rel > 0 then ret = nb end
    n = math.abs(rel)
  else
    n = math.max(-rel, 0)
  end
  local exact = nb // 2
  if n < exact then return ret + n end
  local large = exact + math.floor(math.log(n / exact) / math.log(md / exact) * (nb - exact))
  return ret + math.min(large, nb - 1)
end

-- (n_q, n_k) float64 tensor of f(j - i), f computed in Lua per relative position
local function by_rel(nq, nk, f)
  local vals = {}
  for r = 1 - nq, nk - 1 do vals[#vals + 1] = f(r) end
  local P = V.pos({}, nq, nk)
  return V.take(qkv.tensor(vals, "float64"), P.j - P.i + nq)
end

TestLibrary = {}

function TestLibrary:testCausalOffsets()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 150, 130, 16, 8)
  for _, off in ipairs{0, 7, -5, 40} do
    local P = V.pos({2, 3}, 150, 130)
    V.check(q, k, v, {mask_mod = VA.causal(off)}, {keep = P.j:le(P.i + off)}, "causal(" .. off .. ")")
  end
  -- causal() is offset 0: the top-left diagonal, PyTorch's is_causal
  local P = V.pos({2, 3}, 150, 130)
  V.check(q, k, v, {mask_mod = VA.causal()}, {keep = P.j:le(P.i)}, "causal()")
end

-- a score_mod of qkv.where with the constant before the score: the
-- weights path replays it on (b, h, n_q, n_k) scores, where where's three
-- shapes broadcast in two steps (the constant's () beside (n_q, n_k) first:
-- "do not broadcast" before)
function TestLibrary:testWhereWithTheScoreLast()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 40, 40, 16, 8)
  local P = V.pos({2, 3}, 40, 40)
  V.check(q, k, v, {score_mod = function(s, _, _, i, j) return qkv.where(j:gt(i), -math.huge, s) end},
          {keep = P.j:le(P.i)}, "where(j > i, -inf, s)")
end

function TestLibrary:testCausalOffsetEmptiesRows()
  -- j <= i - 70: the first 70 queries see no key and give 0
  local q, k, v = V.qkv({3}, {3}, 100, 90, 8, 8)
  local out = qkv.attention(q, k, v, {mask_mod = VA.causal(-70), weights = false})
  lu.assertEquals(out:narrow(-2, 1, 70):abs():max():item(), 0)
  lu.assertTrue(out:narrow(-2, 71, 30):abs():max():item() > 0)
  local P = V.pos({3}, 100, 90)
  V.check(q, k, v, {mask_mod = VA.causal(-70)}, {keep = P.j:le(P.i - 70)}, "causal(-70)")
end

function TestLibrary:testCausalEnd()
  for _, n in ipairs{{100, 170}, {170, 100}, {129, 129}} do
    local nq, nk = n[1], n[2]
    local q, k, v = V.qkv({2, 2}, {2, 2}, nq, nk, 16, 16)
    local P = V.pos({2, 2}, nq, nk)
    local what = ("causal_end(%d, %d)"):format(nq, nk)
    local want = V.check(q, k, v, {mask_mod = VA.causal_end(nq, nk)},
                         {keep = P.j:le(P.i + nk - nq)}, what)
    -- the same as attention's own causal = true (the bottom-right diagonal)
    local plain = qkv.attention(q, k, v, {causal = true, weights = false})
    V.near(plain, want, 1e-12, what .. " = causal = true")
  end
end

function TestLibrary:testSlidingWindowCausal()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 150, 150, 16, 8)
  local P = V.pos({2, 3}, 150, 150)
  for _, w in ipairs{1, 20, 64, 100} do
    local keep = P.j:le(P.i):logical_and(P.j:gt(P.i - w))
    V.check(q, k, v, {mask_mod = VA.sliding_window(w)}, {keep = keep}, "sliding_window(" .. w .. ")")
    V.check(q, k, v, {mask_mod = VA.sliding_window(w, {causal = true})}, {keep = keep},
            "sliding_window(" .. w .. ", causal)")
  end
end

function TestLibrary:testSlidingWindowBothSides()
  local q, k, v = V.qkv({2}, {2}, 140, 150, 16, 8)
  local P = V.pos({2}, 140, 150)
  for _, w in ipairs{1, 30, 70} do
    local keep = (P.i - P.j):abs():lt(w)
    V.check(q, k, v, {mask_mod = VA.sliding_window(w, {causal = false})}, {keep = keep},
            "sliding_window(" .. w .. ", both sides)")
  end
end

function TestLibrary:testDocumentIds()
  local n = 150
  for _, dt in ipairs{"int64", "int32", "float64"} do
    local ids = qkv.tensor(runs(n, 50, 1), dt)
    local q, k, v = V.qkv({2, 3}, {2, 3}, n, n, 16, 8)
    local keep = ids:double():reshape(n, 1):eq(ids:double():reshape(1, n))
    V.check(q, k, v, {mask_mod = VA.document(ids)}, {keep = keep}, "document ids " .. dt)
  end
end

function TestLibrary:testDocumentQueryAndKeyIds()
  -- queries from one stream, keys from another (n_q ≠ n_k); some queries'
  -- document has no key at all and gives 0
  local qids = qkv.tensor(runs(100, 30, 2), "int64")
  local kv = runs(150, 40, 3)
  for x = 1, #kv do if kv[x] == 2 then kv[x] = 99 end end
  local kids = qkv.tensor(kv, "int64")
  local q, k, v = V.qkv({3}, {3}, 100, 150, 16, 8)
  local keep = qids:double():reshape(100, 1):eq(kids:double():reshape(1, 150))
  lu.assertFalse(keep:any(-1):all():item(), "the test wants a query with no key")
  V.check(q, k, v, {mask_mod = VA.document(qids, kids)}, {keep = keep}, "document(q ids, kv ids)")
end

function TestLibrary:testDocumentBatchedIds()
  -- ids (B, n): each batch item packs its own documents; b is the index
  -- over the dims before H, so with (2, 2, H) batch dims b runs 1..4
  local n = 130
  for _, batch in ipairs{{3, 2}, {2, 2, 3}} do
    local nB = #batch == 2 and batch[1] or batch[1] * batch[2]
    local rows = {}
    for b = 1, nB do rows[b] = runs(n, 25 + 20 * b, 10 + b) end
    local ids = qkv.tensor(rows, "int64")
    local q, k, v = V.qkv(batch, batch, n, n, 8, 8)
    local P = V.pos(batch, n, n)
    -- ids[b, i] == ids[b, j], b from P.b (batch..., 1, 1)
    local base = (P.b - 1) * n
    local keep = V.take(ids:double(), base + P.i):eq(V.take(ids:double(), base + P.j))
    V.check(q, k, v, {mask_mod = VA.document(ids)}, {keep = keep}, "document(B, n) batch " .. #batch)
  end
end

function TestLibrary:testDocumentLengths()
  local lengths = {40, 1, 70, 39}
  local q, k, v = V.qkv({2, 2}, {2, 2}, 150, 150, 16, 8)
  local ids = {}
  for d, len in ipairs(lengths) do for _ = 1, len do ids[#ids + 1] = d end end
  local I = qkv.tensor(ids, "float64")
  local keep = I:reshape(150, 1):eq(I:reshape(1, 150))
  V.check(q, k, v, {mask_mod = VA.document_lengths(lengths)}, {keep = keep}, "document_lengths")
  -- with causal = true on top: causal documents (packed causal LM)
  local P = V.pos({2, 2}, 150, 150)
  V.check(q, k, v, {mask_mod = VA.document_lengths(lengths), causal = true},
          {keep = keep:logical_and(P.j:le(P.i))}, "document_lengths + causal")
end

function TestLibrary:testPrefixLM()
  local q, k, v = V.qkv({2, 3}, {2, 3}, 150, 150, 16, 8)
  local P = V.pos({2, 3}, 150, 150)
  for _, p in ipairs{0, 30, 100, 150} do
    V.check(q, k, v, {mask_mod = VA.prefix_lm(p)}, {keep = P.j:le(P.i):logical_or(P.j:le(p))},
            "prefix_lm(" .. p .. ")")
  end
end

-- ALiBi's slopes, from the paper's code: 2^(-8h/n) for the power of two n
-- at or below H, then the odd-numbered slopes of 2n
local function slopes_of(H)
  local p = 1
  while p * 2 <= H do p = p * 2 end
  local s = {}
  for h = 1, p do s[h] = 2 ^ (-8 * h / p) end
  for x = 1, H - p do s[p + x] = 2 ^ (-8 * (2 * x - 1) / (2 * p)) end
  return s
end

function TestLibrary:testAlibiSlopes()
  local known = {
    [1] = {2 ^ -8}, [2] = {2 ^ -4, 2 ^ -8}, [4] = {2 ^ -2, 2 ^ -4, 2 ^ -6, 2 ^ -8},
    [6] = {2 ^ -2, 2 ^ -4, 2 ^ -6, 2 ^ -8, 2 ^ -1, 2 ^ -3},
  }
  for H, want in pairs(known) do
    local s = qkv.alibi_slopes(H)
    lu.assertEquals(s.dtype, "float32")
    V.near(s:double(), qkv.tensor(want, "float64"), 0, "alibi_slopes(" .. H .. ")")
  end
  for _, H in ipairs{3, 8, 12, 16} do
    V.near(qkv.alibi_slopes(H):double(), qkv.tensor(slopes_of(H), "float32"):double(), 0,
           "alibi_slopes(" .. H .. ")")
  end
end

function TestLibrary:testAlibiHeads()
  for _, H in ipairs{3, 8} do
    local q, k, v = V.qkv({2, H}, {2, H}, 140, 150, 16, 8)
    local slopes = qkv.tensor(slopes_of(H), "float32"):double():reshape(H, 1, 1)
    local function score(S, P) return S + slopes * (P.j - P.i) end
    V.check(q, k, v, {score_mod = VA.alibi(H)}, {score = score}, "alibi(" .. H .. ")")
    -- with a causal mask too, as ALiBi's decoders run
    local P = V.pos({2, H}, 140, 150)
    V.check(q, k, v, {score_mod = VA.alibi(H), mask_mod = VA.causal(10)},
            {score = score, keep = P.j:le(P.i + 10)}, "alibi(" .. H .. ") + causal(10)")
  end
end

function TestLibrary:testAlibiSlopesTensor()
  for _, dt in ipairs{"float64", "float32"} do
    local sl = qkv.tensor({0.5, -0.25, 1.5}, dt)
    local q, k, v = V.qkv({2, 3}, {2, 3}, 100, 90, 16, 8)
    local S3 = sl:double():reshape(3, 1, 1)
    V.check(q, k, v, {score_mod = VA.alibi(sl)}, {score = function(S, P) return S + S3 * (P.j - P.i) end},
            "alibi(slopes " .. dt .. ")")
  end
end

function TestLibrary:testSoftcap()
  for _, c in ipairs{0.5, 3, 30} do
    local q, k, v = V.qkv({2, 3}, {2, 3}, 130, 150, 16, 8)
    q = q * 3                                   -- scores large enough to be capped
    V.check(q, k, v, {score_mod = VA.softcap(c)}, {score = function(S) return (S / c):tanh() * c end},
            "softcap(" .. c .. ")")
  end
end

function TestLibrary:testSoftcapWithScale()
  -- score_mod sees q.k * scale: the scale is applied before it
  local q, k, v = V.qkv({3}, {3}, 80, 100, 16, 8)
  V.check(q, k, v, {score_mod = VA.softcap(2), scale = 0.9},
          {scale = 0.9, score = function(S) return (S / 2):tanh() * 2 end}, "softcap, scale 0.9")
end

function TestLibrary:testT5Bias()
  local cases = {
    {nil, 32, 128, true},
    {{num_buckets = 16, max_distance = 40, bidirectional = false}, 16, 40, false},
    {{max_distance = 20}, 8, 20, true},
  }
  for _, c in ipairs(cases) do
    local opts, nb, md, bi = c[1], c[2], c[3], c[4]
    local H = 3
    local bias = qkv.randn(H, nb, "float64")
    local q, k, v = V.qkv({2, H}, {2, H}, 150, 140, 16, 8)
    local bucket = by_rel(150, 140, function(r) return t5_bucket(r, nb, md, bi) end)
    -- bias[h, bucket + 1] as a (H, n_q, n_k) tensor
    local Hs = qkv.arange(0, H, "float64"):reshape(H, 1, 1)
    local B = V.take(bias, Hs * nb + bucket + 1)
    V.check(q, k, v, {score_mod = VA.t5_bias(bias, opts)}, {score = function(S) return S + B end},
            ("t5_bias(%d buckets, max %d, %s)"):format(nb, md, tostring(bi)))
  end
end

function TestLibrary:testT5BucketsCoverEveryBucket()
  -- the reference's buckets at these lengths reach the last one both ways
  local seen = {}
  for r = -149, 149 do seen[t5_bucket(r, 32, 128, true)] = true end
  -- (bucket 16, the first of the keys after the query, would be j - i = 0,
  -- which falls in bucket 0)
  for b = 0, 31 do lu.assertEquals(seen[b] or false, b ~= 16, "bucket " .. b) end
end

function TestLibrary:testRelativeBucketsInAScoreMod()
  -- relative_buckets as a building block: a per-head learned-style table
  -- indexed by the unidirectional bucket of j - i
  local tab = qkv.randn(2, 16, "float64")
  local q, k, v = V.qkv({2}, {2}, 120, 150, 8, 8)
  local opts = {num_buckets = 16, max_distance = 50, bidirectional = false}
  local function mod(s, b, h, i, j)
    return s + tab[{h, VA.relative_buckets(j - i, opts) + 1}]
  end
  local bucket = by_rel(120, 150, function(r) return t5_bucket(r, 16, 50, false) end)
  local B = V.take(tab, qkv.arange(0, 2, "float64"):reshape(2, 1, 1) * 16 + bucket + 1)
  V.check(q, k, v, {score_mod = mod}, {score = function(S) return S + B end}, "relative_buckets")
  -- and the bucket itself as a mask: keys within the exact range only
  local function near(b, h, i, j) return VA.relative_buckets(j - i, opts):lt(4) end
  local keep = by_rel(120, 150, function(r) return t5_bucket(r, 16, 50, false) end):lt(4)
  V.check(q, k, v, {mask_mod = near}, {keep = keep}, "relative_buckets mask")
end

---------------------------------------------------------------- dtypes

TestDtypes = {}

-- a mix of variants in dtype dt against the reference on the same
-- (rounded) inputs
local function mix(dt)
  local q, k, v = V.qkv({2, 4}, {2, 4}, 150, 130, 32, 16, dt)
  local ids = qkv.tensor(runs(130, 60, 5), "int64")
  local qids = qkv.tensor(runs(150, 60, 5), "int64")
  local P = V.pos({2, 4}, 150, 130)
  local keep = P.j:le(P.i + 5):logical_and(P.j:gt(P.i - 40))
    :logical_and(qids:double():reshape(150, 1):eq(ids:double():reshape(1, 130)))
  local sl = qkv.tensor(slopes_of(4), "float32"):double():reshape(4, 1, 1)
  local function score(S, Q) return ((S + sl * (Q.j - Q.i)) / 5):tanh() * 5 end
  local mods = {
    score_mod = function(s, b, h, i, j) return VA.softcap(5)(VA.alibi(4)(s, b, h, i, j), b, h, i, j) end,
    mask_mod = qkv.and_masks(VA.causal(5), function(b, h, i, j) return j:gt(i - 40) end,
                             VA.document(qids, ids)),
  }
  return q, k, v, mods, {keep = keep, score = score}
end

for _, dt in ipairs{"float64", "float32", "float16", "bfloat16"} do
  TestDtypes["test_" .. dt] = function()
    local q, k, v, mods, ro = mix(dt)
    V.check(q, k, v, mods, ro, dt)
  end
end

-- every library variant in every dtype, at one shape (3 heads, 150 x 130)
function TestDtypes:testEveryVariantInEveryDtype()
  local nq, nk, H = 150, 130, 3
  local P = V.pos({H}, nq, nk)
  local qids, kids = qkv.tensor(runs(nq, 50, 7), "int64"), qkv.tensor(runs(nk, 50, 7), "int64")
  local sl = qkv.tensor(slopes_of(H), "float32"):double():reshape(H, 1, 1)
  local bias = qkv.randn(H, 32, "float64")
  local bucket = by_rel(nq, nk, function(r) return t5_bucket(r, 32, 128, true) end)
  local TB = V.take(bias, qkv.arange(0, H, "float64"):reshape(H, 1, 1) * 32 + bucket + 1)
  local cases = {
    {"causal(3)", {mask_mod = VA.causal(3)}, {keep = P.j:le(P.i + 3)}},
    {"causal_end", {mask_mod = VA.causal_end(nq, nk)}, {keep = P.j:le(P.i + nk - nq)}},
    {"sliding_window(30)", {mask_mod = VA.sliding_window(30)},
     {keep = P.j:le(P.i):logical_and(P.j:gt(P.i - 30))}},
    {"sliding_window(30, both)", {mask_mod = VA.sliding_window(30, {causal = false})},
     {keep = (P.i - P.j):abs():lt(30)}},
    {"document", {mask_mod = VA.document(qids, kids)},
     {keep = qids:double():reshape(nq, 1):eq(kids:double():reshape(1, nk))}},
    {"prefix_lm(20)", {mask_mod = VA.prefix_lm(20)}, {keep = P.j:le(P.i):logical_or(P.j:le(20))}},
    -- the weights path rounds the new scores to the half dtype: ALiBi's
    -- reach 30 here (keys after the query, no causal mask), where
    -- bfloat16's step is 0.125
    {"alibi(3)", {score_mod = VA.alibi(H)}, {score = function(S) return S + sl * (P.j - P.i) end},
     {float16 = {2e-3, 1.5e-2}, bfloat16 = {1.6e-2, 0.12}}},
    {"softcap(1.5)", {score_mod = VA.softcap(1.5)}, {score = function(S) return (S / 1.5):tanh() * 1.5 end}},
    {"t5_bias", {score_mod = VA.t5_bias(bias)}, {score = function(S) return S + TB end}},
  }
  for _, dt in ipairs{"float32", "float16", "bfloat16"} do
    local q, k, v = V.qkv({H}, {H}, nq, nk, 16, 8, dt)
    for _, c in ipairs(cases) do V.check(q, k, v, c[2], c[3], c[1] .. " " .. dt, c[4] and c[4][dt]) end
  end
end

---------------------------------------------------------------- batch dims

TestBatch = {}

-- a mask and a score that read b and h, on q, k, v of the given batch
-- dims: b, h as attention reads them (the last batch dim is H, the ones
-- before it flatten into b)
local function bh_case(bq, bk, nq, nk, what)
  local q, k, v = V.qkv(bq, bk, nq, nk, 16, 8)
  local batch = V.batch(q, k, v)
  local P = V.pos(batch, nq, nk)
  local keep = (P.j - P.i):abs():lt(P.h * 9 + P.b * 13)
  local function score(S, Q) return S + Q.h * 0.25 - Q.b * 0.125 + (Q.j - Q.i) * 0.01 end
  V.check(q, k, v, {
    mask_mod = function(b, h, i, j) return (j - i):abs():lt(h * 9 + b * 13) end,
    score_mod = function(s, b, h, i, j) return s + h * 0.25 - b * 0.125 + (j - i) * 0.01 end,
  }, {keep = keep, score = score}, what)
end

function TestBatch:testRank0() bh_case({}, {}, 150, 130, "rank 0 (b = h = 1)") end
function TestBatch:testRank1() bh_case({4}, {4}, 130, 150, "rank 1 (b = 1, h the dim)") end
function TestBatch:testRank2() bh_case({2, 3}, {2, 3}, 150, 150, "rank 2 (B, H)") end
function TestBatch:testRank3() bh_case({2, 2, 3}, {2, 2, 3}, 140, 130, "rank 3 (b flattens two dims)") end
function TestBatch:testRank4() bh_case({2, 1, 2, 2}, {2, 1, 2, 2}, 70, 66, "rank 4") end
function TestBatch:testBroadcastKV()
  bh_case({2, 3}, {3}, 130, 150, "K, V (H, n, d) broadcast over B")
  bh_case({2, 3}, {2, 1}, 130, 150, "K, V (B, 1, n, d) broadcast over H")
  bh_case({3}, {2, 3}, 100, 90, "Q (H, n, d) broadcast over K's B")
  bh_case({}, {2, 3}, 100, 90, "Q (n, d), K and V (B, H, n, d)")
end

---------------------------------------------------------------- a bug kept apart

--[[
BUG (found while writing these suites; bindings/ltensor.c symbolic_index,
commit 94522ec): indexing a tensor with a plain table of two or more
numbers, x[{1, 1}], crashes the process (SIGSEGV). When an element has no
__qkv_index, luaL_getmetafield pushes nothing, yet lua_remove(L, -2) runs
anyway and removes the key table itself, so the next lua_rawgeti(L, 2, i)
reads a number as a table. Expected: x[{1, 1}] is x's element (1, 1), as
before. Run in a child so that the crash fails this test, not the suite.
]]
function TestBatch:testPlainTableIndexStillWorks()
  local out, code = S.exe(arg[-1], "-e",
    "local x = qkv.tensor({{1, 2, 3}, {4, 5, 6}}, 'float64') print(x[{2, 3}], x[{1}]:sum():item())")
  lu.assertEquals(code, 0, "x[{2, 3}] crashed: " .. out)
  lu.assertEquals(out, "6.0\t6.0\n")
end

os.exit(lu.LuaUnit.run(), true)
