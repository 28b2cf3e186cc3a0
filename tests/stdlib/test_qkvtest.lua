-- test_qkvtest.lua: qkv.test (stdlib/qkv/test.lua). assertClose exactly at
-- its rtol/atol boundary (values whose float64 arithmetic is exact), numbers
-- against tensors, shapes, NaN and inf, and its message; assertShape,
-- assertTensorEqual, skipUnlessCuda; bad arguments are errors while failed
-- assertions are LuaUnit failures, also when counted by `qkv test`.
local lu = require "luaunit"
-- the messages quote CPU tensors as they print, also under --device cuda
qkv.set_default_device("cpu")
local t = qkv.test

local EXE = arg and arg[-1] or "build/qkv"
local NAN, INF = 0 / 0, math.huge
local E40 = 2 ^ -40      -- a step past the boundary, exact next to small integers

local function f64(x) return qkv.tensor(x, "float64") end

-- the message of a LuaUnit failure (not an error) raised by f(...)
local function failure(f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok, "the assertion passed")
  lu.assertIsString(err)
  local msg = err:match(lu.FAILURE_PREFIX:gsub("%p", "%%%0") .. "(.*)$")
  lu.assertNotNil(msg, "not a LuaUnit failure: " .. err)
  return msg
end

local function passes(f, ...)
  local ok, err = pcall(f, ...)
  lu.assertTrue(ok, tostring(err))
end

-- an ordinary error (not a failure) whose message contains `want`
local function argerror(want, f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok)
  lu.assertNil(tostring(err):find(lu.FAILURE_PREFIX, 1, true), err)
  lu.assertStrContains(err, want)
end

---------------------------------------------------------------- assertClose

TestAssertClose = {}

-- |a - b| <= atol + rtol * |b|, b the expected value
function TestAssertClose:testRtolBoundary()
  local o = {rtol = 0.25, atol = 0}
  passes(t.assertClose, f64{5}, f64{4}, o)                -- 1 <= 0.25 * 4
  failure(t.assertClose, f64{5 + E40}, f64{4}, o)
  passes(t.assertClose, f64{3}, f64{4}, o)
  failure(t.assertClose, f64{3 - E40}, f64{4}, o)
end

function TestAssertClose:testAtolBoundary()
  local o = {rtol = 0, atol = 0.5}
  passes(t.assertClose, f64{1.5, -0.5}, f64{1, 0}, o)
  failure(t.assertClose, f64{1.5 + E40, -0.5}, f64{1, 0}, o)
  failure(t.assertClose, f64{1.5, -0.5 - E40}, f64{1, 0}, o)
end

function TestAssertClose:testBothTolerancesAdd()
  local o = {rtol = 0.5, atol = 0.25}                     -- 1.25 around b = 2
  passes(t.assertClose, f64{3.25, 0.75}, f64{2, 2}, o)
  failure(t.assertClose, f64{3.25 + E40, 0.75}, f64{2, 2}, o)
  failure(t.assertClose, f64{3.25, 0.75 - E40}, f64{2, 2}, o)
end

-- not symmetric: the tolerance scales with b, as numpy.isclose does
function TestAssertClose:testBIsTheExpectedValue()
  local o = {rtol = 0.2, atol = 0}
  passes(t.assertClose, 4, 5, o)                          -- 1 <= 0.2 * 5
  failure(t.assertClose, 5, 4, o)                         -- 1 > 0.2 * 4
end

function TestAssertClose:testDefaults()
  passes(t.assertClose, 1 + 1e-6, 1)
  passes(t.assertClose, 0, 1e-8)
  failure(t.assertClose, 1 + 1e-4, 1)
  failure(t.assertClose, 0, 1e-7)
end

function TestAssertClose:testNumberAgainstTensor()
  passes(t.assertClose, qkv.full({2, 2}, 3), 3)
  passes(t.assertClose, 3, qkv.full({2, 2}, 3))
  local msg = failure(t.assertClose, 3, qkv.tensor{3, 3, 3.5})
  lu.assertStrContains(msg, "1 of 3 elements differ; max abs difference 0.5 at [3] (a = 3, b = 3.5)")
  lu.assertStrContains(msg, "shapes number and (3,)")
end

function TestAssertClose:testShapesMustBeEqual()
  lu.assertEquals(failure(t.assertClose, qkv.zeros(2, 3), qkv.zeros(3, 2)),
                  "assertClose: shapes (2, 3) and (3, 2) differ")
  -- no broadcasting between tensors
  lu.assertEquals(failure(t.assertClose, qkv.zeros(1, 3), qkv.zeros(3)),
                  "assertClose: shapes (1, 3) and (3,) differ")
end

function TestAssertClose:testNaNEqualsNothing()
  failure(t.assertClose, NAN, NAN)
  failure(t.assertClose, f64{1, NAN}, f64{1, 1})
  local msg = failure(t.assertClose, f64{1, 1}, f64{1, NAN}, {rtol = INF})
  lu.assertStrContains(msg, "max abs difference nan at [2] (a = 1, b = nan)")
end

function TestAssertClose:testInfinities()
  passes(t.assertClose, f64{INF, -INF, 1}, f64{INF, -INF, 1})
  passes(t.assertClose, f64{INF}, f64{INF}, {rtol = 0, atol = 0})
  failure(t.assertClose, f64{INF}, f64{-INF}, {rtol = 1})
  failure(t.assertClose, f64{1e308}, f64{INF}, {rtol = 1})  -- |b| * rtol is inf
  failure(t.assertClose, f64{INF}, f64{1e308}, {rtol = 1})
end

-- the message of docs/testing.md: count, worst difference, where, values, shapes
function TestAssertClose:testMessage()
  local a = f64{{1, 1, 1}, {0.5, 1, 1}}
  local b = f64{{1, 1, 1}, {0.4877, 1, 1}}
  lu.assertEquals(failure(t.assertClose, a, b),
    "assertClose: 1 of 6 elements differ; max abs difference 0.0123 at [2, 1] "
    .. "(a = 0.5, b = 0.4877); shapes (2, 3) and (2, 3); rtol 1e-05, atol 1e-08")
end

function TestAssertClose:testWorstElementIsReported()
  local msg = failure(t.assertClose, f64{{0, 0}, {0, 0}}, f64{{0.25, 0.5}, {-2, 0.125}})
  lu.assertStrContains(msg, "4 of 4 elements differ; max abs difference 2 at [2, 1] (a = 0, b = -2)")
  -- NaN ranks above any number
  msg = failure(t.assertClose, f64{0, 0, NAN}, f64{9, 0, 0})
  lu.assertStrContains(msg, "2 of 3 elements differ; max abs difference nan at [3]")
  -- values that look alike get the digits that tell them apart
  msg = failure(t.assertClose, 1 + 2 ^ -30, 1, {rtol = 0, atol = 0})
  lu.assertStrContains(msg, "(a = 1.000000001, b = 1)")
end

function TestAssertClose:testDtypesMix()
  passes(t.assertClose, qkv.tensor{0.5, 0.25}, f64{0.5, 0.25})
  passes(t.assertClose, qkv.tensor({1, 2}, "int64"), f64{1, 2})
  passes(t.assertClose, qkv.tensor{true, false}, f64{1, 0})
end

-- a million elements, one wrong, found where it is
function TestAssertClose:testLargeTensor()
  local x = qkv.randn(1000, 1000)
  passes(t.assertClose, x, x + 1e-9, {atol = 1e-8})
  local y = x:clone()
  y[500][7] = y[500][7] + 1
  local msg = failure(t.assertClose, y, x)
  lu.assertStrContains(msg, "1 of 1000000 elements differ; max abs difference 1 at [500, 7]")
end

function TestAssertClose:testBadArguments()
  argerror("bad argument #1 to 'assertClose' (tensor or number expected, got string)",
           t.assertClose, "x", 1)
  argerror("bad argument #2 to 'assertClose' (tensor or number expected, got nil)",
           t.assertClose, qkv.ones(2))
  argerror("bad argument #3 to 'assertClose' (unknown option 'rtl' (did you mean 'rtol'?))",
           t.assertClose, 1, 1, {rtl = 1})
  argerror("bad argument #3 to 'assertClose' (rtol must be a non-negative number, got -1)",
           t.assertClose, 1, 1, {rtol = -1})
  argerror("atol must be a non-negative number", t.assertClose, 1, 1, {atol = NAN})
  argerror("atol must be a non-negative number", t.assertClose, 1, 1, {atol = "0"})
  argerror("options must be a table, got number", t.assertClose, 1, 1, 1e-3)
end

---------------------------------------------------------------- the others

TestAssertShape = {}

function TestAssertShape:testShapes()
  passes(t.assertShape, qkv.zeros(3, 4), {3, 4})
  passes(t.assertShape, qkv.zeros(3, 4), qkv.ones(3, 4).shape)
  passes(t.assertShape, qkv.tensor(1), {})
  lu.assertEquals(failure(t.assertShape, qkv.zeros(3, 5), {3, 4}),
                  "assertShape: expected shape (3, 4), got (3, 5)")
  lu.assertEquals(failure(t.assertShape, qkv.zeros(12), {3, 4}),
                  "assertShape: expected shape (3, 4), got (12,)")
  lu.assertEquals(failure(t.assertShape, qkv.zeros(3, 4, 1), {3, 4}),
                  "assertShape: expected shape (3, 4), got (3, 4, 1)")
end

function TestAssertShape:testBadArguments()
  argerror("bad argument #1 to 'assertShape' (tensor expected, got table)",
           t.assertShape, {3, 4}, {3, 4})
  argerror("bad argument #2 to 'assertShape' (table of sizes expected, got number)",
           t.assertShape, qkv.zeros(3), 3)
  argerror("bad argument #2 to 'assertShape' (size 2 is not an integer)",
           t.assertShape, qkv.zeros(3, 4), {3, 4.5})
  -- a shape is its sizes alone: a key beside them was ignored (issue 46)
  argerror("bad argument #2 to 'assertShape' (unknown key 'n' in the shape (it holds its 2 "
           .. "items only))", t.assertShape, qkv.zeros(3, 4), {3, 4, n = 2})
  argerror("bad argument #2 to 'assertShape' (the shape has key 3 past its 1 item (a nil in "
           .. "the list?))", t.assertShape, qkv.zeros(3), {3, [3] = 4})
end

TestAssertTensorEqual = {}

function TestAssertTensorEqual:testEqual()
  local x = qkv.tensor{{1, NAN}, {INF, -0.0}}
  passes(t.assertTensorEqual, x, x:clone())              -- NaN equals NaN here
  passes(t.assertTensorEqual, qkv.tensor{true, false}, qkv.tensor{true, false})
  passes(t.assertTensorEqual, qkv.tensor{0.0}, qkv.tensor{-0.0})
end

function TestAssertTensorEqual:testDiffers()
  lu.assertEquals(failure(t.assertTensorEqual, qkv.tensor{{1, 2}, {3, 4}},
                          qkv.tensor{{1, 5}, {3, 6}}),
    "assertTensorEqual: 2 of 4 elements differ; the first at [1, 2] (a = 2.0, b = 5.0)")
  lu.assertStrContains(failure(t.assertTensorEqual, qkv.tensor{NAN}, qkv.tensor{1}),
                       "1 of 1 elements differ")
  -- int64 compares exactly, past what a double holds
  local big = qkv.tensor({9007199254740992, 9007199254740993}, "int64")
  local msg = failure(t.assertTensorEqual, big, qkv.tensor({9007199254740992, 9007199254740992}, "int64"))
  lu.assertStrContains(msg, "the first at [2] (a = 9007199254740993, b = 9007199254740992)")
end

function TestAssertTensorEqual:testDtypeAndShape()
  lu.assertEquals(failure(t.assertTensorEqual, qkv.tensor{1}, f64{1}),
                  "assertTensorEqual: dtypes float32 and float64 differ")
  lu.assertEquals(failure(t.assertTensorEqual, qkv.zeros(2, 2), qkv.zeros(4)),
                  "assertTensorEqual: shapes (2, 2) and (4,) differ")
end

function TestAssertTensorEqual:testBadArguments()
  argerror("bad argument #1 to 'assertTensorEqual' (tensor expected, got number)",
           t.assertTensorEqual, 1, qkv.ones(1))
  argerror("bad argument #2 to 'assertTensorEqual' (tensor expected, got nil)",
           t.assertTensorEqual, qkv.ones(1))
end

---------------------------------------------------------------- LuaUnit's own

-- under qkv, LuaUnit's assertEquals, assertNotEquals and assertAlmostEquals
-- know tensors (stdlib/qkv/equal.lua); the rest of LuaUnit is as it was
TestLuaUnitOnTensors = {}

function TestLuaUnitOnTensors:testEqualTensorsPass()
  passes(lu.assertEquals, qkv.ones(2), qkv.ones(2))
  passes(lu.assertEquals, qkv.tensor{1, NAN, -INF}, qkv.tensor{1, NAN, -INF})
  passes(lu.assertEquals, qkv.arange(6):view(2, 3):t(), qkv.tensor{{0, 3}, {1, 4}, {2, 5}})
  passes(lu.assertEquals, {w = qkv.ones(2), n = 3, {qkv.eye(2)}}, {w = qkv.ones(2), n = 3, {qkv.eye(2)}})
  passes(lu.assert_equals, qkv.zeros(0, 3), qkv.zeros(0, 3))
end

function TestLuaUnitOnTensors:testValuesDiffer()
  local msg = failure(lu.assertEquals, qkv.tensor{{1, 2}, {3, 4}}, qkv.tensor{{1, 2}, {3, 4.5}})
  lu.assertEquals(msg, table.concat({
    "expected:", tostring(qkv.tensor{{1, 2}, {3, 4.5}}),
    "actual:", tostring(qkv.tensor{{1, 2}, {3, 4}}),
    "1 of 4 elements differ; the first at [2, 2] (actual = 4.0, expected = 4.5)",
    "for floats, qkv.test.assertClose(actual, expected [, {rtol = 1e-5, atol = 1e-8}]) "
    .. "compares within a tolerance"}, "\n"))
end

function TestLuaUnitOnTensors:testShapeDtypeAndKind()
  lu.assertEquals(failure(lu.assertEquals, qkv.ones(2), qkv.ones(3)),
                  "expected: tensor([1., 1., 1.])\nactual: tensor([1., 1.])\nshapes (2,) and (3,) differ")
  lu.assertStrContains(failure(lu.assertEquals, qkv.ones(2), f64{1, 1}),
                       "\ndtypes float32 and float64 differ")
  -- integers: no word of tolerances
  lu.assertEquals(failure(lu.assertEquals, qkv.ones(2, "int64"), qkv.tensor({1, 0}, "int64")),
                  "expected: tensor([1, 0])\nactual: tensor([1, 1])\n"
                  .. "1 of 2 elements differ; the first at [2] (actual = 1, expected = 0)")
  lu.assertStrContains(failure(lu.assertEquals, qkv.ones(1), 1),
                       "a tensor where a number was expected")
end

function TestLuaUnitOnTensors:testInsideTables()
  local msg = failure(lu.assertEquals, {qkv.ones(2), {x = qkv.zeros(1)}},
                      {qkv.ones(2), {x = qkv.ones(1)}})
  lu.assertStrContains(msg, "\nat [2].x: 1 of 1 elements differ; the first at [1] "
                            .. "(actual = 0.0, expected = 1.0)\n")
  lu.assertStrContains(failure(lu.assertEquals, {w = qkv.ones(1)}, {w = qkv.ones(1), b = 2}),
                       "at .b: nil where a value was expected")
end

-- LuaUnit as it is without qkv: a second, unpatched copy of its module
local function pristine_luaunit()
  local path = assert(package.searchpath("luaunit", package.path))
  local exit = os.exit
  local fresh = dofile(path)
  os.exit = exit     -- the copy wraps os.exit, as LuaUnit does when loaded
  return fresh
end

-- where no tensor is involved, the messages are LuaUnit's own, byte for
-- byte (suites compare them: LuaUnit's own does), floats included
function TestLuaUnitOnTensors:testPlainValuesAsLuaUnitSaysThem()
  local stock = pristine_luaunit()
  lu.assertNotIs(stock.assertEquals, lu.assertEquals)
  local cases = {
    {"assertEquals", 0.1 + 0.2, 0.3}, {"assertEquals", 1, 1.2}, {"assertEquals", NAN, NAN},
    {"assertEquals", INF, -INF}, {"assertEquals", 1, 2}, {"assertEquals", {1}, {2}},
    {"assertEquals", {1.5, {x = 2.25}}, {1.5, {x = 2.5}}}, {"assertEquals", 1, "1"},
    {"assertEquals", "a", "b", "with an extra message"},
    {"assertEquals", {1, 2, 3}, {1, 2, 4}, nil, true},
    {"assert_equals", 0.5, 0.25}, {"assertNotEquals", 0.5, 0.5}, {"assertNotEquals", {1}, {1}},
    {"assertAlmostEquals", 1, 1.5, 0.1}, {"assertAlmostEquals", 1, "x", 0.1},
  }
  -- both on one line: some messages name the line that called
  local function both(f, g, ...) return {pcall(f, ...)}, {pcall(g, ...)} end
  for _, c in ipairs(cases) do
    local name = c[1]
    local got, want = both(lu[name], stock[name], table.unpack(c, 2, 5))
    lu.assertEquals(got, want, name)
    lu.assertFalse(got[1], name)
  end
  passes(lu.assertEquals, 2, 2.0)
  lu.assertEquals(failure(lu.assertEquals, 0.1 + 0.2, 0.3), "expected: 0.3, actual: 0.3")
end

function TestLuaUnitOnTensors:testNotEquals()
  passes(lu.assertNotEquals, qkv.ones(2), qkv.zeros(2))
  passes(lu.assertNotEquals, qkv.ones(2), qkv.ones(2, "float64"))
  passes(lu.assert_not_equals, {qkv.ones(2)}, {qkv.ones(3)})
  lu.assertEquals(failure(lu.assertNotEquals, qkv.ones(2), qkv.ones(2)),
                  "Received the not expected value: tensor([1., 1.])")
  lu.assertEquals(failure(lu.assertNotEquals, 1, 1), "Received the not expected value: 1")
end

-- assertTableContains and assertNotTableContains compare a tensor by
-- value too: a table holding an equal tensor passed assertNotTableContains
function TestLuaUnitOnTensors:testTableContains()
  local t = {qkv.tensor{1, 2}, 3}
  passes(lu.assertTableContains, t, qkv.tensor{1, 2})
  passes(lu.assert_table_contains, {{qkv.ones(2)}}, {qkv.ones(2)})
  passes(lu.assertNotTableContains, t, qkv.tensor{1, 3})
  passes(lu.assertNotTableContains, t, qkv.tensor({1, 2}, "float64"))
  lu.assertStrContains(failure(lu.assertNotTableContains, t, qkv.tensor{1, 2}),
                       "Found unexpected value: tensor([1., 2.])")
  lu.assertStrContains(failure(lu.assertTableContains, t, qkv.zeros(2)),
                       "Could not find expected value: tensor([0., 0.])")
  passes(lu.assertTableContains, {1, 2}, 2)                -- plain values: LuaUnit's own
  lu.assertStrContains(failure(lu.assertNotTableContains, {1, 2}, 2), "DOES contain")
end

-- assertItemsEquals compares tensors by value too: two tables of equal
-- tensors failed (LuaUnit compared them by identity)
function TestLuaUnitOnTensors:testItemsEquals()
  passes(lu.assertItemsEquals, {qkv.tensor{1, 2}, 3}, {3, qkv.tensor{1, 2}})
  passes(lu.assert_items_equals, {a = qkv.ones(2)}, {qkv.ones(2)})      -- keys aside
  passes(lu.assertItemsEquals, {{qkv.ones(2)}}, {{qkv.ones(2)}})
  passes(lu.assertItemsEquals, qkv.tensor{1, 2}, qkv.tensor{1, 2})
  lu.assertEquals(failure(lu.assertItemsEquals, {qkv.tensor{1, 2}}, {qkv.tensor{1, 3}}),
                  "Content of the tables are not identical:\nExpected: {tensor([1., 3.])}\n"
                  .. "Actual: {tensor([1., 2.])}")
  failure(lu.assertItemsEquals, {qkv.tensor{1, 2}}, {qkv.tensor({1, 2}, "float64")})
  failure(lu.assertItemsEquals, {qkv.tensor{1, 2}, 3}, {qkv.tensor{1, 2}})
  passes(lu.assertItemsEquals, {1, 2}, {2, 1})                  -- plain values: LuaUnit's own
  lu.assertStrContains(failure(lu.assertItemsEquals, {1, 2}, {2, 3}),
                       "Content of the tables are not identical")
end

function TestLuaUnitOnTensors:testAlmostEqualsIsAssertCloseWithAMargin()
  passes(lu.assertAlmostEquals, qkv.tensor{1, 2}, qkv.tensor{1, 2.005}, 0.01)
  lu.assertStrContains(failure(lu.assertAlmostEquals, f64{1, 2}, f64{1, 2.5}, 0.25),
                       "1 of 2 elements differ; max abs difference 0.5 at [2]")
  passes(lu.assertAlmostEquals, 1, 1.001, 0.01)
end

-- the extra message comes first, as LuaUnit puts it; the failure points
-- at the test's line
function TestLuaUnitOnTensors:testExtraMessageAndLine()
  local ok, err = pcall(lu.assertEquals, qkv.ones(1), qkv.zeros(1), "after step 3")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "after step 3\nexpected: tensor([0.])")
  lu.assertNil(err:find("equal.lua", 1, true), err)
  local line = debug.getinfo(1, "l").currentline + 1
  local ok2, err2 = pcall(function() lu.assertEquals(qkv.ones(1), qkv.zeros(1)) end)
  lu.assertFalse(ok2)
  lu.assertStrContains(err2, "test_qkvtest.lua:" .. line .. ":")
end

-- a closed tensor is an error, not a failure or a crash
function TestLuaUnitOnTensors:testClosedTensor()
  local x = qkv.ones(300)
  getmetatable(x).__close(x)
  argerror("closed", lu.assertEquals, x, qkv.ones(300))
end

TestQkvTestModule = {}

function TestQkvTestModule:testSkipUnlessCuda()
  local ok, err = pcall(t.skipUnlessCuda)
  if qkv.cuda_available() then
    lu.assertTrue(ok)
  else
    lu.assertFalse(ok)
    lu.assertStrContains(err, lu.SKIP_PREFIX .. "needs CUDA")
  end
end

function TestQkvTestModule:testLuaUnitThroughIt()
  lu.assertIs(require "qkv.test", t)
  lu.assertIs(t.assertEquals, lu.assertEquals)
  lu.assertIs(t.LuaUnit, lu.LuaUnit)
end

-- counted by the runner: 3 failures (not errors), the bad argument 1
-- error, the CUDA test skipped (passed where a GPU is)
function TestQkvTestModule:testFailuresCountAsFailures()
  local fixture = "tests/fixtures/runner/fixtures/qkvtest/test_assertions.lua"
  local p = io.popen("'" .. EXE .. "' test " .. fixture .. " 2>&1")
  local out = p:read("a")
  local _, _, code = p:close()
  lu.assertEquals(code, 1)
  if qkv.cuda_available() then
    lu.assertStrContains(out, "2 successes, 3 failures, 1 error")
    lu.assertEquals(out:match("([^\n]*)\n$"), "2 passed, 4 failed")
  else
    lu.assertStrContains(out, "1 success, 3 failures, 1 error, 1 skipped")
    lu.assertEquals(out:match("([^\n]*)\n$"), "1 passed, 4 failed, 1 skipped")
  end
end

os.exit(lu.LuaUnit.run(), true)
