-- test_conversions.lua: floats into integers, integer aranges, sizes and
-- bounds (issue 28, "No silent wrong value, third round"). A float goes
-- into int64 or int32 by truncation toward 0, checked against a reference
-- computed here with Lua's integers; NaN, ±inf and values whose truncation
-- the int cannot hold are errors naming the function, the value and its
-- position, on every path (to, long, int, copy_, x[i] = t, tensor(t, dt),
-- fill, masked_fill), and a failed write leaves its target as it was.
-- Integer aranges compute in integers (PyTorch's torch.arange(2**53,
-- 2**53 + 4, dtype=torch.int64) is the reference). Shapes whose sizes
-- multiply past int64, indices at math.mininteger, and Lua tables bigger
-- than the memory are errors too.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local fails = R.fails
local inf, nan = math.huge, 0 / 0

local FLOATS = {"float32", "float64", "float16", "bfloat16"}
local INTS = {int64 = {math.mininteger, math.maxinteger},
              int32 = {-2147483648, 2147483647}}

-- the truncation toward 0 of v (a finite float) as a Lua integer
local function trunc(v) return math.tointeger(v >= 0 and math.floor(v) or math.ceil(v)) end

---------------------------------------------------------------- float -> int

TestFloatToInt = {}

-- values every float dtype holds exactly, their truncations in both ints
function TestFloatToInt:testTruncatesTowardZero()
  local v = {0, -0.0, 0.5, -0.5, 1.5, -1.75, 2.5, -3.25, 100, -65504, 65504, 1024.5}
  for _, from in ipairs(FLOATS) do
    local x = qkv.tensor(v, "float64"):to(from)
    for to in pairs(INTS) do
      local want = {}
      for i, w in ipairs(x:double():tolist()) do want[i] = trunc(w) end
      lu.assertEquals(x:to(to):tolist(), want, from .. " -> " .. to)
      lu.assertEquals(x:to(to).dtype, to)
    end
    lu.assertEquals(x:long():tolist(), x:to("int64"):tolist())
    lu.assertEquals(x:int():tolist(), x:to("int32"):tolist())
    lu.assertEquals(x:int().dtype, "int32")
  end
end

-- the edges of each range, from float64 (fractions there) and float32
function TestFloatToInt:testRangeEdges()
  local ok64 = {-2^63, 2^62, -2147483648.5, 9007199254740993.0}
  lu.assertEquals(qkv.tensor(ok64, "float64"):long():tolist(),
                  {math.mininteger, 1 << 62, -2147483648, 9007199254740992})
  lu.assertEquals(qkv.tensor({-2147483648.9, 2147483647.9, -0.9}, "float64"):int():tolist(),
                  {-2147483648, 2147483647, 0})
  lu.assertEquals(qkv.tensor({-2^31, 2^31 - 128}, "float32"):int():tolist(),
                  {-2147483648, 2147483520})
  lu.assertEquals(qkv.tensor({-2^63}, "float32"):long():tolist(), {math.mininteger})
  local bad = {
    {"float64", "int64", 2^63, "9.2233720368547758e+18"},
    {"float64", "int64", -2^63 - 2048, "-9.2233720368547779e+18"},
    {"float64", "int32", 2147483648, "2147483648"},
    {"float64", "int32", -2147483649, "-2147483649"},
    {"float32", "int32", 2^31, "2147483648"},
    {"float32", "int64", 2^63, "9.2233720368547758e+18"},
    {"bfloat16", "int64", 1e38, "9.969209968386869e+37"},
    {"bfloat16", "int32", -2^31 - 2^24, "-2164260864"},
  }
  for _, c in ipairs(bad) do
    local x = qkv.tensor({1, c[3]}, "float64"):to(c[1])
    fails({"to: cannot convert " .. c[4] .. " at [2] to " .. c[2],
           "(out of its range [" .. INTS[c[2]][1] .. ", " .. INTS[c[2]][2] .. "])"},
          x.to, x, c[2])
  end
end

-- NaN and the infinities, from each float dtype into each int, by each
-- function: the message names the function, the value and its place
function TestFloatToInt:testNanAndInfinitiesAreErrors()
  for _, from in ipairs(FLOATS) do
    for to in pairs(INTS) do
      for _, c in ipairs{{nan, "nan", "NaN has no integer value"},
                         {inf, "inf", "an infinity has no integer value"},
                         {-inf, "-inf", "an infinity has no integer value"}} do
        local x = qkv.tensor({{1, 2}, {3, c[1]}}, "float64"):to(from)
        local what = ("cannot convert %s at [2, 2] to %s (%s)"):format(c[2], to, c[3])
        fails("to: " .. what, x.to, x, to)
        fails("tensor: " .. what, qkv.tensor, x, to)
        fails((to == "int64" and "long: " or "int: ") .. what,
              to == "int64" and x.long or x.int, x)
        fails(("to: cannot convert %s to %s"):format(c[2], to), function()
          return x:select(1, 2):select(1, 2):to(to)             -- a 0-d tensor: no place
        end)
      end
    end
  end
end

-- the first bad element in row-major order of the source as the user sees
-- it (a transposed view), also when threads split a big tensor
function TestFloatToInt:testFirstBadElementIsNamed()
  local x = qkv.zeros(3, 2)
  x[{3, 1}] = nan
  x[{1, 2}] = inf
  fails("long: cannot convert inf at [1, 2] to int64", x.long, x)
  fails("long: cannot convert nan at [1, 3] to int64", x.long, x:t())
  local big = qkv.zeros(300000, "float64")
  big[300000] = -1e300
  big[200001] = 1e19
  fails("to: cannot convert 1e+19 at [200001] to int32", big.to, big, "int32")
  big[200001] = 0
  fails("to: cannot convert -1.0000000000000001e+300 at [300000] to int64", big.to, big, "int64")
end

-- a failed copy_ or x[...] = t writes nothing; a broadcast source is named
-- in its own shape
function TestFloatToInt:testFailedWritesChangeNothing()
  for to in pairs(INTS) do
    local x = qkv.tensor({{7, 7, 7}, {7, 7, 7}}, "int64"):to(to)
    fails("copy_: cannot convert nan at [3] to " .. to, x.copy_, x, qkv.tensor{1, 2, nan})
    fails("index: cannot convert inf at [2] to " .. to, function() x[2] = qkv.tensor{1, inf, 3} end)
    fails("index: cannot convert -inf at [1] to " .. to, function()
      x[{{}, 2}] = qkv.tensor({-inf, 1}, "float64")
    end)
    lu.assertEquals(x:tolist(), {{7, 7, 7}, {7, 7, 7}})
    x:copy_(qkv.tensor{1.9, -2.9, 3})
    lu.assertEquals(x:tolist(), {{1, -2, 3}, {1, -2, 3}})
    x[{2, {2, 3}}] = qkv.tensor({-4.5, 5.5}, "float16")
    lu.assertEquals(x:tolist(), {{1, -2, 3}, {1, -4, 5}})
  end
end

-- the numbers a fill or a table writes follow the same rule
function TestFloatToInt:testFillsAndScalars()
  local x = qkv.zeros(2, "int32")
  fails("fill_: nan does not fit in int32", x.fill_, x, nan)
  fails("full: 2147483648.0 does not fit in int32", qkv.full, {2}, 2^31, "int32")
  fails("masked_fill: -inf does not fit in int32", x.masked_fill, x, qkv.tensor{true, false}, -inf)
  fails("tensor: nan does not fit in int64", qkv.tensor, {1, nan}, "int64")
  lu.assertEquals(qkv.tensor({9.2e18, -2^63}, "int64"):tolist(), {9200000000000000000, math.mininteger})
  lu.assertEquals(x:fill_(-2147483648.5):tolist(), {-2147483648, -2147483648})
  -- an op's number too: it was clamped, so that 2^31 - 1 == 2^31
  local m = qkv.tensor({2147483647, 0}, "int32")
  fails("eq: 2147483648 does not fit in int32", m.eq, m, 2147483648)
  fails("lt: -2147483649 does not fit in int32", m.lt, m, -2147483649)
  fails("add: 2147483648 does not fit in int32", function() return m + 2147483648 end)
  lu.assertEquals(m:eq(2147483647):tolist(), {true, false})
  -- an integral tensor to a negative integer's power (PyTorch's error;
  -- it gave 2 ^ -1 = 0); a tensor of exponents computes, as PyTorch's
  local i = qkv.tensor({2, 1, -1, 0}, "int64")
  fails("pow: integers to negative integer powers are not allowed", function() return i ^ -1 end)
  fails("pow: integers to negative integer powers are not allowed", i.pow, i:int(), -2)
  lu.assertEquals((i ^ 2):tolist(), {4, 1, 1, 0})
  lu.assertEquals(i:pow(qkv.tensor({-1}, "int64")):tolist(), {0, 1, -1, 0})
  lu.assertEquals((i:double() ^ -1):tolist(), {0.5, 1, -1, math.huge})
end

-- what the rule leaves alone: bool is nonzero (NaN is true), int64 into
-- int32 wraps as C and PyTorch do, and ints into floats round
function TestFloatToInt:testOtherConversionsUnchanged()
  lu.assertEquals(qkv.tensor{0, nan, inf, -0.0}:bool():tolist(), {false, true, true, false})
  lu.assertEquals(qkv.tensor({2^32 + 5, -2^31 - 1}, "int64"):int():tolist(), {5, 2147483647})
  lu.assertEquals(qkv.tensor({math.maxinteger}, "int64"):double():tolist(), {2^63})
  lu.assertEquals(qkv.tensor({70000}, "int32"):to("float16"):tolist(), {inf})
end

---------------------------------------------------------------- arange

TestIntegerArange = {}

-- the reference: PyTorch's torch.arange(2**53, 2**53 + 4, dtype=torch.int64)
function TestIntegerArange:testExactPast2To53()
  local p = 1 << 53
  local want = {p, p + 1, p + 2, p + 3}
  lu.assertEquals(qkv.arange(2^53, 2^53 + 4, 1, "int64"):tolist(), want)
  lu.assertEquals(qkv.arange(p, p + 4, "int64"):tolist(), want)
  lu.assertEquals(qkv.arange(p + 3, p - 1, -1, "int64"):tolist(), {p + 3, p + 2, p + 1, p})
  -- a span wider than int64: computed without overflow
  lu.assertEquals(qkv.arange(math.mininteger, math.maxinteger, 1 << 62, "int64"):tolist(),
                  {math.mininteger, -(1 << 62), 0, 1 << 62})
  lu.assertEquals(qkv.arange(math.maxinteger, math.mininteger, math.mininteger, "int64"):tolist(),
                  {math.maxinteger, -1})
end

-- bounds and step truncate toward 0 first, as PyTorch's int64 arange
function TestIntegerArange:testCountsAndTruncation()
  for _, dt in ipairs{"int64", "int32"} do
    lu.assertEquals(qkv.arange(0, 10, 3, dt):tolist(), {0, 3, 6, 9})
    lu.assertEquals(qkv.arange(10, 0, -3, dt):tolist(), {10, 7, 4, 1})
    lu.assertEquals(qkv.arange(5, dt):tolist(), {0, 1, 2, 3, 4})
    lu.assertEquals(qkv.arange(0.5, 3, dt):tolist(), {0, 1, 2})
    lu.assertEquals(qkv.arange(-2.5, 2.5, 1, dt):tolist(), {-2, -1, 0, 1})
    lu.assertEquals(qkv.arange(3, 3, dt):numel(), 0)
    lu.assertEquals(qkv.arange(3, dt).dtype, dt)
    fails("arange: step 0.5 is 0 as an integer (" .. dt .. ")", qkv.arange, 0, 2, 0.5, dt)
    fails("arange: step 1 goes away from the end -1", qkv.arange, 0, -1, 1, dt)
  end
  fails("arange: end 1e+19 does not fit in int64", qkv.arange, 0, 1e19, 1e18, "int64")
  fails("arange: start -1e+19 does not fit in int64", qkv.arange, -1e19, 0, 1e18, "int64")
end

function TestIntegerArange:testInt32RangeIsAnError()
  fails("arange: the values from 2147483640 to 2147483649 do not all fit in int32",
        qkv.arange, 2147483640, 2147483650, 1, "int32")
  fails("arange: the values from -2147483649 to -2147483647 do not all fit in int32",
        qkv.arange, -2147483649, -2147483646, 1, "int32")
  lu.assertEquals(qkv.arange(2147483645, 2147483648, 1, "int32"):tolist(),
                  {2147483645, 2147483646, 2147483647})
  lu.assertEquals(qkv.arange(-2147483648, -2147483646, "int32"):tolist(),
                  {-2147483648, -2147483647})
  -- the end is exclusive: a bound outside int32 with values inside is fine
  lu.assertEquals(qkv.arange(2147483647, 2^40, 2^40, "int32"):tolist(), {2147483647})
end

---------------------------------------------------------------- sizes

TestSizeOverflow = {}

-- the issue's case: an empty tensor split into heads of 2^62
function TestSizeOverflow:testHeadsOfAnEmptyTensor()
  fails("heads: 4611686018427387904 heads of x (2, 14, 14, 1, 0) make a shape too large",
        qkv.heads, qkv.zeros(2, 14, 14, 1, 0), 2^62)
  lu.assertEquals(qkv.heads(qkv.zeros(2, 3, 0), 4).shape, qkv.zeros(2, 4, 3, 0).shape)
end

-- every view's sizes multiply within int64 bytes, as zeros' do, also when
-- another size is 0
function TestSizeOverflow:testViewsOfEmptyTensors()
  local e = qkv.zeros(0)
  fails("zeros: shape (2305843009213693952, 2, 0) is too large", qkv.zeros, 2^61, 2, 0)
  fails("view: shape (2305843009213693952, 2, 0) is too large", e.view, e, 2^61, 2, 0)
  fails("reshape: shape (2305843009213693952, 2, 0) is too large", e.reshape, e, 2^61, 2, 0)
  fails("expand: a tensor of shape (1,) cannot expand to (4611686018427387904,)",
        qkv.ones(1).expand, qkv.ones(1), 2^62)
  local ok = e:view(2^30, 0, 2^20)
  lu.assertEquals(ok:stride(), {2^20, 2^20, 1})
  lu.assertEquals(ok:unsqueeze(2):stride(), {2^20, 0, 2^20, 1})     -- PyTorch's size * stride
  lu.assertEquals(qkv.ones(1):expand(2^40, 3):numel(), 3 * 2^40)
end

---------------------------------------------------------------- indices

TestIndexBounds = {}

-- positions at the ends of int64 are checked without overflowing
function TestIndexBounds:testExtremeIndices()
  local x = qkv.arange(3)
  local calls = {
    gather = function(i) return x:gather(1, i) end,
    index_select = function(i) return x:index_select(1, i) end,
    embedding = function(i) return qkv.embedding(i, qkv.ones(3, 2)) end,
    scatter_add_ = function(i) return qkv.zeros(3):scatter_add_(1, i, qkv.ones(1)) end,
    index_add_ = function(i) return qkv.zeros(3):index_add_(1, i, qkv.ones(1)) end,
  }
  for name, f in pairs(calls) do
    for _, v in ipairs{math.mininteger, math.maxinteger, 0, 4} do
      fails(("%s: index %d is out of range for dim 1 of size 3"):format(name, v), f,
            qkv.tensor({v}, "int64"))
    end
    lu.assertEquals(f(qkv.tensor({3}, "int64")):numel() > 0, true, name)
  end
end

---------------------------------------------------------------- Lua values

TestLuaSize = {}

-- an expanded tensor costs nothing, its Lua tables would cost terabytes
function TestLuaSize:testTolistChecksTheSizeFirst()
  fails({"tolist: a tensor of shape (1099511627776,) (1099511627776 elements) is too large",
         "more than half the memory limit"}, function() return qkv.ones(1):expand(2^40):tolist() end)
  fails("tolist: a tensor of shape (1099511627776, 0) (0 elements) is too large", function()
    return qkv.zeros(2^40, 0):tolist()
  end)
  fails("hist: x (1099511627776,) has 1099511627776 values, more than the 16777216 a plot takes",
        qkv.plot.hist, qkv.ones(1):expand(2^40))
  lu.assertStrContains(tostring(qkv.ones(1):expand(2^40)), "...")
  fails("json.encode: cannot encode a userdata", require("qkv.json").encode, {qkv.ones(2)})
end

-- the limit is half the memory limit at 16 bytes a value and 80 a list:
-- 200 rows of 40 take 16 * 8000 + 80 * 201 = 144080 bytes, 201 rows 144800
-- (views of one small row, so that nothing is allocated under the limit)
function TestLuaSize:testTheLimitAndNestedListsBelowIt()
  local row = qkv.zeros(1, 40)
  local was = qkv._memory_limit(2 * 144400)
  local ok, err = pcall(function()
    lu.assertEquals(#row:expand(200, 40):tolist(), 200)
    fails("tolist: a tensor of shape (201, 40)", function() return row:expand(201, 40):tolist() end)
  end)
  qkv._memory_limit(was)
  if not ok then error(err, 0) end
  local l = qkv.arange(60):view(3, 4, 5):tolist()
  lu.assertEquals(l[3][4][5], 59.0)
  lu.assertEquals(#qkv.zeros(300, 300, 3):tolist()[300][300], 3)
end

os.exit(lu.LuaUnit.run(), true)
