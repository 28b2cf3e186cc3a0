-- test_composite.lua: PyTorch's functions that qkv composes of its ops
-- (issue 30; stdlib/qkv/composite/, qkv.composite): flatten, unflatten, chunk, split, the *_like
-- factories and x:new_*, randint, linspace, logspace, norm, scatter,
-- argsort, repeat_interleave, roll, flip, half, bfloat16, outer, allclose.
-- Values against PyTorch's (tests/fixtures/composite/torch_composite.lua,
-- written by torch_composite.py), each as a function and as a method, with
-- negative dims; randint against qkv's own generator and by its counts;
-- then every bad argument as an error naming the function.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local F = dofile("tests/fixtures/composite/torch_composite.lua")
local fails = R.fails

local TOL = {float64 = 1e-12, float32 = 2e-6, float16 = 0, bfloat16 = 0}

-- a fixture array as a tensor of its dtype (on the default device)
local function T(a)
  if #a.shape == 0 then return qkv.tensor(a.data[1], a.dtype) end
  if #a.data == 0 then return qkv.zeros(a.shape, a.dtype) end
  return qkv.tensor(a.data, a.dtype):reshape(table.unpack(a.shape))
end

local function flat(x)
  if x:dim() == 0 then return {x:item()} end
  return R.flatten(x:tolist())
end

-- got matches the fixture array: dtype, shape, values (NaN where NaN,
-- the same infinities, within the dtype's tolerance relative to the value)
local function same(got, want, what)
  lu.assertTrue(qkv.is_tensor(got), what .. ": not a tensor")
  lu.assertEquals(got.dtype, want.dtype, what .. ": dtype")
  lu.assertEquals(got.shape, want.shape, what .. ": shape")
  local g, tol = flat(got), TOL[want.dtype] or 0
  for i, w in ipairs(want.data) do
    local v = g[i]
    if type(w) == "number" and w ~= w then
      lu.assertTrue(v ~= v, what .. ": item " .. i .. " should be nan, got " .. tostring(v))
    elseif type(w) ~= "number" or w == math.huge or w == -math.huge or tol == 0 then
      lu.assertEquals(v, w, what .. ": item " .. i)
    else
      lu.assertTrue(math.abs(v - w) <= tol * math.max(1, math.abs(w)),
                    string.format("%s: item %d is %.17g, PyTorch %.17g", what, i, v, w))
    end
  end
end

local function same_pieces(got, want, what)
  lu.assertEquals(#got, #want, what .. ": pieces")
  for i, w in ipairs(want) do same(got[i], w, what .. " piece " .. i) end
end

---------------------------------------------------------------- shapes

TestShapes = {}

function TestShapes:testFlattenAsPyTorch()
  for k, c in ipairs(F.flatten) do
    local x = T(c.x)
    same(x:flatten(c.start, c.stop), c.want, "flatten " .. k)
    same(qkv.flatten(x, c.start, c.stop), c.want, "qkv.flatten " .. k)
  end
end

function TestShapes:testFlattenIsAViewWhenItCanBe()
  local x = qkv.zeros(2, 3, 4)
  local y = x:flatten(2)
  y[{1, 5}] = 7
  lu.assertEquals(x[1][2][1], 7)
  -- a transposed x flattens to its values in its own order (a copy)
  local t = qkv.arange(6):view(2, 3):t()
  lu.assertEquals(t:flatten():tolist(), {0, 3, 1, 4, 2, 5})
  lu.assertTrue(rawequal(t:flatten(2, 2), t))          -- nothing to join: x itself
end

function TestShapes:testUnflattenAsPyTorch()
  for k, c in ipairs(F.unflatten) do
    local x = T(c.x)
    same(x:unflatten(c.dim, c.sizes), c.want, "unflatten " .. k)
    same(qkv.unflatten(x, c.dim, c.sizes), c.want, "qkv.unflatten " .. k)
  end
  -- a qkv.Size is a list of sizes too
  local x = qkv.ones(2, 12)
  lu.assertEquals(x:unflatten(2, qkv.ones(3, 4).shape).shape, {2, 3, 4})
end

function TestShapes:testChunkAsPyTorch()
  for k, c in ipairs(F.chunk) do
    local x = T(c.x)
    same_pieces({x:chunk(c.chunks, c.dim)}, c.want, "chunk " .. k)
    same_pieces({qkv.chunk(x, c.chunks, c.dim)}, c.want, "qkv.chunk " .. k)
    if c.dim == 1 then same_pieces({x:chunk(c.chunks)}, c.want, "chunk " .. k .. " dim 1") end
  end
end

function TestShapes:testSplitAsPyTorch()
  for k, c in ipairs(F.split) do
    local x = T(c.x)
    same_pieces({x:split(c.size, c.dim)}, c.want, "split " .. k)
    same_pieces({qkv.split(x, c.size, c.dim)}, c.want, "qkv.split " .. k)
  end
end

function TestShapes:testPiecesAreViews()
  local x = qkv.zeros(6)
  local a, b, c = x:chunk(3)
  lu.assertNil(select(4, x:chunk(3)))
  b:fill_(1)
  c[2] = 5
  lu.assertEquals(x:tolist(), {0, 0, 1, 1, 0, 5})
  local q, k, v = qkv.arange(12):view(2, 6):chunk(3, -1)   -- q, k, v = y.chunk(3, dim=-1)
  lu.assertEquals(k:tolist(), {{2, 3}, {8, 9}})
  lu.assertEquals({q.shape, v.shape}, {{2, 2}, {2, 2}})
  lu.assertEquals(a.shape, {2})
end

---------------------------------------------------------------- factories

TestFactories = {}

function TestFactories:testLikeKeepsShapeDtypeAndDevice()
  local x = qkv.tensor({{1, 2, 3}, {4, 5, 6}}, "float64")
  for name, v in pairs{zeros_like = 0, ones_like = 1, empty_like = 0} do
    local y = qkv[name](x)
    lu.assertEquals({y.shape, y.dtype, y.device}, {x.shape, x.dtype, x.device}, name)
    lu.assertEquals(flat(y), {v, v, v, v, v, v}, name)
    lu.assertEquals(qkv[name](x, {dtype = "int32"}).dtype, "int32", name)
  end
  local f = qkv.full_like(x, 2.5)
  lu.assertEquals({f.dtype, flat(f)}, {"float64", {2.5, 2.5, 2.5, 2.5, 2.5, 2.5}})
  lu.assertEquals(qkv.full_like(x, 7, {dtype = "int64"}):tolist(), {{7, 7, 7}, {7, 7, 7}})
  lu.assertEquals(qkv.zeros_like(qkv.tensor(3)).shape, {})
  lu.assertEquals(qkv.ones_like(x, {device = "cpu"}).device, "cpu")
end

function TestFactories:testRandomLikeDrawsFromTheGenerator()
  local x = qkv.ones(3, 4, "float64")
  for name, maker in pairs{rand_like = qkv.rand, randn_like = qkv.randn} do
    qkv.manual_seed(11)
    local a = qkv[name](x)
    qkv.seed(11)
    local b = maker({3, 4}, "float64")
    lu.assertEquals({a.shape, a.dtype}, {x.shape, "float64"})
    qkv.test.assertTensorEqual(a, b)
    lu.assertEquals(qkv[name](x, {dtype = "float32"}).dtype, "float32")
  end
  local u = qkv.rand_like(qkv.zeros(1000))
  lu.assertTrue(u:min():item() >= 0 and u:max():item() < 1)
end

function TestFactories:testNewKeepDtypeAndDevice()
  local x = qkv.ones(2, "int32")
  local z = x:new_zeros({2, 3})
  lu.assertEquals({z.shape, z.dtype, z.device, flat(z)}, {{2, 3}, "int32", x.device, {0, 0, 0, 0, 0, 0}})
  lu.assertEquals(x:new_ones(3):tolist(), {1, 1, 1})
  lu.assertEquals(x:new_zeros(2, 3).shape, {2, 3})             -- sizes as arguments
  lu.assertEquals(x:new_empty(1, 2, {dtype = "float64"}).dtype, "float64")
  lu.assertEquals(x:new_ones(3).dtype, "int32")
  lu.assertEquals(x:new_empty({0, 2}).shape, {0, 2})
  lu.assertEquals(x:new_full({2}, 9):tolist(), {9, 9})
  lu.assertEquals(x:new_full({2}, 9, {dtype = "float64"}).dtype, "float64")
  lu.assertEquals(x:new_zeros(x.shape, {dtype = "bool"}):tolist(), {false, false})
end

-- the shape may hold PyTorch's keywords, as qkv.zeros's does: its sizes
-- under size, a dtype and a device (issue 46: they were ignored)
function TestFactories:testKeywordsInTheShape()
  local x = qkv.ones(2, "int32")
  local z = x:new_zeros{2, 3, dtype = "int64"}
  lu.assertEquals({z.shape, z.dtype, flat(z)}, {{2, 3}, "int64", {0, 0, 0, 0, 0, 0}})
  lu.assertEquals(x:new_ones{size = {2, 2}}:tolist(), {{1, 1}, {1, 1}})
  lu.assertEquals(x:new_ones{size = {2}, dtype = "float64"}.dtype, "float64")
  lu.assertEquals(x:new_empty{3, device = "cpu"}.shape, {3})
  lu.assertEquals(x:new_full({2, dtype = "float64"}, 0.5):tolist(), {0.5, 0.5})
  lu.assertEquals(x:new_zeros{size = x.shape}.shape, {2})
  lu.assertEquals(qkv.randint(0, 5, {size = {3}}).shape, {3})
  lu.assertEquals(qkv.randint(5, {size = {2, 2}}).shape, {2, 2})
  local r = qkv.randint(0, 5, {3, dtype = "int32"})
  lu.assertEquals({r.shape, r.dtype}, {{3}, "int32"})
  lu.assertEquals(qkv.randint(2, {size = {4}, dtype = "float64"}).dtype, "float64")
  -- the same draws as the sizes as items
  qkv.manual_seed(5)
  local a = qkv.randint(0, 100, {size = {8}})
  qkv.manual_seed(5)
  qkv.test.assertTensorEqual(a, qkv.randint(0, 100, {8}))
end

function TestFactories:testLinspaceAsPyTorch()
  for k, c in ipairs(F.linspace) do
    same(qkv.linspace(c.a, c.b, c.n, {dtype = c.dtype}), c.want, "linspace " .. k)
    if c.dtype == "float32" then same(qkv.linspace(c.a, c.b, c.n), c.want, "linspace " .. k) end
  end
end

function TestFactories:testLogspaceAsPyTorch()
  for k, c in ipairs(F.logspace) do
    same(qkv.logspace(c.a, c.b, c.n, c.base, {dtype = c.dtype}), c.want, "logspace " .. k)
    if c.base == nil then
      same(qkv.logspace(c.a, c.b, c.n, {dtype = c.dtype}), c.want, "logspace " .. k .. " opts")
    end
  end
end

-- randint is floor(u * (high - low)) + low for u the generator's float64
-- uniforms: the same seed gives the same integers
function TestFactories:testRandintFromTheGenerator()
  qkv.manual_seed(5)
  local r = qkv.randint(-3, 7, {4, 5})
  lu.assertEquals({r.shape, r.dtype}, {{4, 5}, "int64"})
  qkv.seed(5)
  local u = qkv.rand({4, 5}, "float64")
  local want = {}
  for i, v in ipairs(flat(u)) do want[i] = math.floor(v * 10) - 3 end
  lu.assertEquals(flat(r), want)
  qkv.manual_seed(5)
  qkv.test.assertTensorEqual(qkv.randint(-3, 7, {4, 5}), r)
  -- randint(high, size) is randint(0, high, size)
  qkv.manual_seed(5)
  local h = qkv.randint(10, {4, 5})
  for i, v in ipairs(flat(h)) do lu.assertEquals(v, want[i] + 3) end
  lu.assertEquals(qkv.randint(0, 2, 3, {dtype = "int32"}).dtype, "int32")
  lu.assertEquals(qkv.randint(0, 2, {0}).shape, {0})
end

function TestFactories:testRandintCounts()
  qkv.manual_seed(1)
  local r = qkv.randint(1, 11, {20000})
  lu.assertEquals(r:min():item(), 1)
  lu.assertEquals(r:max():item(), 10)
  for v = 1, 10 do
    local n = r:eq(v):sum():item()
    lu.assertTrue(n > 1700 and n < 2300, v .. " drawn " .. n .. " times of 20000")
  end
  -- a span of 2^53, far from 0
  local big = qkv.randint(math.maxinteger - (1 << 53) + 1, math.maxinteger, {64})
  lu.assertTrue(big:min():item() >= math.maxinteger - (1 << 53) + 1)
end

function TestFactories:testDtypeShorthands()
  local x = qkv.tensor{1.5, -2.5}
  for k, name in ipairs{"half", "bfloat16", "int", "long", "float", "double", "bool"} do
    local want = ({"float16", "bfloat16", "int32", "int64", "float32", "float64", "bool"})[k]
    lu.assertEquals(x[name](x).dtype, want, name)
  end
  local h = T(F.half.x)
  same(h:half(), F.half.half, "half")
  same(h:bfloat16(), F.half.bfloat16, "bfloat16")
  local y = qkv.ones(2, "float16")
  lu.assertTrue(rawequal(y:half(), y))
end

---------------------------------------------------------------- norm

TestNorm = {}

function TestNorm:testAsPyTorch()
  for k, c in ipairs(F.norm) do
    local x = T(c.x)
    same(x:norm(c.p, c.dim, c.keepdim), c.want, "norm " .. k)
    same(qkv.norm(x, c.p, c.dim, c.keepdim), c.want, "qkv.norm " .. k)
    -- PyTorch's keywords (issue 46: x:norm(2, {dim = -1}) was |x|)
    same(x:norm(c.p, {dim = c.dim, keepdim = c.keepdim}), c.want, "norm keywords " .. k)
    same(x:norm{p = c.p, dim = c.dim, keepdim = c.keepdim}, c.want, "norm{} " .. k)
  end
end

-- dim = {} is every dim, as PyTorch's dim=[] (issue 46: it was |x|
-- elementwise); keepdim keeps them all as 1
function TestNorm:testEmptyDimsAreAll()
  local x = qkv.tensor({{3, -4}, {0, 12}}, "float64")
  lu.assertEquals(x:norm(2, {}):item(), 13)
  lu.assertEquals(x:norm(1, {}, true):tolist(), {{19}})
  lu.assertEquals(x:norm(2, {dim = {}}):item(), 13)
  lu.assertEquals(x:norm{}:item(), 13)
  lu.assertEquals(x:norm(2, {dim = -1}):tolist(), {5, 12})
  lu.assertEquals(x:norm(2, {dim = 1, keepdim = true}):tolist(), {{3, math.sqrt(160)}})
  lu.assertEquals(x:norm(2, -1, false, "float32").dtype, "float32")
  lu.assertEquals(qkv.norm(x:float(), 2, {dtype = "float64"}):item(), 13)
end

function TestNorm:testPIsAnyNumber()
  local x = qkv.tensor({3, -4}, "float64")
  lu.assertEquals(x:norm():item(), 5)
  lu.assertEquals(x:norm(1):item(), 7)
  lu.assertEquals(x:norm(math.huge):item(), 4)
  lu.assertEquals(x:norm(-math.huge):item(), 3)
  lu.assertEquals(x:norm(0):item(), 2)
  lu.assertAlmostEquals(x:norm(3):item(), (27 + 64) ^ (1 / 3), 1e-12)
  lu.assertEquals(x:norm("fro"):item(), 5)
end

---------------------------------------------------------------- scatter

TestScatter = {}

function TestScatter:testAsPyTorch()
  for k, c in ipairs(F.scatter) do
    local x, index = T(c.x), T(c.index)
    local src = c.src and T(c.src) or c.value
    local before = x:clone()
    same(x:scatter(c.dim, index, src), c.want, "scatter " .. k)
    same(qkv.scatter(x, c.dim, index, src), c.want, "qkv.scatter " .. k)
    qkv.test.assertTensorEqual(x, before)                  -- scatter leaves x
    local y = x:clone()
    lu.assertTrue(rawequal(y:scatter_(c.dim, index, src), y), "scatter_ returns x")
    same(y, c.want, "scatter_ " .. k)
  end
end

-- reduce = "add" or "multiply": every write combines with the target,
-- repeated ones too, a value as well as a tensor; bool adds with or and
-- multiplies with and (issue 46: reduce was ignored)
function TestScatter:testReduceAsPyTorch()
  for k, c in ipairs(F.scatter_reduce) do
    local x, index = T(c.x), T(c.index)
    local src = c.src and T(c.src) or c.value
    local what = "scatter " .. c.reduce .. " " .. k
    same(x:scatter(c.dim, index, src, c.reduce), c.want, what)
    same(qkv.scatter(x, c.dim, index, src, {reduce = c.reduce}), c.want, what .. " keyword")
    same(x:scatter{dim = c.dim, index = index, [c.src and "src" or "value"] = src,
                   reduce = c.reduce}, c.want, what .. " keywords")
    local y = x:clone()
    lu.assertTrue(rawequal(y:scatter_(c.dim, index, src, c.reduce), y), "scatter_ returns x")
    same(y, c.want, "scatter_ " .. what)
  end
end

-- with reduce = "add" the gradient is g to x everywhere and g's gathered
-- values to src; "multiply" has none (nor has PyTorch's)
function TestScatter:testReduceGradients()
  require "qkv.autograd"
  local x = qkv.tensor({{1, 2, 3}, {4, 5, 6}}, "float64"):requires_grad_()
  local src = qkv.tensor({{1, 1, 1}, {1, 1, 1}}, "float64"):requires_grad_()
  local index = qkv.tensor({{1, 1, 2}, {1, 2, 2}}, "int64")
  local g = qkv.tensor({{1, 2, 3}, {4, 5, 6}}, "float64")
  local out = x:scatter(1, index, src, "add")
  lu.assertEquals(out:detach():tolist(), {{3, 3, 3}, {4, 6, 8}})
  local loss = (out * g):sum()
  loss:backward()
  lu.assertEquals(x.grad:tolist(), g:tolist())
  lu.assertEquals(src.grad:tolist(), {{1, 2, 6}, {1, 5, 6}})
  fails("scatter: reduce = \"multiply\" has no gradient", x.scatter, x, 1, index, src,
        "multiply")
  lu.assertEquals(qkv.no_grad(x.scatter, x, 1, index, 2, "multiply"):tolist(),
                  {{4, 4, 3}, {4, 10, 24}})
end

-- repeated targets: the last write along dim wins, as PyTorch's CPU
-- kernel does (it leaves the order unspecified; qkv makes it so everywhere)
function TestScatter:testLastWriteWins()
  local x = qkv.zeros(1, 3)
  local index = qkv.tensor({{2, 2, 2, 1, 2}}, "int64")
  local y = x:scatter(2, index, qkv.tensor{{10, 20, 30, 40, 50}})
  lu.assertEquals(y:tolist(), {{40, 50, 0}})
  -- infinities and NaN are written as they are
  y = x:scatter(2, qkv.tensor({{1, 1, 3}}, "int64"), qkv.tensor{{0 / 0, math.huge, -math.huge}})
  lu.assertEquals(y:tolist(), {{math.huge, 0, -math.huge}})
  -- float16 and bool go through the same writes
  local h = qkv.zeros(2, 2, "float16"):scatter(1, qkv.tensor({{2, 2}, {2, 1}}, "int64"),
                                                qkv.tensor({{1, 2}, {3, 4}}, "float16"))
  lu.assertEquals({h.dtype, h:tolist()}, {"float16", {{0, 4}, {3, 2}}})
  local b = qkv.zeros(3, "bool"):scatter(1, qkv.tensor({3, 1, 3}, "int64"), qkv.tensor{true, true, false})
  lu.assertEquals(b:tolist(), {true, false, false})
end

function TestScatter:testScatterIntoAView()
  local base = qkv.zeros(3, 3)
  local col = base:select(2, 2)                       -- a strided view
  col:scatter_(1, qkv.tensor({3, 1}, "int64"), qkv.tensor{5, 6})
  lu.assertEquals(base:tolist(), {{0, 6, 0}, {0, 0, 0}, {0, 5, 0}})
end

---------------------------------------------------------------- selection

TestSelection = {}

function TestSelection:testArgsortAsPyTorch()
  for k, c in ipairs(F.argsort) do
    local x = T(c.x)
    same(x:argsort(c.dim, c.descending), c.want, "argsort " .. k)
    same(qkv.argsort(x, c.dim, c.descending), c.want, "qkv.argsort " .. k)
  end
  lu.assertEquals(qkv.tensor(3):argsort():item(), 1)
end

function TestSelection:testRepeatInterleaveAsPyTorch()
  for k, c in ipairs(F.repeat_interleave) do
    local x = T(c.x)
    local r = c.repeats or qkv.tensor(c.repeats_tensor, "int64")
    same(x:repeat_interleave(r, c.dim), c.want, "repeat_interleave " .. k)
    same(qkv.repeat_interleave(x, r, c.dim), c.want, "qkv.repeat_interleave " .. k)
    if c.repeats_tensor then   -- a Lua list of repeats too
      same(x:repeat_interleave(c.repeats_tensor, c.dim), c.want, "repeat_interleave list " .. k)
    end
  end
end

function TestSelection:testRollAsPyTorch()
  for k, c in ipairs(F.roll) do
    local x = T(c.x)
    same(x:roll(c.shifts, c.dims), c.want, "roll " .. k)
    same(qkv.roll(x, c.shifts, c.dims), c.want, "qkv.roll " .. k)
  end
end

function TestSelection:testFlipAsPyTorch()
  for k, c in ipairs(F.flip) do
    local x = T(c.x)
    same(x:flip(c.dims), c.want, "flip " .. k)
    same(qkv.flip(x, c.dims), c.want, "qkv.flip " .. k)
    same(x:flip(table.unpack(c.dims)), c.want, "flip " .. k .. " as arguments")
    -- PyTorch's keyword (issue 46: x:flip{dims = {1}} was x)
    same(x:flip{dims = c.dims}, c.want, "flip{dims} " .. k)
    same(qkv.flip(x, {dims = c.dims}), c.want, "qkv.flip{dims} " .. k)
  end
end

-- every staple takes PyTorch's keywords in an options table, last
function TestSelection:testKeywords()
  local x = qkv.arange(12.0):view(3, 4)
  local eq = qkv.test.assertTensorEqual
  eq(x:flatten{start_dim = 1, end_dim = 2}, x:flatten(1, 2))
  eq(x:unflatten{dim = 2, sizes = {2, 2}}, x:unflatten(2, {2, 2}))
  eq(x:unflatten(2, {sizes = {2, -1}}), x:unflatten(2, {2, 2}))
  eq(select(2, x:chunk{chunks = 2, dim = 2}), select(2, x:chunk(2, 2)))
  eq(select(2, x:split(3, {dim = 2})), select(2, x:split(3, 2)))
  eq(select(2, x:split{split_size_or_sections = {1, 3}, dim = -1}), x:narrow(2, 2, 3))
  eq(select(2, x:split{split_size = 1}), x:narrow(1, 2, 1))
  eq(x:argsort{dim = 1, descending = true, stable = true}, x:argsort(1, true))
  eq(x:argsort{}, x:argsort())
  eq(x:roll{shifts = {1, -1}, dims = {1, 2}}, x:roll({1, -1}, {1, 2}))
  eq(x:roll(1, {dims = 2}), x:roll(1, 2))
  eq(x:repeat_interleave{repeats = 2, dim = 1}, x:repeat_interleave(2, 1))
  eq(qkv.outer(x[1], {vec2 = x[2]}), qkv.outer(x[1], x[2]))
  lu.assertTrue(qkv.allclose(qkv.ones(2), qkv.ones(2) + 1e-3, {rtol = 1e-2}))
  lu.assertFalse(qkv.allclose(qkv.ones(2), qkv.ones(2) + 1e-3, {atol = 0}))
  lu.assertTrue(x:allclose{other = x:clone(), equal_nan = true})
end

function TestSelection:testResultsAreCopies()
  local x = qkv.arange(4)
  for _, y in ipairs{x:flip(1), x:roll(0), x:roll(4, 1), x:flip({})} do
    y[1] = 99
    lu.assertEquals(x:tolist(), {0, 1, 2, 3})
  end
end

---------------------------------------------------------------- products, comparisons

TestCompare = {}

function TestCompare:testOuterAsPyTorch()
  for k, c in ipairs(F.outer) do
    local a, b = T(c.a), T(c.b)
    same(qkv.outer(a, b), c.want, "outer " .. k)
    same(a:outer(b), c.want, "a:outer " .. k)
  end
end

function TestCompare:testAllcloseAsPyTorch()
  for k, c in ipairs(F.allclose) do
    local a, b = T(c.a), T(c.b)
    lu.assertEquals(qkv.allclose(a, b, c.rtol, c.atol, c.equal_nan), c.want, "allclose " .. k)
    lu.assertEquals(a:allclose(b, c.rtol, c.atol, c.equal_nan), c.want, "a:allclose " .. k)
  end
end

---------------------------------------------------------------- loading

-- the composite functions load on first use: a qkv function of theirs, or a method the
-- C ones lack (then x:flaten's error suggests flatten); the REPL completes them
TestLoading = {}

local EXE = arg and arg[-1] or "build/qkv"
local sh = dofile("tests/helpers/shell.lua")

function TestLoading:testOnFirstUse()
  local out = sh.exe(EXE, "-e", "print(package.loaded['qkv.composite'] == nil) " ..
    "print(qkv.ones(2, 3):flatten().shape, package.loaded['qkv.composite'] ~= nil)")
  lu.assertEquals(out, "true\n(6,)\ttrue\n")
  out = sh.exe(EXE, "-e", "print(qkv.linspace(0, 1, 2), qkv.ones(2):half().dtype)")
  lu.assertEquals(out, "tensor([0., 1.])\tfloat16\n")
  local code
  out, code = sh.exe(EXE, "-e", "qkv.ones(2):flaten()")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "a tensor has no field 'flaten' (did you mean 'flatten'?)")
end

function TestLoading:testReplCompletes()
  _G.composite_x = qkv.ones(2)
  local repl = require "qkv.repl"
  lu.assertEquals(repl._complete("composite_x:repeat_i"), {"composite_x:repeat_interleave"})
  lu.assertEquals(repl._complete("qkv.zeros_l"), {"qkv.zeros_like"})
  _G.composite_x = nil
end

---------------------------------------------------------------- errors

TestErrors = {}

function TestErrors:testShapes()
  local x = qkv.ones(2, 3, 4)
  fails({"flatten: start_dim 3 comes after end_dim 1", "(2, 3, 4)"}, x.flatten, x, 3, 1)
  fails("flatten: start_dim 4 out of range [-3, 3] for x of shape (2, 3, 4)", x.flatten, x, 4)
  fails("flatten: end_dim must be an integer, got 2.5", qkv.flatten, x, 1, 2.5)
  fails("flatten: x must be a tensor, got number", qkv.flatten, 3)
  fails("unflatten: sizes {5, -1} cannot make dim 2 of size 3", x.unflatten, x, 2, {5, -1})
  fails("unflatten: sizes {2, 2} multiply to 4, but dim 2 of x (2, 3, 4) is 3", x.unflatten, x, -2, {2, 2})
  fails("unflatten: sizes has more than one -1", x.unflatten, x, 1, {-1, -1})
  fails("unflatten: sizes is empty", x.unflatten, x, 1, {})
  fails("unflatten: sizes must be a list of integers, got number", x.unflatten, x, 1, 2)
  fails("chunk: chunks must be positive, got 0", x.chunk, x, 0)
  fails("chunk: dim -4 out of range [-3, 3]", x.chunk, x, 2, -4)
  fails("chunk: chunks must be an integer, got 1.5", x.chunk, x, 1.5)
end

function TestErrors:testSplit()
  local x = qkv.ones(2, 3, 4)
  fails("split: split_sizes {1, 1} add up to 2, but dim 2 of x (2, 3, 4) is 3", x.split, x, {1, 1}, 2)
  fails("split: split_size must be positive, got 0", x.split, x, 0)
  fails("split: split_size must be positive, got -1", x.split, x, -1)
  fails("split: split_sizes[2] is -1", x.split, x, {3, -1}, 2)
  fails("split: split_size must be an integer or a list of integers, got string", x.split, x, "2")
end

function TestErrors:testFactories()
  local x = qkv.ones(2)
  fails("zeros_like: unknown option 'dtpye' (did you mean 'dtype'?)", qkv.zeros_like, x, {dtpye = "int64"})
  fails("ones_like: unknown dtype 'float8'", qkv.ones_like, x, {dtype = "float8"})
  fails("full_like: unknown device 'gpu' (cpu, cuda)", qkv.full_like, x, 1, {device = "gpu"})
  fails("full_like: fill_value must be a number or a boolean, got nil", qkv.full_like, x)
  fails("empty_like: options must be a table, got string", qkv.empty_like, x, "int64")
  fails("randn_like: random tensors are floats, and x is int64", qkv.randn_like, qkv.ones(2, "int64"))
  fails("rand_like: x must be a tensor, got table", qkv.rand_like, {1, 2})
  fails("new_zeros: size[2] must be an integer, got 2.5", x.new_zeros, x, {1, 2.5})
  fails("new_ones: size: size 1 is negative (-1)", x.new_ones, x, -1)
  fails("new_zeros: size 2 must be an integer, got string", x.new_zeros, x, 2, "3", {})
  fails("new_zeros: size[2] must be an integer, got 1.5", x.new_zeros, x, 2, 1.5)
  fails("new_full: fill_value must be a number or a boolean, got table", x.new_full, x, {2}, {})
  fails("randint: low 3 must be less than high 3", qkv.randint, 3, 3, {2})
  fails("randint: high must be an integer, got 2.5", qkv.randint, 0, 2.5, {2})
  fails("randint: size is missing", qkv.randint, 0, 5)
  fails("randint: high - low must be at most 2^53", qkv.randint, math.mininteger, math.maxinteger, {1})
  fails("randint: [0, 3000000000) does not fit in int32", qkv.randint, 0, 3000000000, {1}, {dtype = "int32"})
  fails("linspace: steps must be non-negative, got -1", qkv.linspace, 0, 1, -1)
  fails("linspace: steps must be an integer, got 2.5", qkv.linspace, 0, 1, 2.5)
  fails("linspace: end must be a number, got string", qkv.linspace, 0, "1", 2)
  fails("logspace: base must be a number, got string", qkv.logspace, 0, 1, 2, "e")
  fails("manual_seed: seed must be an integer, got 1.5", qkv.manual_seed, 1.5)
end

function TestErrors:testNorm()
  local x = qkv.ones(2, 3)
  fails("norm: x must be a float tensor, got int64 (convert it with x:float())", qkv.norm, qkv.ones(2, "int64"))
  fails("norm: p = 'nuc' (the nuclear norm) is not supported", x.norm, x, "nuc")
  fails("norm: p must be a number, math.huge, -math.huge or 'fro', got 'l2'", x.norm, x, "l2")
  fails("norm: p must be a number, math.huge, -math.huge or 'fro', got nan", x.norm, x, 0 / 0)
  fails("norm: dim 3 out of range [-2, 2] for x of shape (2, 3)", x.norm, x, 2, 3)
  fails("norm: dim names dim 1 twice", x.norm, x, 2, {1, -2})
  fails("norm: keepdim must be a boolean, got number", x.norm, x, 2, 1, 1)
  fails("norm: unknown option 'dims' (did you mean 'dim'?)", x.norm, x, 2, {dims = -1})
  fails("norm: unknown option 'keep_dim' (did you mean 'keepdim'?)", x.norm, x, {keep_dim = true})
  fails("norm: dim is given twice, as an argument and as an option", x.norm, x, 2, 1, {dim = 2})
  fails("norm: unknown key 'keepdim' in dim", x.norm, x, 2, {1, keepdim = true})
  fails("norm: dtype must be a floating-point dtype, got int64", x.norm, x, {dtype = "int64"})
  fails("norm: 5 arguments before the options table, at most 4", x.norm, x, 2, 1, true,
        "float64", 1, {})
end

-- a table a staple takes holds what it knows and nothing else: a list its
-- items, options their names (issue 46)
function TestErrors:testTablesHoldNothingElse()
  local x = qkv.ones(2, 3)
  fails("flip: unknown option 'dim' (did you mean 'dims'?)", x.flip, x, {dim = {1}})
  fails("flip: unknown key 'dims' in dims (it holds its 1 item only)", x.flip, x, {1, dims = 1})
  fails("flip: dims has key 3 past its 1 item", x.flip, x, {1, [3] = 2})
  fails("unflatten: unknown key 'x' in sizes (it holds its 2 items only)",
        x.unflatten, x, 2, {3, 1, x = 1})
  fails("split: unknown key 'dim' in split_sizes", x.split, x, {1, 1, dim = 1})
  fails("roll: unknown key 'n' in shifts", x.roll, x, {1, n = 1}, {1})
  fails("roll: unknown option 'dim' (did you mean 'dims'?)", x.roll, x, {shifts = 1, dim = 1})
  fails("repeat_interleave: unknown key 'dim' in repeats", x.repeat_interleave, x, {1, 2, dim = 1})
  fails("argsort: unknown option 'decending' (did you mean 'descending'?)", x.argsort, x,
        {decending = true})
  fails("argsort: stable must be a boolean, got number", x.argsort, x, {stable = 1})
  fails("allclose: unknown option 'tol'", qkv.allclose, x, x, {tol = 1})
  fails("chunk: chunks is given twice, as an argument and as an option", x.chunk, x, 2,
        {chunks = 2})
  fails("new_zeros: unknown key 'dtyp' in size (did you mean 'dtype'?)", x.new_zeros, x,
        {2, dtyp = "int64"})
  fails("new_zeros: the sizes are given twice, as items and as 'size'", x.new_zeros, x,
        {2, size = {2}})
  fails("new_zeros: 'size' must be a table of sizes, got number", x.new_zeros, x, {size = 2})
  fails("new_zeros: the dtype is given twice", x.new_zeros, x, {2, dtype = "int64"},
        {dtype = "int32"})
  fails("new_zeros: takes size and options, got 1 more argument", x.new_zeros, x, {2}, {}, 3)
  fails("new_full: takes size, fill_value and options, got 1 more argument", x.new_full, x,
        {2}, 1, {}, 3)
  fails("new_ones: unknown key 'x' in 'size'", x.new_ones, x, {size = {2, x = 1}})
  fails("new_ones: unknown dtype 'float8'", x.new_ones, x, {2, dtype = "float8"})
  fails("randint: unknown key 'sizes' in size (did you mean 'size'?)", qkv.randint, 0, 5,
        {sizes = {3}})
  fails("randint: the device is given twice", qkv.randint, 0, 5, {3, device = "cpu"},
        {device = "cpu"})
end

function TestErrors:testScatter()
  local x = qkv.zeros(3, 4)
  local I = function(t) return qkv.tensor(t, "int64") end
  fails("scatter: index 5 is out of range for dim 2 of size 4", x.scatter, x, 2, I{{5}}, 1)
  fails("scatter: index must be an int64 tensor, got float32", x.scatter, x, 2, qkv.ones(1, 1), 1)
  fails("scatter: index (1,) must have as many dims as x (3, 4)", x.scatter, x, 2, I{1}, 1)
  fails("scatter: src is float64 but x is float32; convert src with src:to(\"float32\")",
        x.scatter, x, 2, I{{1}}, qkv.ones(1, 1, "float64"))
  fails("scatter: index (1, 2) must be no larger than x (3, 4) apart from dim 2 and no larger than src (1, 1)",
        qkv.scatter, x, 2, I{{1, 2}}, qkv.ones(1, 1))
  fails("scatter: index (4, 1) must be no larger than x (3, 4) apart from dim 2",
        qkv.scatter, x, 2, I{{1}, {1}, {1}, {1}}, 1)
  fails("scatter: src must be a tensor, got string", x.scatter, x, 2, I{{1}}, "1")
  fails("scatter_: dim 3 out of range [-2, 2]", x.scatter_, x, 3, I{{1}}, 1)
  fails('scatter: reduce must be "add" or "multiply", got \'mean\'', x.scatter, x, 2, I{{1}}, 1,
        "mean")
  fails('scatter_: reduce must be "add" or "multiply", got number', x.scatter_, x, 2, I{{1}}, 1,
        3)
  fails("scatter: unknown option 'reduc' (did you mean 'reduce'?)", x.scatter, x, 2, I{{1}},
        1, {reduc = "add"})
  fails("scatter: value is given twice, as 'src' and as 'value'", x.scatter, x,
        {dim = 2, index = I{{1}}, src = qkv.ones(1, 1), value = 1})
  fails("scatter: index 5 is out of range for dim 2 of size 4", x.scatter, x, 2, I{{5}}, 1,
        "multiply")
  -- a failed scatter_ leaves x as it was
  lu.assertEquals(x:sum():item(), 0)
end

function TestErrors:testSelection()
  local x = qkv.ones(2, 3)
  fails("argsort: descending must be a boolean, got number", x.argsort, x, 1, 1)
  fails("argsort: dim 3 out of range [-2, 2]", x.argsort, x, 3)
  fails("flip: dims names dim 2 twice", x.flip, x, {2, -1})
  fails("flip: dims is missing", x.flip, x)
  fails("flip: dims[1] must be an integer, got 0.5", x.flip, x, {0.5})
  fails("roll: shifts and dims must be as many, got 2 and 1", x.roll, x, {1, 2}, 1)
  fails("roll: with no dims, shifts must be one integer, got 2 of them", x.roll, x, {1, 2})
  fails("roll: shifts is missing", x.roll, x)
  fails("roll: dims 3 out of range [-2, 2] for x of shape (2, 3)", x.roll, x, 1, 3)
  fails("repeat_interleave: repeats must be non-negative, got -1", x.repeat_interleave, x, -1)
  fails("repeat_interleave: repeats has 2 values but dim 2 of x (2, 3) has 3",
        x.repeat_interleave, x, qkv.tensor({1, 2}, "int64"), 2)
  fails("repeat_interleave: repeats must be non-negative, got -2",
        x.repeat_interleave, x, {1, -2}, 1)
  fails("repeat_interleave: repeats must be an int64 tensor, got float32",
        x.repeat_interleave, x, qkv.ones(2), 1)
  fails("repeat_interleave: repeats must be an integer, got 1.5", x.repeat_interleave, x, 1.5)
end

function TestErrors:testProducts()
  fails("outer: a and b must be 1-D, got (2, 2) and (2,)", qkv.outer, qkv.ones(2, 2), qkv.ones(2))
  fails("outer: b must be a tensor, got number", qkv.outer, qkv.ones(2), 2)
  local a = qkv.ones(2)
  fails("allclose: a is float32 but b is float64; convert one", qkv.allclose, a, qkv.ones(2, "float64"))
  fails("allclose: a (2,) and b (3,) do not broadcast", a.allclose, a, qkv.ones(3))
  fails("allclose: rtol must be a non-negative number, got -1", qkv.allclose, a, a, -1)
  fails("allclose: equal_nan must be a boolean, got number", qkv.allclose, a, a, 0, 0, 1)
end

-- errors point at the line of the script that called
function TestErrors:testErrorsAtTheCallersLine()
  local ok, err = pcall(function() return qkv.ones(2):chunk(0) end)
  lu.assertFalse(ok)
  lu.assertStrMatches(err, ".*test_composite%.lua:%d+: chunk: chunks must be positive, got 0")
end
