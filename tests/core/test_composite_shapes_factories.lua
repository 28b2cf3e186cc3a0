-- test_composite_shapes_factories.lua: PyTorch's functions that qkv
-- composes of its ops (issue 30; stdlib/qkv/composite/, qkv.composite)
-- that shape and make tensors: flatten, unflatten, chunk, split, the *_like
-- factories and x:new_*, randint, linspace, logspace, half, bfloat16.
-- Values against PyTorch's (tests/fixtures/composite/torch_composite.lua,
-- written by torch_composite.py), each as a function and as a method, with
-- negative dims; randint against qkv's own generator and by its counts.
-- norm, scatter and the selections are test_composite_math_select.lua's,
-- the errors test_composite_errors.lua's.
local lu = require "luaunit"
local F = dofile("tests/fixtures/composite/torch_composite.lua")
local H = dofile("tests/helpers/composite_ref.lua")
local T, flat, same, same_pieces = H.T, H.flat, H.same, H.same_pieces

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

