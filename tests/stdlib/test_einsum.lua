-- test_einsum.lua: qkv.einsum against a naive float64 einsum written here
-- (every assignment of the letters, products summed), on random data from
-- a fixed-seed Lua RNG: contractions, permutations, diagonals, sums, '...',
-- size-1 broadcasting, empty dims, non-contiguous operands; against
-- qkv.scores and matmul for the attention specs; and its errors.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")

math.randomseed(20250701)
local close, fails, sstr = R.close, R.fails, R.sstr
local DT = {"float32", "float64"}

---------------------------------------------------------------- reference

-- the spec's terms with each '...' replaced by one digit per dim it covers
-- (right-aligned across operands, so they broadcast), and the output term
local function ref_terms(spec, shapes)
  spec = spec:gsub("%s", "")
  local lhs, rhs = spec:match("^(.*)%->(.*)$")
  lhs = lhs or spec
  local terms, nell = {}, 0
  for t in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = t end
  for k, t in ipairs(terms) do
    if t:find("...", 1, true) then nell = math.max(nell, #shapes[k] - (#t - 3)) end
  end
  local function digits(n) local s = "" for i = nell - n + 1, nell do s = s .. i end return s end
  for k, t in ipairs(terms) do
    local n = #shapes[k] - (#t - 3)
    terms[k] = t:gsub("%.%.%.", function() return digits(n) end)
  end
  if rhs then return terms, (rhs:gsub("%.%.%.", digits(nell))) end
  local count, once = {}, {}
  for _, t in ipairs(terms) do for c in t:gmatch("%a") do count[c] = (count[c] or 0) + 1 end end
  for c, n in pairs(count) do if n == 1 then once[#once + 1] = c end end
  table.sort(once)
  return terms, digits(nell) .. table.concat(once)
end

-- row-major offset (1-based) of the element at the letters' values in
-- `at`, a size-1 dim always at index 1
local function offset(term, shape, at)
  local off = 0
  for d = 1, #term do
    local i = shape[d] == 1 and 1 or at[term:sub(d, d)]
    off = off * shape[d] + (i - 1)
  end
  return off + 1
end

-- out[output letters] = sum over the other letters of the product of the
-- operands, every letter running over its largest size
function R.einsum(spec, ...)
  local ops, shapes = {...}, {}
  for k, A in ipairs(ops) do shapes[k] = A.shape end
  local terms, out = ref_terms(spec, shapes)
  local size, letters = {}, {}
  for k, t in ipairs(terms) do
    for d = 1, #t do
      local c = t:sub(d, d)
      if not size[c] then letters[#letters + 1] = c end
      size[c] = math.max(size[c] or 1, shapes[k][d])
      if shapes[k][d] == 0 then size[c] = 0 end
    end
  end
  local oshape = {}
  for d = 1, #out do oshape[d] = size[out:sub(d, d)] end
  local data = {}
  for i = 1, R.numel(oshape) do data[i] = 0 end
  local at = {}
  local function walk(j)
    if j > #letters then
      local p = 1
      for k, t in ipairs(terms) do p = p * ops[k].data[offset(t, shapes[k], at)] end
      local o = offset(out, oshape, at)
      data[o] = data[o] + p
      return
    end
    for v = 1, size[letters[j]] do at[letters[j]] = v; walk(j + 1) end
  end
  walk(1)
  return {shape = oshape, data = data}
end

---------------------------------------------------------------- cases

-- spec, then the operands' shapes
local CASES = {
  {"ij,jk->ik", {3, 4}, {4, 5}},
  {"ij,jk", {2, 3}, {3, 2}},
  {" ij , jk -> ki ", {3, 4}, {4, 2}},
  {"ij,kj->ik", {3, 4}, {5, 4}},
  {"ij->ji", {3, 4}},
  {"ijk->kji", {2, 3, 4}},
  {"ii->i", {4, 4}},
  {"ii->", {4, 4}},
  {"ii", {3, 3}},
  {"iji->ij", {3, 2, 3}},
  {"ij->", {3, 4}},
  {"ij->j", {3, 4}},
  {"i->", {5}},
  {"i,j->ij", {3}, {4}},
  {"i,i->", {6}, {6}},
  {"ij,j->i", {3, 4}, {4}},
  {"i,ij->j", {3}, {3, 4}},
  {"bhqd,bhkd->bhqk", {2, 3, 4, 5}, {2, 3, 6, 5}},
  {"bhqk,bhkd->bhqd", {2, 3, 4, 6}, {2, 3, 6, 5}},
  {"bqd,bkd->bqk", {2, 4, 3}, {2, 5, 3}},
  {"bij,bjk->bik", {3, 2, 4}, {3, 4, 2}},
  {"ij,ij->ij", {3, 4}, {3, 4}},
  {"ij,ij->", {3, 4}, {3, 4}},
  {"ij,ik->ijk", {2, 3}, {2, 4}},
  {"ij,k->i", {3, 4}, {5}},
  {"ij,jk->j", {3, 4}, {4, 5}},
  {"iij,jk->ik", {3, 3, 4}, {4, 2}},
  {"Ba,aC", {2, 3}, {3, 4}},
  {"ij,jk,kl->il", {2, 3}, {3, 4}, {4, 2}},
  {"a,b,c->abc", {2}, {3}, {4}},
  {"bn,anm,bm->ba", {2, 3}, {4, 3, 5}, {2, 5}},
  {"...ij,...jk->...ik", {2, 3, 4}, {4, 5}},
  {"...ij,...jk", {2, 1, 3, 4}, {5, 4, 2}},
  {"b...,b...->b", {2, 3, 4}, {2, 3, 4}},
  {"...ii->...i", {3, 4, 4}},
  {"...ij->ij", {2, 3, 4}},
  {"i...->...", {3, 2, 2}},
  {"ij,jk->ik", {3, 1}, {4, 5}},          -- j broadcast in operand 1
  {"bij,bjk->bik", {1, 2, 3}, {4, 3, 2}},  -- b broadcast
  {"ij,ij->ij", {1, 4}, {3, 1}},
  {"ij,jk->ik", {3, 0}, {0, 4}},          -- empty contraction: zeros
  {"i,i->", {0}, {0}},
  {"ij->i", {0, 3}},
  {"ij,jk->ik", {0, 3}, {3, 2}},
  {",->", {}, {}},
  {"i,->i", {3}, {}},
}

-- operand k of case c as a tensor: contiguous, or (noncontig) made with
-- its last two dims swapped and transposed back
local function random(shape, dtype)
  if R.numel(shape) == 0 then return qkv.zeros(shape, dtype) end
  return (R.mk(shape, dtype))
end

local function operand(shape, dtype, noncontig)
  local n, x = #shape, nil
  if not noncontig or n < 2 then
    x = random(shape, dtype)
  else
    local s = R.copy(shape)
    s[n - 1], s[n] = s[n], s[n - 1]
    x = random(s, dtype):transpose(n - 1, n)
  end
  return x, R.T(x)
end

local function run_case(c, dtype, noncontig)
  local xs, refs = {}, {}
  for k = 2, #c do xs[k - 1], refs[k - 1] = operand(c[k], dtype, noncontig) end
  local what = string.format("%s %s%s", c[1], dtype, noncontig and " transposed" or "")
  local got = qkv.einsum(c[1], table.unpack(xs, 1, #c - 1))
  lu.assertEquals(got.dtype, dtype, what .. ": dtype")
  lu.assertTrue(got:is_contiguous(), what .. ": contiguous")
  close(got, R.einsum(c[1], table.unpack(refs, 1, #c - 1)), R.TOL[dtype], what)
end

TestEinsum = {}

function TestEinsum.testAgainstReference()
  for _, c in ipairs(CASES) do
    for _, dt in ipairs(DT) do run_case(c, dt, false) end
  end
end

function TestEinsum.testNonContiguous()
  for _, c in ipairs(CASES) do
    for _, dt in ipairs(DT) do run_case(c, dt, true) end
  end
end

-- random specs: 1 to 3 operands of 0 to 4 letters from "abcd" (repeats
-- make diagonals), a letter 1 in some operands (broadcast), the output
-- implicit or a random subset in random order
local function random_case()
  local size, c = {}, {}
  for l in ("abcd"):gmatch(".") do size[l] = math.random(1, 3) end
  local terms, used = {}, {}
  for k = 1, math.random(1, 3) do
    local term, shape, one = "", {}, {}
    for _ = 1, math.random(0, 4) do
      local l = string.char(math.random(97, 100))
      if one[l] == nil then one[l] = math.random() < 0.2 end
      term, used[l] = term .. l, true
      shape[#shape + 1] = one[l] and 1 or size[l]
    end
    terms[k], c[k + 1] = term, shape
  end
  local spec = table.concat(terms, ",")
  if math.random() < 0.7 then
    local out = {}
    for l in pairs(used) do if math.random() < 0.5 then out[#out + 1] = l end end
    table.sort(out)
    for i = #out, 2, -1 do local j = math.random(i); out[i], out[j] = out[j], out[i] end
    spec = spec .. "->" .. table.concat(out)
  end
  c[1] = spec
  return c
end

function TestEinsum.testRandomSpecs()
  for _ = 1, 300 do
    local c = random_case()
    for _, dt in ipairs(DT) do run_case(c, dt, math.random() < 0.5) end
  end
end

function TestEinsum.testShapes()
  local function shape(...) return sstr(R.shape(qkv.einsum(...))) end
  lu.assertEquals(shape("ij,jk->ik", qkv.zeros(3, 0), qkv.zeros(0, 4)), "(3, 4)")
  lu.assertEquals(shape("ij->i", qkv.zeros(0, 3)), "(0,)")
  lu.assertEquals(shape("i,i->", qkv.ones(3), qkv.ones(3)), "()")
  lu.assertEquals(shape("...ij,...jk", qkv.ones(2, 1, 3, 4), qkv.ones(5, 4, 2)), "(2, 5, 3, 2)")
  lu.assertEquals(shape("Ba,aC", qkv.ones(2, 3), qkv.ones(3, 4)), "(2, 4)")
  lu.assertEquals(qkv.einsum("ij,jk->ik", qkv.zeros(3, 0), qkv.zeros(0, 4)):sum():item(), 0)
end

-- a result is a new tensor, never a view of an operand
function TestEinsum.testFreshResult()
  local x = qkv.arange(4)
  for _, spec in ipairs{"i->i", "i"} do
    local r = qkv.einsum(spec, x)
    r[1] = 99
    lu.assertEquals(x[1], 0, spec)
  end
  local m = qkv.rand(3, 3)
  local r = qkv.einsum("ij->ij", m)
  r[1][1] = -1
  lu.assertTrue(m[1][1] >= 0)
end

function TestEinsum.testAttention()
  for _, dt in ipairs(DT) do
    local Q, K, V = qkv.randn(2, 3, 5, 8, dt), qkv.randn(2, 3, 7, 8, dt), qkv.randn(2, 3, 7, 4, dt)
    local S = qkv.einsum("bhqd,bhkd->bhqk", Q, K)
    close(S, qkv.scores(Q, K, {scale = 1}), R.TOL[dt], "scores " .. dt)
    local W = qkv.softmax(S)
    close(qkv.einsum("bhqk,bhkd->bhqd", W, V), W:matmul(V), R.TOL[dt], "W V " .. dt)
    close(qkv.einsum("bqd,bkd->bqk", Q[1], K[1]), Q[1]:matmul(K[1]:transpose(2, 3)),
      R.TOL[dt], "bqd,bkd " .. dt)
  end
end

---------------------------------------------------------------- errors

TestEinsumErrors = {}

local A, B = qkv.ones(2, 3), qkv.ones(3, 4)

-- float16 and bfloat16, as matmul takes them (and PyTorch's einsum): the
-- result in the dtype, near the same spec on float32 copies (they were
-- refused, as if matmul refused them)
function TestEinsum.testHalves()
  for _, dt in ipairs{"float16", "bfloat16"} do
    local a, b = qkv.randn(2, 3, 4):to(dt), qkv.randn(2, 4, 5):to(dt)
    for _, c in ipairs{{"bij,bjk->bik", b}, {"bij,bjk->ik", b}, {"bij,bij->b", a}, {"...j,bjk->...k", b}} do
      local r = qkv.einsum(c[1], a, c[2])
      lu.assertEquals(r.dtype, dt, c[1])
      qkv.test.assertClose(r:float(), qkv.einsum(c[1], a:float(), c[2]:float()),
                           {rtol = 2e-2, atol = 2e-2})
    end
    local d = qkv.randn(4, 4):to(dt)
    qkv.test.assertTensorEqual(qkv.einsum("ii->i", d), qkv.einsum("ii->i", d:float()):to(dt))
  end
end

function TestEinsumErrors.testArguments()
  fails("einsum: bad argument #1 (spec string expected, got number)", qkv.einsum, 3, A)
  fails("einsum: bad argument #2 (tensor expected for operand 1, got table)",
    qkv.einsum, "i", {1, 2})
  fails("einsum: bad argument #3 (tensor expected for operand 2, got nil)",
    qkv.einsum, "ij,jk", A, nil)
  fails("einsum: 2 operands given but the spec has 3", qkv.einsum, "ij,jk,kl", A, B)
  fails("einsum: 0 operands given but the spec has 1", qkv.einsum, "ij")
  fails("einsum: 1 operand given but the spec has 2", qkv.einsum, "ij,jk", A)
end

function TestEinsumErrors.testDtypes()
  fails("einsum: operand 1 is int64: einsum takes float tensors (float32, float64, float16, "
        .. "bfloat16), as matmul does", qkv.einsum, "ij->ji", qkv.ones(2, 2, "int64"))
  qkv.einsum("ij->ji", qkv.ones(2, 2))  -- a kept plan still checks the dtypes
  fails("einsum: operand 1 is int64", qkv.einsum, "ij->ji", qkv.ones(2, 2, "int64"))
  fails("einsum: operand 2 is bool", qkv.einsum, "ij,jk", A, qkv.ones(3, 4, "bool"))
  fails("einsum: operand 1 is float32 but operand 2 is float64",
    qkv.einsum, "ij,jk", A, qkv.ones(3, 4, "float64"))
end

function TestEinsumErrors.testSpec()
  fails("einsum: bad character '1' in the spec 'i1,j'", qkv.einsum, "i1,j", A:view(6), A:view(6))
  fails("einsum: bad character '-'", qkv.einsum, "ij-ji", A)
  fails("einsum: bad character '>'", qkv.einsum, "ij>ji", A)
  fails("einsum: a '.' outside '...' in operand 1", qkv.einsum, "i.j", A)
  fails("einsum: operand 1 has more than one '...'", qkv.einsum, "...i...", A)
  fails("einsum: the output has more than one '...'", qkv.einsum, "...i->......", A)
  fails("einsum: the spec 'ij->ji->ij' has more than one '->'", qkv.einsum, "ij->ji->ij", A)
  fails("einsum: output subscript 'z' appears in no operand", qkv.einsum, "ij->z", A)
  fails("einsum: output subscript 'i' appears twice", qkv.einsum, "ij->ii", A)
end

function TestEinsumErrors.testSizes()
  fails("einsum: operand 2 has 3 dims but the spec 'ij' names 2",
    qkv.einsum, "ij,ij", A, qkv.ones(2, 3, 1))
  fails("einsum: operand 1 has 1 dim but the spec 'ij...' names at least 2",
    qkv.einsum, "ij...", qkv.ones(3))
  fails("einsum: subscript 'k' is 4 in operand 1 but 5 in operand 2",
    qkv.einsum, "ik,jk", qkv.ones(2, 4), qkv.ones(3, 5))
  fails("einsum: subscript 'i' is repeated in operand 1 with sizes 2 and 3", qkv.einsum, "ii", A)
  fails("einsum: the dims under '...' do not broadcast: 2 in operand 1 but 3 in operand 2",
    qkv.einsum, "...i,...i", qkv.ones(2, 4), qkv.ones(3, 4))
  fails("einsum: the output would have 10 dims (at most 8)", qkv.einsum,
    "abcde,fghij->abcdefghij", qkv.ones(1, 1, 1, 1, 1), qkv.ones(1, 1, 1, 1, 1))
  fails("einsum: an intermediate result would have 9 dims (at most 8)", qkv.einsum,
    "abcdi,efgh,abcdefgh,i->", qkv.ones(1, 1, 1, 1, 1), qkv.ones(1, 1, 1, 1),
    qkv.ones(1, 1, 1, 1, 1, 1, 1, 1), qkv.ones(1))
end

-- errors name the script line that called einsum
function TestEinsumErrors.testCallerLine()
  local line = debug.getinfo(1, "l").currentline + 1
  local ok, msg = pcall(function() return qkv.einsum("ij,jk", A, A) end)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "test_einsum.lua:" .. line .. ": einsum: subscript 'j'")
  line = debug.getinfo(1, "l").currentline + 1
  ok, msg = pcall(function() return qkv.einsum("abcdi,efgh,abcdefgh,i->", qkv.ones(1, 1, 1, 1, 1),
    qkv.ones(1, 1, 1, 1), qkv.ones(1, 1, 1, 1, 1, 1, 1, 1), qkv.ones(1)) end)
  lu.assertStrContains(msg, "test_einsum.lua:" .. line .. ": einsum: an intermediate")
end

os.exit(lu.LuaUnit.run(), true)
