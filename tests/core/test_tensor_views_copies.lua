-- test_tensor_views_copies.lua: views, copies between dtypes and layouts,
-- and `<close>` (docs/tensors.md: "Views"). Constructors and properties
-- are test_tensor_making.lua's.
local lu = require "luaunit"
local H = dofile("tests/helpers/tensor_asserts.lua")
local f32, assertList, assertShape = H.f32, H.assertList, H.assertShape

local function errmsg(f, ...)
  local ok, msg = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(msg)
end

local DTYPES = {"float32", "float64", "int64", "bool"}

---------------------------------------------------------------- views

TestViews = {}

function TestViews:testTransposeSharesStorage()
  local x = qkv.arange(6):view(2, 3)
  local y = x:t()
  assertShape(y, {3, 2})
  assertList(y, {{0, 3}, {1, 4}, {2, 5}})
  lu.assertEquals(tostring(y:stride()), "(1, 3)")
  x[1] = 7                          -- the docs/tensors.md example
  lu.assertEquals(y[1][1], 7.0)
  assertList(y, {{7, 3}, {7, 4}, {7, 5}})
  y[2] = -1                         -- writing through the view
  assertList(x, {{7, -1, 7}, {3, -1, 5}})
  local z = qkv.arange(24):view(2, 3, 4):transpose(1, 3)
  assertShape(z, {4, 3, 2})
  lu.assertEquals(z[4][3][2], 23)
  lu.assertEquals(z[2][1][2], 13)
  lu.assertEquals(qkv.arange(3):t().shape, {3})   -- 1-D t() is itself
end

function TestViews:testPermute()
  local x = qkv.arange(24):view(2, 3, 4)
  local p = x:permute(3, 1, 2)
  assertShape(p, {4, 2, 3})
  lu.assertEquals(tostring(p:stride()), "(1, 12, 4)")
  for a = 1, 2 do for b = 1, 3 do for c = 1, 4 do
    lu.assertEquals(p[c][a][b], (a - 1) * 12 + (b - 1) * 4 + (c - 1))
  end end end
  assertShape(x:permute{2, 3, 1}, {3, 4, 2})
  assertShape(x:permute(-1, -2, -3), {4, 3, 2})
  p[1][1][1] = 100
  lu.assertEquals(x[1][1][1], 100)
end

function TestViews:testView()
  local x = qkv.arange(12)
  local v = x:view(3, 4)
  assertShape(v, {3, 4})
  assertShape(x:view(-1, 6), {2, 6})
  assertShape(x:view{2, -1, 3}, {2, 2, 3})
  assertShape(x:view(12, 1, 1), {12, 1, 1})
  v[2] = 0
  lu.assertEquals(x[5], 0)
  -- non-contiguous but viewable: split a dim of a narrowed matrix
  local m = qkv.arange(24):view(4, 6)
  local n = m:narrow(2, 1, 3)
  lu.assertFalse(n:is_contiguous())
  local nv = n:view(2, 2, 3)
  assertList(nv, {{{0, 1, 2}, {6, 7, 8}}, {{12, 13, 14}, {18, 19, 20}}})
  nv[1][1][1] = -5
  lu.assertEquals(m[1][1], -5)
  -- split the stride-1 dim of a transposed matrix
  local t = qkv.arange(12):view(2, 6):t()          -- (6, 2) strides (1, 6)
  local tv = t:view(2, 3, 2)
  lu.assertEquals(tv[2][1][2], t[4][2])
  lu.assertEquals(tv[2][3][1], t[6][1])
  tv[1][1][1] = 50
  lu.assertEquals(t[1][1], 50)
  -- a 0-d view and an empty view
  lu.assertEquals(qkv.tensor{5}:view():item(), 5)
  assertShape(qkv.zeros(0, 3):view(-1, 3), {0, 3})
end

function TestViews:testReshape()
  local x = qkv.arange(6):view(2, 3)
  local r = x:reshape(3, 2)           -- a view: shares storage
  r[1] = 9
  lu.assertEquals(x[1][1], 9)
  local t = x:t()                     -- {{9,3},{9,4},{2,5}}
  local c = t:reshape(6)              -- needs a copy
  assertList(c, {9, 3, 9, 4, 2, 5})
  lu.assertTrue(c:is_contiguous())
  x[1] = 0
  assertList(c, {9, 3, 9, 4, 2, 5})   -- not a view
  assertList(t:reshape(-1, 3), {{0, 3, 0}, {4, 0, 5}})
end

function TestViews:testNarrowSelectIndex()
  local x = qkv.arange(12):view(3, 4)
  local n = x:narrow(2, 2, 2)
  assertShape(n, {3, 2})
  assertList(n, {{1, 2}, {5, 6}, {9, 10}})
  assertList(x:narrow(1, 3, 1), {{8, 9, 10, 11}})
  assertShape(x:narrow(1, 4, 0), {0, 4})
  assertList(x:narrow(-1, 4, 1), {{3}, {7}, {11}})
  n[1] = -1
  assertList(x[1], {0, -1, -1, 3})
  assertList(x:select(2, 3), {-1, 6, 10})
  assertList(x:select(1, -1), {8, 9, 10, 11})
  assertShape(x:select(1, 1), {4})
  assertList(x[-1], {8, 9, 10, 11})
  assertList(x[2], {4, 5, 6, 7})
  local v = qkv.tensor{10, 20, 30}
  lu.assertEquals(v[1], 10)
  lu.assertEquals(v[-1], 30)
  lu.assertEquals(math.type(v[2]), "float")
  lu.assertEquals(qkv.tensor({4, 5}, "int64")[2], 5)
  lu.assertEquals(qkv.tensor{true, false}[2], false)
  lu.assertEquals(qkv.tensor{{1, 2}, {3, 4}}[2][-2], 3)
  lu.assertEquals(qkv.tensor{1, 2}:select(1, 2).ndim, 0)
end

function TestViews:testSetIndex()
  local x = qkv.zeros(3, 2)
  x[2] = 5
  assertList(x, {{0, 0}, {5, 5}, {0, 0}})
  x[-1] = qkv.tensor{1, 2}
  assertList(x, {{0, 0}, {5, 5}, {1, 2}})
  x[1] = qkv.tensor{7}                 -- broadcasts
  assertList(x, {{7, 7}, {5, 5}, {1, 2}})
  local v = qkv.tensor{1, 2, 3}
  v[2] = 9.5
  assertList(v, {1, 9.5, 3})
  local t = x:t()                      -- write through a transposed view
  t[2] = qkv.tensor({10, 20, 30}, "int64")
  assertList(x, {{7, 10}, {5, 20}, {1, 30}})
  local b = qkv.zeros(2, 2, "bool")
  b[1] = true
  assertList(b, {{true, true}, {false, false}})
  local i = qkv.zeros(2, "int64")
  i[1] = 3
  assertList(i, {3, 0}, true)
  local cube = qkv.zeros(2, 2, 2)
  cube[2][1] = qkv.tensor{4, 5}
  assertList(cube, {{{0, 0}, {0, 0}}, {{4, 5}, {0, 0}}})
end

function TestViews:testUnsqueezeSqueeze()
  local x = qkv.arange(6):view(2, 3)
  assertShape(x:unsqueeze(1), {1, 2, 3})
  assertShape(x:unsqueeze(2), {2, 1, 3})
  assertShape(x:unsqueeze(3), {2, 3, 1})
  assertShape(x:unsqueeze(-1), {2, 3, 1})
  local u = x:unsqueeze(1)
  u[1][2][3] = 42
  lu.assertEquals(x[2][3], 42)
  local y = qkv.zeros(1, 3, 1, 2)
  assertShape(y:squeeze(), {3, 2})
  assertShape(y:squeeze(1), {3, 1, 2})
  assertShape(y:squeeze(3), {1, 3, 2})
  assertShape(y:squeeze(2), {1, 3, 1, 2})  -- size 3: unchanged
  assertShape(qkv.zeros(1, 1):squeeze(), {})
end

function TestViews:testExpand()
  local x = qkv.tensor{{1}, {2}}
  local e = x:expand(2, 3)
  assertShape(e, {2, 3})
  assertList(e, {{1, 1, 1}, {2, 2, 2}})
  lu.assertEquals(e:stride(2), 0)
  assertShape(x:expand(4, 2, 3), {4, 2, 3})
  assertShape(x:expand(-1, 5), {2, 5})
  assertShape(x:expand{3, -1, 2}, {3, 2, 2})
  x[2] = 7
  assertList(e, {{1, 1, 1}, {7, 7, 7}})
  assertList(qkv.tensor(3):expand(2), {3, 3})
end

---------------------------------------------------------------- copies

TestCopies = {}

function TestCopies:testContiguousClone()
  local x = qkv.arange(6):view(2, 3)
  lu.assertTrue(rawequal(x:contiguous(), x))
  local t = x:t()
  local c = t:contiguous()
  lu.assertFalse(rawequal(c, t))
  lu.assertTrue(c:is_contiguous())
  assertList(c, {{0, 3}, {1, 4}, {2, 5}})
  lu.assertEquals(tostring(c:stride()), "(2, 1)")
  x[1] = 9
  assertList(c, {{0, 3}, {1, 4}, {2, 5}})
  local k = x:clone()
  lu.assertFalse(rawequal(k, x))
  k[1] = -1
  assertList(x, {{9, 9, 9}, {3, 4, 5}})
  assertList(t:clone(), {{9, 3}, {9, 4}, {9, 5}})
  lu.assertEquals(qkv.tensor({1}, "int64"):clone().dtype, "int64")
end

-- runs contiguous on both sides but rows apart, as attention's heads
-- transposed back (vm/cpu/copy.c copies such runs whole): every element
-- where it belongs, for each width of element, broadcast and offset views
-- included, small and big enough for threads
function TestCopies:testShortContiguousRuns()
  local function same(a, b) return (a:double() - b:double()):abs():max():item() == 0 end
  for _, dt in ipairs{"float32", "float64", "int64", "int32", "bool", "bfloat16"} do
    for _, s in ipairs{{2, 3, 5, 4}, {32, 4, 32, 16}} do
      local n = s[1] * s[2] * s[3] * s[4]
      local x = (qkv.rand(table.unpack(s)) * 250):long():to(dt)
      local y = x:transpose(2, 3):contiguous()
      lu.assertTrue(y:is_contiguous())
      for _, at in ipairs{{1, 1, 1, 1}, {s[1], s[2], s[3], s[4]}, {2, 1, 3, 2}, {1, s[2], 2, s[4]}} do
        lu.assertEquals(y[at[1]][at[3]][at[2]][at[4]], x[at[1]][at[2]][at[3]][at[4]],
                        dt .. " " .. table.concat(at, ","))
      end
      lu.assertTrue(same(y:transpose(2, 3), x), dt)
      local part = x:narrow(4, 2, 2):transpose(1, 2):contiguous()          -- runs of 2
      lu.assertTrue(same(part:transpose(1, 2), x:narrow(4, 2, 2)), dt .. " narrowed")
    end
    local row = qkv.arange(4):to(dt):view(1, 1, 4)
    local b = row:expand(3, 5, 4):transpose(1, 2):contiguous()           -- broadcast source
    lu.assertTrue(same(b, row:expand(5, 3, 4)), dt .. " broadcast")
  end
  -- nothing to copy
  for _, s in ipairs{{0, 3, 4}, {3, 0, 4}, {3, 4, 0}} do
    local e = qkv.zeros(s):transpose(1, 2):contiguous()
    lu.assertEquals(e:numel(), 0)
  end
  -- a NaN's payload and -0 come through a float32 copy as they are
  local x = qkv.tensor({{0 / 0, -0.0}, {1, 2}}):view(2, 2, 1):expand(2, 2, 3)
  local y = x:transpose(1, 2):contiguous()
  lu.assertTrue(y[1][1][1] ~= y[1][1][1])
  lu.assertEquals(1 / y[2][1][1], -1 / 0)
end

-- values exactly representable in all four dtypes' views of them
local SRC = {
  float32 = {0, 1, -2, 3.5, 0.25},
  float64 = {0, 1, -2, 3.5, 0.25},
  int64 = {0, 1, -2, 3, 7},
  bool = {false, true, true, false, true},
}

local function convert(v, from, to)
  if from == "bool" then v = v and 1 or 0 end
  if to == "bool" then return v ~= 0 end
  if to == "int64" then
    local t = v < 0 and math.ceil(v) or math.floor(v)
    return math.tointeger(t)
  end
  return v + 0.0
end

function TestCopies:testToEveryPair()
  for _, from in ipairs(DTYPES) do
    local x = qkv.tensor(SRC[from], from)
    for _, to in ipairs(DTYPES) do
      local y = x:to(to)
      lu.assertEquals(y.dtype, to, from .. "->" .. to)
      local exp = {}
      for i, v in ipairs(SRC[from]) do exp[i] = convert(v, from, to) end
      assertList(y, exp, true)
      -- also from a non-contiguous view
      local yt = x:view(5, 1):expand(5, 2):t():to(to)
      assertList(yt[2], exp, true)
    end
    lu.assertTrue(rawequal(x:to(from), x))
  end
end

function TestCopies:testToSpecialValues()
  assertList(qkv.tensor({-2.7, 2.7, -0.5, 0.99, 1e9}, "float64"):to("int64"),
    {-2, 2, 0, 0, 1000000000}, true)
  assertList(qkv.tensor{-2.7, 2.7}:to("int64"), {-2, 2}, true)
  assertList(qkv.tensor{0, 0.5, -3, 1e-30}:to("bool"), {false, true, true, true})
  assertList(qkv.tensor({0, 5, -1}, "int64"):to("bool"), {false, true, true})
  assertList(qkv.tensor({0.1}, "float64"):to("float32"), {f32(0.1)})
  assertList(qkv.tensor({16777217}, "int64"):to("float32"), {16777216})
  assertList(qkv.tensor({16777217}, "int64"):to("float64"), {16777217})
  local x = qkv.ones(2, "cpu")
  lu.assertTrue(rawequal(x:to("cpu"), x))
  lu.assertTrue(rawequal(x:cpu(), x))
end

---------------------------------------------------------------- <close>

TestClose = {}

function TestClose:testClose()
  local keep
  collectgarbage()
  local before = qkv.memory()
  do
    local x <close> = qkv.zeros(1000, "float64")
    lu.assertEquals(qkv.memory() - before, 8000)
    keep = x
  end
  lu.assertEquals(qkv.memory(), before)   -- freed without a collection
  for _, f in ipairs{
    function() return keep:sum() end, function() return keep:tolist() end,
    function() return keep + 1 end, function() return keep[1] end,
    function() return keep:numel() end, function() return keep:view(-1) end,
    function() return qkv.exp(keep) end, function() return #keep end,
    function() return keep:item() end, function() return keep:t() end,
  } do
    local msg = errmsg(f)
    lu.assertStrContains(msg, "closed")
  end
  errmsg(qkv.tensor, keep)               -- an error (its text says less)
end

os.exit(lu.LuaUnit.run(), true)
