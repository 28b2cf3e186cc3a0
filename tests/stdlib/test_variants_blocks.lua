-- test_variants_blocks.lua: qkv.block_mask. Its kinds (int32 (B', H',
-- n_q blocks, n_k blocks): 0 empty, 1 partial, 2 full) against a
-- brute-force classification of the mask's values, which are built here
-- from plain tensor ops; default, square and rectangular block sizes,
-- ragged last blocks; B and H only where the mask reads b and h; one
-- block mask reused across calls and paths; a block_mask with a mask_mod
-- (both applied); and its errors.
local lu = require "luaunit"
local V = dofile("tests/helpers/variants_ref.lua")
local VA = qkv.variants

qkv.set_default_device("cpu")
qkv.manual_seed(480)

-- the kinds of bm against V.kinds of keep (a bool tensor broadcasting to
-- (B', H', n_q, n_k), B' and H' the kinds' own), and its spans (each
-- query's one run of kept keys, or nil) against V.spans
local function check_kinds(bm, keep, what)
  local K = bm.kinds
  lu.assertEquals(K.dtype, "int32", what .. ": dtype")
  local nq, nk, bq, bk = bm.n_q, bm.n_k, bm.block[1], bm.block[2]
  lu.assertEquals(K.shape, {K:size(1), K:size(2), (nq + bq - 1) // bq, (nk + bk - 1) // bk},
                  what .. ": shape")
  local full = keep:logical_and(qkv.ones({K:size(1), K:size(2), nq, nk}, "bool"))
  lu.assertEquals(K:tolist(), V.kinds(full, bq, bk), what .. ": kinds")
  local spans = V.spans(full)
  if spans == nil then
    lu.assertNil(bm.spans, what .. ": spans where a query's keys are not one run")
  else
    lu.assertNotNil(bm.spans, what .. ": no spans")
    lu.assertEquals(bm.spans.dtype, "int32", what .. ": spans dtype")
    lu.assertEquals(bm.spans:tolist(), spans, what .. ": spans")
  end
end

-- a (n_q, n_k) bool tensor of f(i, j), computed in Lua
local function grid(nq, nk, f)
  local rows = {}
  for i = 1, nq do
    local r = {}
    for j = 1, nk do r[j] = f(i, j) end
    rows[i] = r
  end
  return qkv.tensor(rows, "bool")
end

local function ids_tensor(lengths)
  local r = {}
  for d, n in ipairs(lengths) do for _ = 1, n do r[#r + 1] = d end end
  return qkv.tensor(r, "int64")
end

TestKinds = {}

-- masks that read neither b nor h, with their keep tensors (n_q, n_k)
local function plain_masks(nq, nk)
  local P = V.pos({}, nq, nk)
  local ids = ids_tensor({50, 3, 60, nq - 113})
  local I = ids:double()
  local J = ids_tensor({50, 3, 60, nk - 113})
  return {
    {"causal", VA.causal(), P.j:le(P.i)},
    {"causal_end", VA.causal_end(nq, nk), P.j:le(P.i + nk - nq)},
    {"sliding_window(20)", VA.sliding_window(20), P.j:le(P.i):logical_and(P.j:gt(P.i - 20))},
    {"window both sides", VA.sliding_window(33, {causal = false}), (P.i - P.j):abs():lt(33)},
    {"prefix_lm(40)", VA.prefix_lm(40), P.j:le(P.i):logical_or(P.j:le(40))},
    {"document", VA.document(ids, J), I:reshape(nq, 1):eq(J:double():reshape(1, nk))},
    {"(i j) % 7 ~= 0", function(b, h, i, j) return ((i * j) % 7):ne(0) end,
     grid(nq, nk, function(i, j) return (i * j) % 7 ~= 0 end)},
    {"sqrt |i - j| < 5", function(b, h, i, j) return (i - j):abs():sqrt():lt(5) end,
     (P.i - P.j):abs():sqrt():lt(5)},
    {"nothing", function(b, h, i, j) return i:lt(0) end, P.i:lt(0)},
    {"everything", function(b, h, i, j) return i:ge(1) end, P.i:ge(1)},
  }
end

function TestKinds:testDefaultBlocks()
  for _, n in ipairs{{150, 150}, {150, 130}, {129, 200}} do
    for _, c in ipairs(plain_masks(n[1], n[2])) do
      local bm = qkv.block_mask(c[2], nil, nil, n[1], n[2])
      lu.assertEquals(bm.block, {64, 64})
      lu.assertEquals({bm.n_q, bm.n_k, bm.B, bm.H}, {n[1], n[2], nil, nil})
      lu.assertEquals(bm.kinds:size(1), 1)
      lu.assertEquals(bm.kinds:size(2), 1)
      check_kinds(bm, c[3], c[1] .. (" %dx%d"):format(n[1], n[2]))
    end
  end
end

function TestKinds:testCustomBlocks()
  for _, blk in ipairs{16, {32, 48}, {128, 256}, 1, {7, 5}} do
    for _, c in ipairs(plain_masks(150, 140)) do
      local bm = qkv.block_mask(c[2], nil, nil, 150, 140, {block = blk})
      local bq = type(blk) == "table" and blk[1] or blk
      local bk = type(blk) == "table" and blk[2] or blk
      lu.assertEquals(bm.block, {bq, bk})
      check_kinds(bm, c[3], ("%s, block %dx%d"):format(c[1], bq, bk))
    end
  end
end

function TestKinds:testEveryKindOccurs()
  -- the causal mask's blocks at 16: below the diagonal full, above empty,
  -- on it partial; so a classification that said 1 everywhere would fail
  local bm = qkv.block_mask(VA.causal(), nil, nil, 64, 64, {block = 16})
  local K = bm.kinds:tolist()[1][1]
  for a = 1, 4 do
    for b = 1, 4 do lu.assertEquals(K[a][b], a > b and 2 or a == b and 1 or 0, a .. "," .. b) end
  end
  lu.assertEquals(bm:to_dense():tolist()[1][1][1], {true, false, false, false})
  lu.assertAlmostEquals(bm:density(), 10 / 16, 1e-15)
  lu.assertStrContains(tostring(bm), "6 full, 4 partial, 6 empty of 16")
end

function TestKinds:testHeadsAndBatch()
  -- a mask that reads h needs H; one that reads b needs B; the kinds then
  -- hold a row per h and per b
  local nq, nk = 140, 150
  local gh = function(b, h, i, j) return (i - j):abs():lt(h * 25) end
  local bm = qkv.block_mask(gh, nil, 3, nq, nk, {block = 32})
  lu.assertEquals({bm.kinds:size(1), bm.kinds:size(2)}, {1, 3})
  local P = V.pos({3}, nq, nk)
  check_kinds(bm, (P.i - P.j):abs():lt(P.h * 25), "per h")
  local gbh = function(b, h, i, j) return (i - j):abs():lt(h * 10 + b * 30) & j:le(i + b) end
  bm = qkv.block_mask(gbh, 4, 2, nq, nk)
  lu.assertEquals({bm.kinds:size(1), bm.kinds:size(2)}, {4, 2})
  P = V.pos({4, 2}, nq, nk)
  check_kinds(bm, (P.i - P.j):abs():lt(P.h * 10 + P.b * 30):logical_and(P.j:le(P.i + P.b)), "per b and h")
  -- a mask of b alone: H may be nil
  local gb = function(b, h, i, j) return j:le(i + b * 20 - 40) end
  bm = qkv.block_mask(gb, 3, nil, nq, nk, {block = {16, 64}})
  lu.assertEquals({bm.kinds:size(1), bm.kinds:size(2)}, {3, 1})
  P = V.pos({3, 1}, nq, nk)
  check_kinds(bm, P.j:le(P.i + P.b * 20 - 40), "per b")
end

function TestKinds:testDocumentsPerBatch()
  -- ids (B, n): a captured tensor read at [b, i]
  local n = 150
  local ids = qkv.stack({ids_tensor({30, 30, 90}), ids_tensor({100, 50}), ids_tensor({1, 149})}, 1)
  local bm = qkv.block_mask(VA.document(ids), 3, nil, n, n, {block = 32})
  lu.assertEquals(bm.kinds:size(1), 3)
  local P = V.pos({3, 1}, n, n)
  local base = (P.b - 1) * n
  local I = ids:double()
  check_kinds(bm, V.take(I, base + P.i):eq(V.take(I, base + P.j)), "document (B, n)")
end

function TestKinds:testNilWhereTheMaskReadsIsAnError()
  local n = 100
  V.raises(function() return qkv.block_mask(function(b, h, i, j) return j:le(i + h) end, nil, nil, n, n) end,
           {"block_mask", "reads h", "H"}, "reads h, H nil")
  V.raises(function() return qkv.block_mask(function(b, h, i, j) return j:le(i + b) end, nil, 2, n, n) end,
           {"block_mask", "reads b", "B"}, "reads b, B nil")
  V.raises(function() return qkv.block_mask(VA.document(qkv.zeros(2, n, "int64")), nil, nil, n, n) end,
           {"block_mask", "reads b"}, "document (B, n), B nil")
end

function TestKinds:testBadOptions()
  local g = VA.causal()
  for _, c in ipairs{
    {function() return qkv.block_mask(g, nil, nil, 10, 10, {block = 0}) end, {"block_mask", "block"}},
    {function() return qkv.block_mask(g, nil, nil, 10, 10, {block = 129}) end, {"block_mask", "block"}},
    {function() return qkv.block_mask(g, nil, nil, 10, 10, {block = {64, 257}}) end, {"block_mask", "block"}},
    {function() return qkv.block_mask(g, nil, nil, 10, 10, {block = 1.5}) end, {"block_mask", "block"}},
    {function() return qkv.block_mask(g, nil, nil, 10, 10, {blocks = 16}) end, {"block_mask", "blocks"}},
    {function() return qkv.block_mask(g, nil, nil, 10, 10, 16) end, {"block_mask", "options"}},
    {function() return qkv.block_mask(g, 0, nil, 10, 10) end, {"block_mask", "B"}},
    {function() return qkv.block_mask(g, nil, 2.5, 10, 10) end, {"block_mask", "H"}},
    {function() return qkv.block_mask(g, nil, nil, -1, 10) end, {"block_mask", "n_q"}},
    {function() return qkv.block_mask(g, nil, nil, 10) end, {"block_mask", "n_k"}},
    {function() return qkv.block_mask(function(b, h, i, j) return i + j end, nil, nil, 10, 10) end,
     {"block_mask", "mask_mod"}},
    {function() return qkv.block_mask("causal", nil, nil, 10, 10) end, {"block_mask", "mask_mod"}},
  } do V.raises(c[1], c[2], table.concat(c[2], " ")) end
end

---------------------------------------------------------------- in attention

TestBlockMaskAttention = {}

function TestBlockMaskAttention:testAloneBothPaths()
  local nq, nk = 150, 140
  local q, k, v = V.qkv({2, 3}, {2, 3}, nq, nk, 16, 8)
  local P = V.pos({2, 3}, nq, nk)
  for _, blk in ipairs{64, 16, {32, 48}, {128, 256}, {1, 3}} do
    local bm = qkv.block_mask(VA.sliding_window(25), nil, nil, nq, nk, {block = blk})
    V.check(q, k, v, {block_mask = bm}, {keep = P.j:le(P.i):logical_and(P.j:gt(P.i - 25))},
            "block_mask, block " .. (type(blk) == "table" and table.concat(blk, "x") or blk))
  end
end

function TestBlockMaskAttention:testSpansInFloat32()
  -- float32 runs the AVX2 kernel, which cuts a partial block by the block
  -- mask's spans where it has them (every mask here but (i j) % 7) instead
  -- of running the mask: alone, under a score_mod (cut after it), with
  -- causal = true on top (the spans clipped to the diagonal), for tiles
  -- of every size and queries not a multiple of 16
  for _, n in ipairs{{150, 130}, {117, 200}} do
    local nq, nk = n[1], n[2]
    local q, k, v = V.qkv({2, 3}, {2, 3}, nq, nk, 16, 8, "float32")
    local P = V.pos({2, 3}, nq, nk)
    local diag = P.j:le(P.i + nk - nq)
    for _, c in ipairs(plain_masks(nq, nk)) do
      for _, blk in ipairs{64, {16, 32}, {100, 7}, {1, 1}} do
        local bm = qkv.block_mask(c[2], nil, nil, nq, nk, {block = blk})
        local what = ("%s %dx%d block %s"):format(c[1], nq, nk, type(blk) == "table" and table.concat(blk, "x") or blk)
        lu.assertEquals(bm.spans == nil, c[1] == "(i j) % 7 ~= 0", what .. ": spans")
        V.check(q, k, v, {block_mask = bm}, {keep = c[3]}, what)
        V.check(q, k, v, {block_mask = bm, score_mod = VA.softcap(2), causal = true},
                {keep = c[3]:logical_and(diag), score = function(S) return (S / 2):tanh() * 2 end},
                what .. " + softcap + causal")
      end
    end
  end
end

function TestBlockMaskAttention:testReuse()
  -- one block mask, made once, for calls with other q, k, v, dtypes,
  -- batches, a score_mod and causal = true on top
  local nq, nk = 130, 150
  local bm = qkv.block_mask(VA.document(ids_tensor({40, 60, 30}), ids_tensor({50, 70, 30})),
                            nil, nil, nq, nk, {block = {32, 48}})
  local I, J = ids_tensor({40, 60, 30}):double(), ids_tensor({50, 70, 30}):double()
  local doc = I:reshape(nq, 1):eq(J:reshape(1, nk))
  for round, c in ipairs{{{2, 3}, "float64"}, {{4}, "float32"}, {{}, "float64"}, {{2, 2, 2}, "float64"},
                         {{2, 3}, "bfloat16"}} do
    local q, k, v = V.qkv(c[1], c[1], nq, nk, 16, 8, c[2])
    local what = ("reuse %d (%s)"):format(round, c[2])
    V.check(q, k, v, {block_mask = bm}, {keep = doc}, what)
    local P = V.pos(c[1], nq, nk)
    V.check(q, k, v, {block_mask = bm, causal = true, score_mod = VA.softcap(2)},
            {keep = doc:logical_and(P.j:le(P.i + nk - nq)), score = function(S) return (S / 2):tanh() * 2 end},
            what .. " + causal + softcap")
  end
  -- the block mask was not changed by its use
  check_kinds(bm, doc, "after reuse")
end

function TestBlockMaskAttention:testWithMaskMod()
  -- block_mask and mask_mod: both apply (and)
  local nq, nk = 150, 150
  local q, k, v = V.qkv({2, 2}, {2, 2}, nq, nk, 16, 8)
  local P = V.pos({2, 2}, nq, nk)
  for _, blk in ipairs{64, {16, 32}} do
    local bm = qkv.block_mask(VA.causal(), nil, nil, nq, nk, {block = blk})
    V.check(q, k, v, {block_mask = bm, mask_mod = VA.sliding_window(30, {causal = false})},
            {keep = P.j:le(P.i):logical_and((P.i - P.j):abs():lt(30))}, "block_mask and mask_mod")
    -- a mask_mod that keeps what the block mask drops adds nothing back
    V.check(q, k, v, {block_mask = bm, mask_mod = function(b, h, i, j) return j:gt(i - 200) end},
            {keep = P.j:le(P.i)}, "block_mask limits a wider mask_mod")
  end
end

function TestBlockMaskAttention:testPerHeadBlockMask()
  local nq, nk = 150, 140
  local g = function(b, h, i, j) return (i - j):abs():lt(h * 16) & j:le(i + b) end
  local bm = qkv.block_mask(g, 2, 3, nq, nk)
  local q, k, v = V.qkv({2, 3}, {2, 3}, nq, nk, 16, 8)
  local P = V.pos({2, 3}, nq, nk)
  V.check(q, k, v, {block_mask = bm}, {keep = (P.i - P.j):abs():lt(P.h * 16):logical_and(P.j:le(P.i + P.b))},
          "per (b, h) block mask")
  -- (2, 2, 3) batch dims: b runs over 4 items, the block mask has 2
  local q3, k3, v3 = V.qkv({2, 2, 3}, {2, 2, 3}, nq, nk, 8, 8)
  V.raises(function() return qkv.attention(q3, k3, v3, {block_mask = bm, weights = false}) end,
           {"block_mask", "B"}, "B mismatch")
  local q4, k4, v4 = V.qkv({2, 4}, {2, 4}, nq, nk, 8, 8)
  V.raises(function() return qkv.attention(q4, k4, v4, {block_mask = bm}) end, {"block_mask", "H"}, "H mismatch")
end

function TestBlockMaskAttention:testHeadSizesLayoutsAndBlocks()
  -- q and k as (B, n, H, d) transposed, v as (B, H, d, n) transposed:
  -- strided reads in the kernels' tiles, for every tile size a block
  -- mask may set, at head sizes 1, 64 and 200
  local B, H, nq, nk = 2, 3, 150, 140
  local P = V.pos({B, H}, nq, nk)
  local bias = qkv.randn(H, nq + nk - 1, "float64")
  local Bt = V.take(bias, (P.h - 1) * (nq + nk - 1) + P.i - P.j + nk)
  local keep = P.j:le(P.i):logical_and(P.j:gt(P.i - 45))
  for _, dt in ipairs{"float32", "float64"} do
    for _, d in ipairs{1, 64, 200} do
      local q = qkv.randn(B, nq, H, d, "float64"):to(dt):transpose(2, 3)
      local k = qkv.randn(B, nk, H, d, "float64"):to(dt):transpose(2, 3)
      local v = qkv.randn(B, H, 8, nk, "float64"):to(dt):transpose(-1, -2)
      local want = V.ref(q, k, v, {score = function(S) return S + Bt end, keep = keep})
      for _, blk in ipairs{false, {1, 1}, {100, 7}, {128, 256}} do
        local opts = {score_mod = function(s, b, h, i, j) return s + bias[{h, i - j + nk}] end,
                      mask_mod = VA.sliding_window(45), weights = false}
        if blk then opts.block_mask = qkv.block_mask(VA.causal(), nil, nil, nq, nk, {block = blk}) end
        V.near(qkv.attention(q, k, v, opts), want, V.TOL[dt],
               ("%s d %d block %s"):format(dt, d, blk and table.concat(blk, "x") or "-"), dt)
      end
    end
  end
end

function TestBlockMaskAttention:testOtherLengthsIsAnError()
  local bm = qkv.block_mask(VA.causal(), nil, nil, 100, 120)
  for _, n in ipairs{{120, 100}, {100, 121}, {99, 120}} do
    local q, k, v = V.qkv({2}, {2}, n[1], n[2], 8, 8)
    for _, w in ipairs{false, true} do
      V.raises(function() return qkv.attention(q, k, v, {block_mask = bm, weights = w}) end,
               {"attention", "block_mask", "100", "120"}, ("lengths %dx%d"):format(n[1], n[2]))
    end
  end
  local q, k, v = V.qkv({2}, {2}, 100, 120, 8, 8)
  V.raises(function() return qkv.attention(q, k, v, {block_mask = {kinds = bm.kinds}}) end,
           {"attention", "block_mask"}, "not a block mask")
  V.raises(function() return qkv.attention(q, k, v, {block_mask = VA.causal()}) end,
           {"attention", "block_mask"}, "a mask_mod as block_mask")
end

os.exit(lu.LuaUnit.run(), true)
