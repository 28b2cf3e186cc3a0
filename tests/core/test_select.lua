-- test_select.lua: selection and indexing (where, tril, triu, any, all, the
-- logical ops, index_select, gather, embedding, sort, topk), clamp, mm, bmm,
-- the dtype shorthands, Torch7's table indexing, x.T / x.mT, and the
-- in-place ops (docs/tensors.md, "Selection and indexing", "In place"). Each result
-- against a plain-Lua reference over tolist(), on broadcast, non-contiguous,
-- 0-size and 1-size inputs, and every bad argument as a Lua error.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local fails = R.fails

math.randomseed(7)

local function rand(shape, dt)
  local n, d = R.numel(shape), {}
  for i = 1, n do d[i] = math.random(-9, 9) / 2 end
  return qkv.tensor(R.nest(d, shape), dt)
end
local function rbool(shape)
  local d = {}
  for i = 1, R.numel(shape) do d[i] = math.random() < 0.5 end
  return qkv.tensor(R.nest(d, shape))
end
local function I(t) return qkv.tensor(t, "int64") end

-- f applied to each element of the broadcast operands, as a flat list
local function each(shape, f, ...)
  local flat = {}
  for k, x in ipairs{...} do flat[k] = x:expand(table.unpack(shape)):contiguous():view(-1):tolist() end
  local out = {}
  for i = 1, R.numel(shape) do
    local args = {}
    for k = 1, #flat do args[k] = flat[k][i] end
    out[i] = f(table.unpack(args))
  end
  return out
end
local function flat(x) return x:contiguous():view(-1):tolist() end

---------------------------------------------------------------- where, tril, triu
TestWhere = {}

function TestWhere:testAgainstReference()
  local c, a, b = rbool({2, 1, 4}), rand({3, 4}), rand({2, 3, 1}, "float64")
  local out = qkv.where(c, a, b)
  lu.assertEquals(out.shape, {2, 3, 4})
  lu.assertEquals(out.dtype, "float64")
  lu.assertEquals(flat(out), each({2, 3, 4}, function(x, y, z) return x and y or z end, c, a, b))
  -- numbers, a method form, non-contiguous operands
  local at = rand({4, 3}):t()
  lu.assertEquals(flat(at:where(c[1], -1)), each({1, 3, 4}, function(m, x) return m and x or -1 end,
                                                c[1]:view(1, 1, 4), at:view(1, 3, 4)))
  lu.assertEquals(qkv.where(qkv.tensor({true, false}), 1, 2):tolist(), {1, 2})
  lu.assertEquals(qkv.where(qkv.tensor({true, false}), 1, 2).dtype, "int64")
  lu.assertEquals(qkv.where(qkv.tensor({true, false}), I{5, 6}, 0.5):tolist(), {5, 0.5})
  lu.assertEquals(qkv.where(qkv.zeros(0, 3):eq(1), 1.0, 2.0).shape, {0, 3})
  -- b with more dims than c and a together: the three shapes broadcast in
  -- two steps, the second reading the first's result as it wrote it
  -- ((1, 4) and (4, 1, 1) gave (4, 4, 4); (6, 6), () and (2, 3, 6, 6) "did
  -- not broadcast")
  local c2, b2 = rbool({1, 4}), rand({4, 1, 1})
  local w = qkv.where(c2, 0, b2)
  lu.assertEquals(w.shape, {4, 1, 4})
  lu.assertEquals(flat(w), each({4, 1, 4}, function(m, y) return m and 0 or y end, c2:view(1, 1, 4), b2))
  lu.assertEquals(qkv.where(rbool({6, 6}), 1.0, rand({2, 3, 6, 6})).shape, {2, 3, 6, 6})
  lu.assertEquals(qkv.where(rbool({5}), rand({2, 5}), rand({3, 1, 1})).shape, {3, 2, 5})
end

function TestWhere:testErrors()
  fails("where: condition must be a bool tensor, got float32", qkv.where, qkv.ones(2), 1, 2)
  fails("where: shapes (2,), (3,) and (1,) do not broadcast", qkv.where, rbool({2}), qkv.ones(3), qkv.ones(1))
  fails("where: expected tensors or numbers for a and b", qkv.where, rbool({2}), "a", 1)
  fails("where: bad argument #3 (tensor or number expected, got table)", qkv.where, rbool({2}), qkv.ones(2), {})
end

function TestWhere:testTriangles()
  local x = rand({2, 3, 5})
  for k = -3, 5 do
    local lo, up = flat(x:tril(k)), flat(x:triu(k))
    local i = 0
    for _, v in ipairs(flat(x)) do
      i = i + 1
      local r, c = (i - 1) // 5 % 3, (i - 1) % 5
      lu.assertEquals(lo[i], c - r <= k and v or 0, "tril " .. k)
      lu.assertEquals(up[i], c - r >= k and v or 0, "triu " .. k)
    end
  end
  lu.assertEquals(I{{1, 2}, {3, 4}}:tril():tolist(), {{1, 0}, {3, 4}})
  lu.assertEquals(qkv.tril(qkv.ones(2, 2):t():eq(1)):tolist(), {{true, false}, {true, true}})
end

-- tril and triu against a float64 reference over the flat values: element
-- (..., i, j) of an (..., n, m) tensor stays where j - i <= k (tril) or
-- j - i >= k (triu), else it is 0 (false for bool)
local function tri_ref(x, k, upper)
  local shape, vals, zero = x.shape, flat(x), 0
  if x.dtype == "bool" then zero = false end
  local n, m = shape[#shape - 1], shape[#shape]
  local out = {}
  for e, v in ipairs(vals) do
    local i, j = (e - 1) // m % n, (e - 1) % m
    local keep = upper and j - i >= k or not upper and j - i <= k
    out[e] = keep and v or zero
  end
  return out
end

local TRI_DTYPES = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"}

-- x in several layouts, each with x's values: contiguous, transposed,
-- expanded along a batch dim (stride 0), a narrowed view at an offset
local function layouts(shape, dt)
  local nd = #shape
  local function make(s)
    if R.numel(s) == 0 then return qkv.zeros(s, dt) end
    return dt == "bool" and rbool(s) or rand(s, dt)
  end
  local out = {contiguous = make(shape)}
  local swapped = {table.unpack(shape)}
  swapped[nd - 1], swapped[nd] = shape[nd], shape[nd - 1]
  out.transposed = make(swapped):transpose(nd - 1, nd)
  local one = {1, table.unpack(shape, 2)}
  out.expanded = make(one):expand(table.unpack(shape))
  local wide = {table.unpack(shape)}
  wide[nd] = shape[nd] + 3
  out.narrowed = make(wide):narrow(nd, 2, shape[nd])
  return out
end

function TestWhere:testTrianglesAgainstReference()
  local shapes = {{3, 5}, {5, 3}, {2, 3, 4, 5}, {1, 1}, {4, 1}, {1, 4}, {0, 3}, {3, 0}, {2, 0, 4}}
  local ks = {-6, -3, -1, 0, 1, 2, 4, 7, math.mininteger, math.maxinteger, -2 ^ 40, 2 ^ 40}
  for _, dt in ipairs(TRI_DTYPES) do
    for _, shape in ipairs(shapes) do
      for lname, x in pairs(layouts(shape, dt)) do
        for _, k in ipairs(ks) do
          for _, upper in ipairs{false, true} do
            local name = upper and "triu" or "tril"
            local what = ("%s %s %s (%s) k = %s"):format(name, dt, lname,
                                                         table.concat(shape, ", "), k)
            local got = upper and x:triu(k) or qkv.tril(x, k)
            lu.assertEquals(got.dtype, dt, what)
            lu.assertEquals(got.shape, x.shape, what)
            lu.assertEquals(got.device, x.device, what)
            lu.assertEquals(flat(got), tri_ref(x, k, upper), what)
          end
        end
      end
    end
  end
  -- the default k is 0; an integral float is that integer
  local x = rand({4, 4})
  qkv.test.assertTensorEqual(x:tril(), x:tril(0))
  qkv.test.assertTensorEqual(qkv.triu(x), x:triu(0))
  qkv.test.assertTensorEqual(x:triu(2.0), x:triu(2))
  -- zeros are written, not products: NaN and inf outside the band go
  local nan = qkv.full({2, 2}, 0 / 0):triu(1)
  lu.assertEquals(nan:ne(nan):tolist(), {{false, true}, {false, false}})
  lu.assertEquals(qkv.full({2, 2}, -math.huge):tril():tolist(), {{-math.huge, 0}, {-math.huge, -math.huge}})
  -- a new tensor: writing into it leaves x alone, also when k keeps all
  local before = flat(x)
  local y = x:tril(10)
  lu.assertEquals(flat(y), before)
  y:fill_(7)
  lu.assertEquals(flat(x), before)
end

function TestWhere:testTriangleErrors()
  fails({"tril", "x", "at least 2 dims", "(3,)"}, qkv.tril, qkv.ones(3))
  fails({"triu", "x", "at least 2 dims", "()"}, qkv.triu, qkv.tensor(2))
  fails({"triu", "x", "(3,)"}, function() return qkv.ones(3):triu() end)
  fails({"triu", "#2", "integer"}, qkv.triu, qkv.ones(2, 2), 0.5)
  fails({"tril", "#2", "integer"}, qkv.tril, qkv.ones(2, 2), -1.5)
  fails({"tril", "integer"}, function() return qkv.ones(2, 2):tril(1.25) end)
  fails({"tril", "#2", "integer"}, qkv.tril, qkv.ones(2, 2), 0 / 0)
  fails({"tril", "#2", "integer"}, qkv.tril, qkv.ones(2, 2), math.huge)
  fails({"tril", "#2", "number expected, got string"}, qkv.tril, qkv.ones(2, 2), "one")
  fails({"triu", "#2", "number expected, got table"}, qkv.triu, qkv.ones(2, 2), {1})
  fails({"triu", "unknown option 'diagnoal' (did you mean 'diagonal'?)"}, qkv.triu, qkv.ones(2, 2),
        {diagnoal = 1})
  lu.assertEquals(qkv.ones(2, 2):triu{}:tolist(), {{1, 1}, {0, 1}})   -- no options
  lu.assertEquals(qkv.ones(2, 2):triu{diagonal = 1}:tolist(), {{0, 1}, {0, 0}})
  fails({"tril", "#1", "qkv.Tensor expected"}, qkv.tril, {{1, 2}, {3, 4}})
end

---------------------------------------------------------------- any, all, logical
TestLogical = {}

function TestLogical:testAnyAll()
  local x = I{{0, 2, 0}, {0, 0, 0}}
  lu.assertEquals(x:any():item(), true)
  lu.assertEquals(x:all():item(), false)
  lu.assertEquals(x:any(2):tolist(), {true, false})
  lu.assertEquals(x:any(1, true):tolist(), {{false, true, false}})
  lu.assertEquals(qkv.ones(2, 3):all(-1):tolist(), {true, true})
  lu.assertEquals(qkv.tensor({0 / 0, 0}):any():item(), true, "NaN is nonzero")
  lu.assertEquals(qkv.zeros(0):any():item(), false)
  lu.assertEquals(qkv.zeros(0):all():item(), true)
  fails("dim", qkv.any, x, 3)
end

function TestLogical:testOps()
  local a, b = rand({3, 1}), rand({1, 4})
  for name, f in pairs{logical_and = function(x, y) return x ~= 0 and y ~= 0 end,
                       logical_or = function(x, y) return x ~= 0 or y ~= 0 end,
                       logical_xor = function(x, y) return (x ~= 0) ~= (y ~= 0) end} do
    local out = qkv[name](a, b)
    lu.assertEquals(out.dtype, "bool")
    lu.assertEquals(flat(out), each({3, 4}, f, a, b), name)
    lu.assertEquals(flat(a[name](a, b)), flat(out), name .. " method")
  end
  lu.assertEquals(flat(a:logical_not()), each({3, 1}, function(x) return x == 0 end, a))
  -- ~x: logical_not on bool, bitwise not on integers, as PyTorch's
  lu.assertEquals((~qkv.tensor({true, false})):tolist(), {false, true})
  lu.assertEquals((~I{0, 5, -1, math.maxinteger}):tolist(), {-1, -6, 0, math.mininteger})
  lu.assertEquals((~qkv.tensor({7}, "int32")).dtype, "int32")
  fails("bnot: ~x needs a bool or integer tensor, got float32", function() return ~a end)
  fails("logical_and: shapes (2,) and (3,) do not broadcast", qkv.logical_and, qkv.ones(2), qkv.ones(3))
  fails("qkv.Tensor expected", qkv.logical_or, qkv.ones(2), 1)
end

---------------------------------------------------------------- index_select, gather, embedding
TestIndex = {}

function TestIndex:testIndexSelect()
  local x = rand({3, 4, 2})
  for dim = 1, 3 do
    local n = x:size(dim)
    local idx = I{n, 1, n, -0 + 1}
    local out = x:index_select(dim, idx)
    local want = x:size()
    lu.assertEquals(out:size(dim), 4)
    for j, i in ipairs(idx:tolist()) do
      qkv.test.assertTensorEqual(out:narrow(dim, j, 1), x:narrow(dim, i, 1))
    end
    lu.assertEquals(#want, 3)
  end
  qkv.test.assertTensorEqual(x:transpose(1, 3):index_select(2, I{2}),
                             x:transpose(1, 3):narrow(2, 2, 1))
  lu.assertEquals(x:index_select(1, I{}).shape, {0, 4, 2})
  fails("index_select: index 4 is out of range for dim 1 of size 3", qkv.index_select, x, 1, I{1, 4})
  fails("index_select: index 0 is out of range for dim 2 of size 4", qkv.index_select, x, 2, I{0})
  fails("index_select: index must be an int64 tensor, got float32", qkv.index_select, x, 1, qkv.ones(1))
  fails("index_select: index must be 1-D, got (1, 1)", qkv.index_select, x, 1, I{{1}})
end

function TestIndex:testGather()
  local x = rand({3, 4})
  local idx = I{{4, 1}, {2, 2}, {1, 3}}
  local out = x:gather(2, idx)
  local xs = x:tolist()
  for i = 1, 3 do for j = 1, 2 do lu.assertEquals(out[{i, j}], xs[i][idx[{i, j}]]) end end
  local o1 = x:gather(1, I{{3, 1, 2, 3}})
  for j = 1, 4 do lu.assertEquals(o1[{1, j}], xs[({3, 1, 2, 3})[j]][j]) end
  lu.assertEquals(qkv.gather(x:t(), 1, I{{1}, {4}}):tolist(), {{xs[1][1]}, {xs[4 - 3][4]}})
  fails("gather: x is (3, 4) but index is (4, 1): index needs x's dims, none larger except dim 2",
        qkv.gather, x, 2, I{{1}, {1}, {1}, {1}})
  fails("gather: index 5 is out of range for dim 2 of size 4", qkv.gather, x, 2, I{{5}})
end

function TestIndex:testEmbedding()
  local W = rand({5, 3})
  local ids = I{{5, 1}, {2, 2}, {3, -0 + 4}}
  local out = qkv.embedding(ids, W)
  lu.assertEquals(out.shape, {3, 2, 3})
  local ws = W:tolist()
  for i = 1, 3 do for j = 1, 2 do lu.assertEquals(out[i][j]:tolist(), ws[ids[{i, j}]]) end end
  lu.assertEquals(qkv.embedding(ids:t(), W)[{2, 3}]:tolist(), ws[4])
  lu.assertEquals(qkv.embedding(I{}, W).shape, {0, 3})
  fails("embedding: index 6 is out of range for dim 1 of size 5", qkv.embedding, I{6}, W)
  fails("embedding: W must be (num_embeddings, dim), got (5,)", qkv.embedding, I{1}, qkv.ones(5))
  fails("embedding: index must be an int64 tensor, got float32", qkv.embedding, qkv.ones(1), W)
end

-- scatter_add_ and index_add_: gather's and index_select's inverses,
-- repeated positions adding up
function TestIndex:testScatterAndIndexAdd()
  local x = qkv.zeros(2, 3)
  lu.assertTrue(rawequal(x:scatter_add_(2, I{{1, 1, 3}, {2, 2, 2}}, qkv.tensor{{1, 2, 3}, {4, 5, 6}}), x))
  lu.assertEquals(x:tolist(), {{3, 0, 3}, {0, 15, 0}})
  local y = qkv.zeros(3, 2, "int64")
  y:index_add_(1, I{3, 1, 3}, qkv.tensor({{1, 2}, {3, 4}, {5, 6}}, "int64"))
  lu.assertEquals(y:tolist(), {{3, 4}, {0, 0}, {6, 8}})
  -- against a loop, on random positions and a transposed destination
  local base = qkv.zeros(4, 5)
  local idx = I{{2, 4, 4, 1, 2}, {3, 3, 1, 1, 4}}
  local src = qkv.randn(2, 5)
  base:t():t():scatter_add_(1, idx, src)
  local want, iv, sv = {}, idx:tolist(), src:tolist()
  for i = 1, 4 do want[i] = {0, 0, 0, 0, 0} end
  for i = 1, 2 do for j = 1, 5 do want[iv[i][j]][j] = want[iv[i][j]][j] + sv[i][j] end end
  for i = 1, 4 do for j = 1, 5 do lu.assertAlmostEquals(base[{i, j}], want[i][j], 1e-6) end end
  fails("index_add_: index 4 is out of range for dim 1 of size 3",
        function() return qkv.zeros(3, 2):index_add_(1, I{4}, qkv.ones(1, 2)) end)
  fails("scatter_add_: src is float64 but x is float32",
        function() return qkv.zeros(2):scatter_add_(1, I{1}, qkv.ones(1, "float64")) end)
  fails("index_add_: x is (3, 2), index (2,) and src (1, 2): index must be 1-D with src's size at dim 1",
        function() return qkv.zeros(3, 2):index_add_(1, I{1, 2}, qkv.ones(1, 2)) end)
  fails("cannot write into a tensor whose elements share memory",
        function() return qkv.zeros(1, 2):expand(3, 2):index_add_(1, I{1}, qkv.ones(1, 2)) end)
  -- src's other dims are x's (PyTorch's); a smaller src was added into a corner
  fails("and src x's size at every other dim",
        function() return qkv.zeros(3, 4):index_add_(1, I{1}, qkv.ones(1, 2)) end)
end

-- scatter_add_ with an index smaller than src (and than x): only the part
-- of src that index covers is added; the values are PyTorch 2's for the
-- same call (0-based index there)
function TestIndex:testScatterAddIndexSmallerThanSrc()
  local src = qkv.arange(1, 21):view(4, 5):float()           -- 1..20 row by row
  local idx = I{{1, 2, 3}, {3, 1, 2}}
  lu.assertEquals(qkv.zeros(3, 4):scatter_add_(2, idx, src):tolist(),
                  {{1, 2, 3, 0}, {7, 8, 6, 0}, {0, 0, 0, 0}})
  lu.assertEquals(qkv.zeros(3, 4):scatter_add_(1, idx, src):tolist(),
                  {{1, 7, 0, 0}, {0, 2, 8, 0}, {6, 0, 3, 0}})
  -- a transposed src, and an index longer than x along dim (within src)
  lu.assertEquals(qkv.zeros(3, 4):scatter_add_(1, idx, qkv.arange(1, 21):view(5, 4):float():t())
                    :tolist(), {{1, 6, 0, 0}, {0, 5, 10, 0}, {2, 0, 9, 0}})
  lu.assertEquals(qkv.zeros(3, 4):scatter_add_(2, I{{1, 1, 1, 1, 1}}, src):tolist(),
                  {{15, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}})
  -- what PyTorch refuses: index larger than x off dim, larger than src, other dims
  local msg = "index needs x's dims, none larger than src's, nor than x's except dim 2"
  fails("scatter_add_: x is (3, 4), index (4, 1) and src (4, 5): " .. msg,
        function() return qkv.zeros(3, 4):scatter_add_(2, I{{1}, {1}, {1}, {1}}, src) end)
  fails("scatter_add_: x is (3, 4), index (1, 6) and src (1, 5): " .. msg,
        function() return qkv.zeros(3, 4):scatter_add_(2, qkv.ones(1, 6):long(), qkv.ones(1, 5)) end)
  fails("scatter_add_: x is (3, 4), index (2,) and src (4, 5): " .. msg,
        function() return qkv.zeros(3, 4):scatter_add_(2, I{1, 1}, src) end)
end

---------------------------------------------------------------- sort, topk
TestSort = {}

local function refsort(list, desc)
  local items = {}
  for i, v in ipairs(list) do items[i] = {v, i} end
  local function key(v) return v ~= v and math.huge * 2 or v end
  table.sort(items, function(p, q)
    local a, b = p[1], q[1]
    local an, bn = a ~= a, b ~= b
    if an ~= bn then if desc then return an else return bn end end
    if not an and a ~= b then if desc then return a > b else return a < b end end
    return p[2] < q[2]
  end)
  local v, i = {}, {}
  for k, it in ipairs(items) do v[k], i[k] = it[1], it[2] end
  return v, i, key
end

local function same(a, b, what)
  lu.assertEquals(#a, #b, what)
  for k = 1, #a do
    if a[k] ~= a[k] then lu.assertTrue(b[k] ~= b[k], what) else lu.assertEquals(a[k], b[k], what) end
  end
end

function TestSort:testLinesAgainstReference()
  local x = rand({4, 7}, "float64")
  x[{2, 3}] = 0 / 0
  x[{3, 1}] = 1 / 0
  for _, desc in ipairs{false, true} do
    local v, i = x:sort(2, desc)
    for r = 1, 4 do
      local rv, ri = refsort(x[r]:tolist(), desc)
      same(v[r]:tolist(), rv, "values")
      lu.assertEquals(i[r]:tolist(), ri)
    end
    local vt, it = x:t():sort(1, desc)               -- the same, transposed
    qkv.test.assertTensorEqual(it, i:t():contiguous())
    lu.assertEquals(vt.shape, {7, 4})
  end
  local v, i = I{3, math.maxinteger, -2, math.maxinteger - 1}:sort()
  lu.assertEquals(v:tolist(), {-2, 3, math.maxinteger - 1, math.maxinteger})
  lu.assertEquals(i:tolist(), {3, 1, 4, 2})
  lu.assertEquals(qkv.tensor({true, false, true}):sort():tolist(), {false, true, true})
  lu.assertEquals(qkv.zeros(0):sort().shape, {0})
end

function TestSort:testTopk()
  local x = rand({3, 6})
  local v, i = x:topk(2)
  local vs, is = x:sort(2, true)
  qkv.test.assertTensorEqual(v, vs:narrow(2, 1, 2))
  qkv.test.assertTensorEqual(i, is:narrow(2, 1, 2))
  local v1, i1 = qkv.topk(x, 1, 1, false)
  local ms, mi = x:min(1, true)
  qkv.test.assertTensorEqual(v1, ms)
  lu.assertEquals(v1.shape, {1, 6})
  lu.assertEquals(x:gather(1, i1):tolist(), ms:tolist())
  lu.assertEquals(x:topk(0).shape, {3, 0})
  fails("topk: k = 7 is out of range for dim 2 of size 6", qkv.topk, x, 7)
  fails("topk: k = -1 is out of range", qkv.topk, x, -1)
  lu.assertNotNil(mi)
end

---------------------------------------------------------------- clamp, mm, bmm, dtypes
TestMisc = {}

function TestMisc:testClamp()
  local x = rand({2, 5})
  lu.assertEquals(flat(x:clamp(-1, 2)), each({2, 5}, function(v) return math.min(math.max(v, -1), 2) end, x))
  lu.assertEquals(flat(x:clamp(nil, 0)), each({2, 5}, function(v) return math.min(v, 0) end, x))
  lu.assertEquals(flat(x:clamp(1)), each({2, 5}, function(v) return math.max(v, 1) end, x))
  local lo = rand({5})
  lu.assertEquals(flat(qkv.clamp(x, lo)), each({2, 5}, math.max, x, lo))
  lu.assertEquals(I{-3, 0, 9}:clamp(0, 5):tolist(), {0, 0, 5})
  lu.assertEquals(I{-3, 0, 9}:clamp(0, 5).dtype, "int64")
  lu.assertEquals(I{-3, 0, 9}:clamp(0.5).dtype, "float32")
  lu.assertTrue(qkv.tensor({0 / 0}):clamp(0, 1)[1] ~= qkv.tensor({0 / 0}):clamp(0, 1)[1], "NaN stays")
  fails("clamp: at least one of min and max must be given", qkv.clamp, x)
  fails("clamp: not defined for bool tensors", qkv.clamp, x:gt(0), 0, 1)
end

function TestMisc:testMmBmm()
  local a, b = rand({2, 3}), rand({3, 4})
  qkv.test.assertTensorEqual(qkv.mm(a, b), a:matmul(b))
  local A, B = rand({5, 2, 3}), rand({5, 3, 4})
  qkv.test.assertTensorEqual(A:bmm(B), A:matmul(B))
  fails("mm: expects two 2-D tensors, got (3,) and (3, 4)", qkv.mm, rand({3}), b)
  fails("bmm: expects two 3-D tensors with the same batch, got (5, 2, 3) and (1, 3, 4)",
        qkv.bmm, A, rand({1, 3, 4}))
  fails("mm: (2, 3) @ (2, 4): inner dims 3 and 2 differ", qkv.mm, a, rand({2, 4}))
  fails('bmm: (5, 2, 3) @ (5, 3, 4): expected floating-point tensors, got float32 and int64: '
        .. 'for x:matmul(y), convert y with y:to("float32")', qkv.bmm, A, B:long())
  fails('mm: (2, 3) @ (3, 4): the dtypes must agree, got float16 and bfloat16: for x:matmul(y), '
        .. 'convert one with y:to("float16") or x:to("bfloat16")', qkv.mm, a:to("float16"),
        b:to("bfloat16"))
end

function TestMisc:testDtypeShorthands()
  local x = qkv.tensor({1.5, -2, 0})
  lu.assertEquals(x:long():tolist(), {1, -2, 0})
  lu.assertEquals(x:bool():tolist(), {true, true, false})
  lu.assertEquals(x:double().dtype, "float64")
  lu.assertEquals(I{1}:float().dtype, "float32")
  lu.assertTrue(rawequal(x:float(), x), "the same dtype returns x itself")
end

---------------------------------------------------------------- table indexing, T, mT
TestTableIndex = {}

function TestTableIndex:testReads()
  local x = qkv.arange(1, 25):view(2, 3, 4)
  qkv.test.assertTensorEqual(x[{2, {1, 2}}], x:select(1, 2):narrow(1, 1, 2))
  qkv.test.assertTensorEqual(x[{{}, 3}], x:select(2, 3))
  qkv.test.assertTensorEqual(x[{{}, {}, {-2, -1}}], x:narrow(3, 3, 2))
  qkv.test.assertTensorEqual(x[{{2}}], x:narrow(1, 2, 1))
  lu.assertEquals(x[{2, 3, 4}], 24)
  lu.assertEquals(x[{-1, -1, 1}], 21)
  lu.assertEquals(x[{{}, {3, 2}}].shape, {2, 0, 4})
  qkv.test.assertTensorEqual(x[{}], x)
  -- a view: writes through it reach x
  local v = x[{1, {2, 3}, 1}]
  v[1] = 100
  lu.assertEquals(x[{1, 2, 1}], 100)
end

function TestTableIndex:testWrites()
  local x = qkv.zeros(3, 4)
  x[{{}, 2}] = 7
  x[{1, {3, 4}}] = qkv.tensor({1, 2})
  x[{{2, 3}, {3, 4}}] = qkv.tensor({{5}, {6}})
  lu.assertEquals(x:tolist(), {{0, 7, 1, 2}, {0, 7, 5, 5}, {0, 7, 6, 6}})
  fails("index: value of shape (3,) does not broadcast to (2,)", function() x[{1, {1, 2}}] = qkv.ones(3) end)
  fails("cannot write into a tensor whose elements share memory",
        function() qkv.zeros(1, 3):expand(2, 3)[{{}, 1}] = qkv.tensor({1, 2}) end)
end

function TestTableIndex:testErrors()
  local x = qkv.ones(3, 4)
  fails("index: 4 is out of range for dim 1 of size 3", function() return x[{4}] end)
  fails("index: -5 is out of range for dim 2 of size 4", function() return x[{1, -5}] end)
  fails("index: 3 indices for a tensor of 2 dims", function() return x[{1, 1, 1}] end)
  fails("index: item 1 must be {}, {i} or {i, j}", function() return x[{{1, 2, 3}}] end)
  fails("index: item 2 of the index table must be a number or a table, got string",
        function() return x[{1, "a"}] end)
  fails("index: item 1 of the index table must hold integers, got number", function() return x[{1.5}] end)
  fails("index: range 1 ends before it starts", function() return x[{{3, 1}}] end)
  -- read raw: an __index on the table is not consulted
  local proxy = setmetatable({}, {__index = function() error("ran") end, __len = function() return 1 end})
  qkv.test.assertTensorEqual(x[proxy], x)
end

function TestTableIndex:testTranspose()
  local x = rand({3, 4})
  qkv.test.assertTensorEqual(x.T, x:t())
  local y = rand({2, 3, 4})
  qkv.test.assertTensorEqual(y.mT, y:transpose(2, 3))
  lu.assertEquals(qkv.ones(3).T.shape, {3})
  fails("index: x.T needs at most 2 dims, got (2, 3, 4); use x.mT or x:permute(...)", function() return y.T end)
  fails("index: x.mT needs at least 2 dims, got (3,)", function() return qkv.ones(3).mT end)
end

---------------------------------------------------------------- in place
TestInPlace = {}

function TestInPlace:testOpsReturnSelfAndAgree()
  local x, y = rand({2, 3}), rand({3})
  for name, f in pairs{add_ = "add", sub_ = "sub", mul_ = "mul", div_ = "div"} do
    local z = x:clone()
    lu.assertTrue(rawequal(z[name](z, y), z), name .. " returns self")
    qkv.test.assertTensorEqual(z, x[f](x, y), name)
    local w = x:clone()
    w[name](w, 2)
    qkv.test.assertTensorEqual(w, x[f](x, 2), name .. " number")
  end
  local z = x:clone()
  lu.assertTrue(rawequal(z:fill_(3), z))
  lu.assertEquals(flat(z), {3, 3, 3, 3, 3, 3})
  lu.assertEquals(flat(z:zero_()), {0, 0, 0, 0, 0, 0})
  qkv.test.assertTensorEqual(z:copy_(x), x)
  qkv.test.assertTensorEqual(z:clamp_(-1, 1), x:clamp(-1, 1))
  qkv.test.assertTensorEqual(z:masked_fill_(z:gt(0), 9), x:clamp(-1, 1):masked_fill(z:gt(0), 9))
  local i = I{1, 2}
  i:add_(3)
  lu.assertEquals(i:tolist(), {4, 5})
  i:fill_(math.maxinteger)
  lu.assertEquals(i[1], math.maxinteger)
end

-- a write through a view writes its base; an overlapping source is read whole first
function TestInPlace:testViewsAndOverlap()
  local b = qkv.arange(8)
  b:narrow(1, 3, 4):mul_(10)
  lu.assertEquals(b:tolist(), {0, 1, 20, 30, 40, 50, 6, 7})
  local c = qkv.arange(8)
  c:narrow(1, 2, 6):add_(c:narrow(1, 1, 6))
  lu.assertEquals(c:tolist(), {0, 1, 3, 5, 7, 9, 11, 7})
  local d = qkv.arange(4)
  d:add_(d)
  lu.assertEquals(d:tolist(), {0, 2, 4, 6})
  local m = qkv.arange(6):view(2, 3)
  m:t():copy_(m:t():contiguous() * 0 + m:t())
  lu.assertEquals(m:tolist(), {{0, 1, 2}, {3, 4, 5}})
end

function TestInPlace:testErrors()
  local e = qkv.zeros(1, 3):expand(2, 3)
  for _, f in ipairs{function() return e:add_(1) end, function() return e:fill_(1) end,
                     function() return e:zero_() end, function() return e:copy_(qkv.ones(3)) end,
                     function() return e:masked_fill_(qkv.ones(3):eq(1), 1) end,
                     function() return e:clamp_(0) end} do
    fails("cannot write into a tensor whose elements share memory (an expanded view)", f)
  end
  fails("add_: the result is float32, which x (int64) cannot hold", function() return I{1}:add_(0.5) end)
  fails("div_: the result is float32, which x (int64) cannot hold", function() return I{1}:div_(2) end)
  fails("add_: the result is int64, which x (bool) cannot hold", function() return qkv.ones(1):eq(1):add_(1) end)
  fails("add_: y of shape (2, 3) does not broadcast to x's shape (3,)", function() return qkv.ones(3):add_(qkv.ones(2, 3)) end)
  fails("copy_: src of shape (4,) does not broadcast to x's shape (3,)", function() return qkv.ones(3):copy_(qkv.ones(4)) end)
  fails("masked_fill_: mask of shape (2,) does not broadcast to x's shape (3,)",
        function() return qkv.ones(3):masked_fill_(qkv.ones(2):eq(1), 0) end)
  fails("fill_: 1e+300 does not fit in int64", function() return I{1}:fill_(1e300) end)
  fails("clamp_: the result is float32, which x (int64) cannot hold", function() return I{1}:clamp_(0.5) end)
end

os.exit(lu.LuaUnit.run(), true)
