-- test_tensor_making.lua: constructors, keywords in shape tables,
-- properties, tolist/item (docs/tensors.md: "Making tensors", "Looking at
-- them"). Views, copies and `<close>` are test_tensor_views_copies.lua's.
local lu = require "luaunit"
local H = dofile("tests/helpers/tensor_asserts.lua")
local f32, assertList, assertShape = H.f32, H.assertList, H.assertShape

---------------------------------------------------------------- constructors

TestConstructors = {}

function TestConstructors:testNested()
  local x = qkv.tensor{{1, 2, 3}, {4, 5, 6}}
  lu.assertEquals(x.dtype, "float32")
  assertShape(x, {2, 3})
  assertList(x, {{1, 2, 3}, {4, 5, 6}})
  lu.assertEquals(math.type(x:tolist()[1][1]), "float")
  local y = qkv.tensor{{{1}, {2}}, {{3}, {4}}, {{5}, {6}}}
  assertShape(y, {3, 2, 1})
  assertList(y, {{{1}, {2}}, {{3}, {4}}, {{5}, {6}}})
end

function TestConstructors:testEmptyShapes()
  local e = qkv.tensor{}
  assertShape(e, {0})
  lu.assertEquals(e:numel(), 0)
  lu.assertEquals(e.dtype, "float32")
  assertList(e, {})
  local e2 = qkv.tensor{{}, {}}
  assertShape(e2, {2, 0})
  lu.assertEquals(e2:numel(), 0)
  assertList(e2, {{}, {}})
end

function TestConstructors:testBooleansAndDtypeArg()
  local b = qkv.tensor{true, false, true}
  lu.assertEquals(b.dtype, "bool")
  assertList(b, {true, false, true})
  local i = qkv.tensor({{1, -2}, {3, 4}}, "int64")
  lu.assertEquals(i.dtype, "int64")
  assertList(i, {{1, -2}, {3, 4}}, true)
  lu.assertEquals(math.type(i:tolist()[1][2]), "integer")
  local d = qkv.tensor({0.1, 0.2}, qkv.float64)
  lu.assertEquals(d.dtype, "float64")
  assertList(d, {0.1, 0.2})
  local f = qkv.tensor{0.1, 0.2}
  assertList(f, {f32(0.1), f32(0.2)})
  assertList(qkv.tensor({0, 2, -1}, "bool"), {false, true, true})
  -- booleans with numbers make a number tensor, whichever comes first:
  -- torch.tensor([True, 2.5]) is tensor([1.0000, 2.5000]) (qkv took the
  -- first leaf's bool and gave [true, true], losing 2.5)
  for _, t in ipairs{qkv.tensor{true, 2.5}, qkv.tensor{{true}, {2.5}}, qkv.tensor{false, true, -3}} do
    lu.assertEquals(t.dtype, "float32")
  end
  assertList(qkv.tensor{true, 2.5}, {1, 2.5})
  assertList(qkv.tensor{{true}, {2.5}}, {{1}, {2.5}})
  assertList(qkv.tensor{false, true, -3}, {0, 1, -3})
  assertList(qkv.tensor{2.5, true}, {2.5, 1})
  lu.assertEquals(qkv.tensor({true, 2.5}, "bool"):tolist(), {true, true}, "a dtype given stays")
  -- int64 keeps integers beyond 2^53 exactly
  local big = qkv.tensor({9007199254740993, -9007199254740993}, "int64")
  assertList(big, {9007199254740993, -9007199254740993}, true)
end

function TestConstructors:testScalarAndCopy()
  local s = qkv.tensor(3.5)
  lu.assertEquals(s.ndim, 0)
  assertShape(s, {})
  lu.assertEquals(s:numel(), 1)
  lu.assertEquals(s:item(), 3.5)
  lu.assertEquals(qkv.tensor(7, "int64"):item(), 7)
  local x = qkv.tensor{1, 2}
  local c = qkv.tensor(x)
  c[1] = 9
  assertList(x, {1, 2})
  assertList(c, {9, 2})
  lu.assertEquals(qkv.tensor(x, "int64").dtype, "int64")
end

function TestConstructors:testZerosOnesFull()
  for _, z in ipairs{qkv.zeros(2, 3), qkv.zeros{2, 3}} do
    assertShape(z, {2, 3}); lu.assertEquals(z.dtype, "float32")
    assertList(z, {{0, 0, 0}, {0, 0, 0}})
  end
  local o = qkv.ones(2, 2, "int64")
  lu.assertEquals(o.dtype, "int64")
  assertList(o, {{1, 1}, {1, 1}}, true)
  local o2 = qkv.ones({3}, "bool")
  lu.assertEquals(o2.dtype, "bool")
  assertList(o2, {true, true, true})
  assertList(qkv.zeros(2, "float64"), {0, 0})
  lu.assertEquals(qkv.zeros(2, "float64").dtype, "float64")
  assertShape(qkv.ones(), {})
end

function TestConstructors:testFullTableShape()
  local f = qkv.full({2, 2}, 2.5)
  lu.assertEquals(f.dtype, "float32")
  assertList(f, {{2.5, 2.5}, {2.5, 2.5}})
end

function TestConstructors:testFullOneSize()
  local f = qkv.full(3, 7)
  assertShape(f, {3})
  assertList(f, {7, 7, 7})
end

function TestConstructors:testFullDtype()
  local g = qkv.full(3, 7, "int64")
  lu.assertEquals(g.dtype, "int64")
  assertList(g, {7, 7, 7}, true)
  assertList(qkv.full(2, 0.1, "float64"), {0.1, 0.1})
  assertList(qkv.full({1, 2}, true, "bool"), {{true, true}})
end

function TestConstructors:testEye()
  assertList(qkv.eye(3), {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}})
  assertList(qkv.eye(2, 3), {{1, 0, 0}, {0, 1, 0}})
  assertList(qkv.eye(3, 2), {{1, 0}, {0, 1}, {0, 0}})
  local e = qkv.eye(2, "int64")
  lu.assertEquals(e.dtype, "int64")
  assertList(e, {{1, 0}, {0, 1}}, true)
  lu.assertEquals(qkv.eye(2, 2, "float64").dtype, "float64")
  assertShape(qkv.eye(0), {0, 0})
end

function TestConstructors:testArange()
  assertList(qkv.arange(5), {0, 1, 2, 3, 4})
  lu.assertEquals(qkv.arange(5).dtype, "float32")
  assertList(qkv.arange(2, 5), {2, 3, 4})
  assertList(qkv.arange(1, 10, 3), {1, 4, 7})
  assertList(qkv.arange(5, 1, -1), {5, 4, 3, 2})
  assertList(qkv.arange(0, -3, -1.5), {0, -1.5})
  assertList(qkv.arange(0, 1, 0.25), {0, 0.25, 0.5, 0.75})
  assertList(qkv.arange(0, 1, 0.1, "float64"),
    {0, 0.1, 0.2, 0.1 * 3, 0.4, 0.5, 0.1 * 6, 0.1 * 7, 0.8, 0.9})
  local i = qkv.arange(4, "int64")
  lu.assertEquals(i.dtype, "int64")
  assertList(i, {0, 1, 2, 3}, true)
  lu.assertEquals(qkv.arange(1, 3, "float64").dtype, "float64")
  assertList(qkv.arange(1, 3, "float64"), {1, 2})
  assertShape(qkv.arange(0), {0})
  assertShape(qkv.arange(3, 3), {0})
end

---------------------------------------------------------------- keywords in tables

-- a shape table holds PyTorch's keywords where the function takes them
-- (issue 46: they were ignored): qkv.zeros{2, 3, dtype = "float64"} is
-- torch.zeros(2, 3, dtype=torch.float64), qkv.zeros{size = {2, 3}} is
-- torch.zeros(size=(2, 3)); qkv.tensor's data table takes dtype and device
TestTableKeywords = {}

function TestTableKeywords:testDtypeInTheShape()
  local z = qkv.zeros{2, 3, dtype = "float64"}
  lu.assertEquals(z.dtype, "float64")
  assertShape(z, {2, 3})
  assertList(z, {{0, 0, 0}, {0, 0, 0}})
  local o = qkv.ones{2, dtype = "int64", device = "cpu"}
  lu.assertEquals({o.dtype, o.device}, {"int64", "cpu"})
  assertList(o, {1, 1}, true)
  lu.assertEquals(qkv.rand{2, 2, dtype = "float64"}.dtype, "float64")
  lu.assertEquals(qkv.randn{3, dtype = "float64"}.dtype, "float64")
  local e = qkv.eye{2, 3, dtype = "int32"}
  lu.assertEquals(e.dtype, "int32")
  assertList(e, {{1, 0, 0}, {0, 1, 0}}, true)
  local f = qkv.full({2, dtype = "int64"}, 7)
  lu.assertEquals(f.dtype, "int64")
  assertList(f, {7, 7}, true)
  -- the options table after the arguments, where a dtype string may stand
  assertList(qkv.full(3, 2, {dtype = "int32"}), {2, 2, 2}, true)
  lu.assertEquals(qkv.full(3, 2, {dtype = "int32"}).dtype, "int32")
  assertList(qkv.arange(4, {dtype = "int64"}), {0, 1, 2, 3}, true)
  lu.assertEquals(qkv.arange(0, 1, 0.5, "float64", {device = "cpu"}).dtype, "float64")
  lu.assertEquals(qkv.zeros(2, "float64", {device = "cpu"}).dtype, "float64")
end

function TestTableKeywords:testSizeKeyword()
  assertShape(qkv.zeros{size = {2, 3}}, {2, 3})
  local o = qkv.ones{size = {2}, dtype = "int64"}
  assertList(o, {1, 1}, true)
  assertShape(qkv.rand{size = {4, 1}}, {4, 1})
  assertShape(qkv.randn({size = {3}}, "float64"), {3})
  assertShape(qkv.zeros{size = qkv.ones(2, 5).shape}, {2, 5})
  assertShape(qkv.zeros{size = {}}, {})
  assertList(qkv.full({size = {2}}, 1.5), {1.5, 1.5})
  -- the same draws as the sizes as items
  qkv.seed(3)
  local a = qkv.rand{size = {5}}
  qkv.seed(3)
  qkv.test.assertTensorEqual(a, qkv.rand(5))
end

-- with no GPU, device = "cuda" in the shape is the error of asking for
-- cuda as an argument; with one, the tensor is there
function TestTableKeywords:testDeviceInTheShape()
  for _, name in ipairs{"zeros", "ones", "rand", "randn"} do
    local want_ok, want = pcall(qkv[name], 2, 2, "cuda")
    local ok, got = pcall(qkv[name], {2, 2, device = "cuda"})
    lu.assertEquals(ok, want_ok, name)
    if ok then lu.assertEquals(got.device, "cuda", name)
    else lu.assertEquals(got, want, name) end
    lu.assertEquals(qkv[name]{2, device = "cpu"}.device, "cpu", name)
  end
  local want_ok, want = pcall(qkv.tensor, {1, 2}, "cuda")
  local ok, got = pcall(qkv.tensor, {1, 2, device = "cuda"})
  lu.assertEquals(ok, want_ok)
  if not ok then lu.assertStrContains(got, "cuda") lu.assertEquals(got, want) end
end

function TestTableKeywords:testTensorData()
  local t = qkv.tensor{1, 2, dtype = "int64"}
  lu.assertEquals(t.dtype, "int64")
  assertList(t, {1, 2}, true)
  local u = qkv.tensor({{1, 2}, {3, 4}}, {dtype = "float64"})
  lu.assertEquals(u.dtype, "float64")
  assertList(u, {{1, 2}, {3, 4}})
  lu.assertEquals(qkv.tensor({true, false}, {dtype = "int32"}):tolist(), {1, 0})
  lu.assertEquals(qkv.tensor(t, {dtype = "float32"}).dtype, "float32")
  lu.assertEquals(qkv.tensor(2.5, {dtype = "float64"}).dtype, "float64")
  lu.assertEquals(qkv.tensor({1}, "float64", "cpu").device, "cpu")
end

function TestTableKeywords:testViewKeywords()
  local x = qkv.arange(6)
  assertList(x:view{size = {2, 3}}, {{0, 1, 2}, {3, 4, 5}})
  assertList(x:reshape{shape = {3, -1}}, {{0, 1}, {2, 3}, {4, 5}})
  assertShape(x:view(2, 3):t():reshape{shape = {6}}, {6})
  assertShape(qkv.ones(1, 3):expand{size = {2, -1}}, {2, 3})
  local m = x:view(2, 3)
  assertList(m:permute{dims = {2, 1}}, {{0, 3}, {1, 4}, {2, 5}})
  lu.assertTrue(m.shape == {2, 3})
  lu.assertFalse(m.shape == {2, 3, n = 2})      -- a table with more is no shape
  lu.assertFalse(qkv.ones(2).shape == {2, [3] = 1})
end

---------------------------------------------------------------- properties

TestProperties = {}

function TestProperties:testShape()
  local x = qkv.zeros(2, 3)
  lu.assertEquals(tostring(x.shape), "(2, 3)")
  lu.assertTrue(x.shape == qkv.ones(2, 3).shape)
  lu.assertTrue(x.shape == {2, 3})
  lu.assertFalse(x.shape == qkv.ones(3, 2).shape)
  lu.assertFalse(x.shape == qkv.ones(2, 3, 1).shape)
  lu.assertEquals(x.shape[1], 2)
  lu.assertEquals(#x.shape, 2)
  lu.assertEquals(tostring(x:size()), "(2, 3)")
end

function TestProperties:testScalarProperties()
  local x = qkv.zeros(2, 3, 4)
  lu.assertEquals(x.dtype, "float32")
  lu.assertEquals(x.device, qkv.default_device())
  lu.assertEquals(x.ndim, 3)
  lu.assertEquals(x:dim(), 3)
  lu.assertEquals(x:numel(), 24)
  lu.assertEquals(x:size(1), 2)
  lu.assertEquals(x:size(3), 4)
  lu.assertEquals(x:size(-1), 4)
  lu.assertEquals(tostring(x:stride()), "(12, 4, 1)")
  lu.assertEquals(x:stride(1), 12)
  lu.assertEquals(x:stride(-1), 1)
  lu.assertTrue(x:is_contiguous())
  lu.assertFalse(x:transpose(1, 3):is_contiguous())
  lu.assertEquals(#x, 2)
  lu.assertEquals(#qkv.zeros(0, 5), 0)
  lu.assertEquals(qkv.float32, "float32")
  lu.assertEquals(qkv.float64, "float64")
  lu.assertEquals(qkv.int64, "int64")
  lu.assertEquals(qkv.bool, "bool")
end

function TestProperties:testToListItemEveryDtype()
  local x = qkv.tensor{{1.5, -2}, {0.1, 3}}
  assertList(x, {{1.5, -2}, {f32(0.1), 3}})
  lu.assertEquals(x[2][1], f32(0.1))
  lu.assertEquals(qkv.tensor{0.1}:item(), f32(0.1))
  lu.assertEquals(math.type(qkv.tensor{2}:item()), "float")
  local d = qkv.tensor({{0.1, 1e300}}, "float64")
  assertList(d, {{0.1, 1e300}})
  lu.assertEquals(qkv.tensor(0.1, "float64"):item(), 0.1)
  local i = qkv.tensor({{-3, 2^40}}, "int64")
  assertList(i, {{-3, 1 << 40}}, true)
  lu.assertEquals(qkv.tensor({-3}, "int64"):item(), -3)
  lu.assertEquals(math.type(qkv.tensor({-3}, "int64"):item()), "integer")
  local b = qkv.tensor{{true}, {false}}
  assertList(b, {{true}, {false}})
  lu.assertEquals(qkv.tensor{false}:item(), false)
  lu.assertEquals(qkv.tensor(true):item(), true)
  lu.assertEquals(qkv.tensor(2.5):tolist(), 2.5)   -- 0-d gives the value
end

os.exit(lu.LuaUnit.run(), true)
