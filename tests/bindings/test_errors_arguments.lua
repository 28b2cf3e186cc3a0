-- test_errors_arguments.lua: every bad argument (a wrong type, shapes that
-- do not fit, a dim, index or size out of range, an unknown dtype,
-- PyTorch's 0-based dims and indices) is a Lua error that pcall catches
-- and whose message names the function (and the shapes, for shape
-- errors); the process never crashes (docs/tensors.md, "Errors").
-- Misspelt names and PyTorch's keywords are test_errors_names_keywords.lua's.
local lu = require "luaunit"

---------------------------------------------------------------- helpers

-- f(...) must fail; its message must contain every string in `subs`
local R = dofile("tests/helpers/attn_ref.lua")
local fails = R.fails

-- the message of a C function called straight from pcall has no position
local function exact(expected, f, ...)
  local ok, msg = pcall(f, ...)
  lu.assertFalse(ok)
  lu.assertEquals(msg, expected)
end

local function M(r, c) return qkv.ones(r, c) end
local TENSOR_EXPECTED = "qkv.Tensor expected, got number"

-- f() fails at this file's line with exactly `want` after the place
local HERE = "test_errors_arguments%.lua:%d+: "
local function missing(want, f)
  local ok, msg = pcall(f)
  lu.assertFalse(ok, want)
  lu.assertEquals(type(msg), "string")
  local place, rest = msg:match("^(.-" .. HERE .. ")(.*)$")
  lu.assertNotNil(place, msg)
  lu.assertEquals(rest, want)
  return msg
end

---------------------------------------------------------------- types

TestWrongTypes = {}

function TestWrongTypes:testNumberForTensorModule()
  local x = M(2, 2)
  for _, name in ipairs{"exp", "log", "sqrt", "abs", "tanh", "neg", "sum", "mean",
                        "max", "min", "var", "std", "argmax", "argmin"} do
    fails({TENSOR_EXPECTED, name}, qkv[name], 1)
    fails({TENSOR_EXPECTED, name}, x[name], 1)
  end
  for _, name in ipairs{"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                        "eq", "ne", "lt", "le", "gt", "ge"} do
    fails({TENSOR_EXPECTED, name}, qkv[name], 1, 2)
  end
  fails({TENSOR_EXPECTED, "matmul"}, qkv.matmul, 1, x)
  fails({TENSOR_EXPECTED, "matmul"}, qkv.matmul, x, 1)
  fails({"qkv.Tensor expected, got nil", "matmul"}, qkv.matmul, x, nil)
  fails({TENSOR_EXPECTED, "masked_fill"}, qkv.masked_fill, 1, x:gt(0), 0)
  fails({TENSOR_EXPECTED, "masked_fill"}, qkv.masked_fill, x, 1, 0)
end

function TestWrongTypes:testNumberForTensorMethods()
  local x = M(2, 2)
  for _, name in ipairs{"t", "transpose", "permute", "view", "reshape", "narrow", "select",
                        "unsqueeze", "squeeze", "expand", "contiguous", "clone", "to",
                        "tolist", "item", "numel", "size", "stride", "dim", "is_contiguous"} do
    fails({TENSOR_EXPECTED}, x[name], 5)
  end
  fails({TENSOR_EXPECTED, "sum"}, function() return x.sum(5) end)
  fails({TENSOR_EXPECTED, "matmul"}, function() return x:matmul(3) end)
end

function TestWrongTypes:testOtherArguments()
  local x = M(2, 3)
  fails({"add", "expected a tensor or a number, got string"}, function() return x + "a" end)
  fails({"mul", "got table"}, function() return qkv.mul(x, {1}) end)
  fails({"mul", "got nil"}, function() return qkv.mul(x, {}) end)      -- {}: no options
  fails({"lt", "got string"}, function() return x:lt("a") end)
  fails({"sum", "number expected, got string"}, function() return x:sum("a") end)
  fails({"view", "got string"}, function() return x:view("a") end)
  fails({"narrow", "number expected, got string"}, function() return x:narrow("a", 1, 1) end)
  fails({"transpose", "number expected"}, function() return x:transpose(1) end)
  fails({"masked_fill", "number expected, got string"}, function() return x:masked_fill(x:gt(0), "a") end)
  fails({"tensor", "table, number or boolean expected, got string"}, function() return qkv.tensor("abc") end)
  fails({"tensor", "got nil"}, function() return qkv.tensor(nil) end)
  fails({"tensor", "expected numbers or booleans, got a string"}, function() return qkv.tensor{1, "a"} end)
  fails({"zeros", "size, dtype or device expected, got table"},
        function() return qkv.zeros(2, {}, "float32") end)
  fails({"arange", "number expected"}, function() return qkv.arange("x") end)
  fails({"seed", "number expected, got string"}, function() return qkv.seed("x") end)
  fails({"cat", "table expected, got number"}, function() return qkv.cat(5) end)
  fails({"stack", "table expected, got number"}, function() return qkv.stack(5) end)
  fails({"full", "number expected"}, function() return qkv.full(2) end)
  fails({"eye", "eye takes n or n, m"}, function() return qkv.eye() end)
  fails({"index", "integer"}, function() return x[1.5] end)
  fails({"index", "no settable fields"}, function() x.foo = 1 end)
  fails({"newindex", "number or qkv.Tensor expected, got string"}, function() x[1] = "a" end)
  fails({"len", "0-d"}, function() return #qkv.tensor(1) end)
  fails({"index", "0-d"}, function() return qkv.tensor(1)[1] end)
end

function TestWrongTypes:testIgnoredArguments()
  -- a nil among the sizes, or a size after the dtype, must not be dropped
  fails("zeros", function() return qkv.zeros(nil, 3) end)
  fails("zeros", function() return qkv.zeros(2, nil, 3) end)
  fails("zeros", function() return qkv.zeros(2, "int64", 3) end)
end

---------------------------------------------------------------- matmul

TestMatmulErrors = {}

function TestMatmulErrors:testInnerDims()
  exact("matmul: (2, 3) @ (4, 5): inner dims 3 and 4 differ", qkv.matmul, M(2, 3), M(4, 5))
  exact("matmul: (2, 3) @ (4, 5): inner dims 3 and 4 differ", M(2, 3).matmul, M(2, 3), M(4, 5))
  fails("matmul: (2, 3) @ (4, 5): inner dims 3 and 4 differ", function() return M(2, 3):matmul(M(4, 5)) end)
  fails({"matmul", "(3,) @ (4,)", "inner dims 3 and 4 differ"}, qkv.matmul, qkv.ones(3), qkv.ones(4))
  fails({"matmul", "(2, 3) @ (2,)", "inner dims 3 and 2 differ"}, qkv.matmul, M(2, 3), qkv.ones(2))
  fails({"matmul", "(2, 2, 3) @ (2, 2, 3)"}, qkv.matmul, qkv.ones(2, 2, 3), qkv.ones(2, 2, 3))
  fails({"matmul", "() @ (3, 4)"}, qkv.matmul, qkv.tensor(1), M(3, 4))
end

function TestMatmulErrors:testBatchDims()
  fails({"matmul", "(2, 2, 3) @ (3, 3, 2)", "batch dims do not broadcast"},
    qkv.matmul, qkv.ones(2, 2, 3), qkv.ones(3, 3, 2))
  fails({"matmul", "(4, 2, 2, 3) @ (3, 3, 2)", "batch dims do not broadcast"},
    qkv.matmul, qkv.ones(4, 2, 2, 3), qkv.ones(3, 3, 2))
end

function TestMatmulErrors:testDtypes()
  fails({"matmul", "(2, 3) @ (3, 2)", "int64 and int64"},
    qkv.matmul, qkv.ones(2, 3, "int64"), qkv.ones(3, 2, "int64"))
  fails({"matmul", "float32 and float64"}, qkv.matmul, qkv.ones(2, 3), qkv.ones(3, 2, "float64"))
  fails({"matmul", "float64 and float32"}, qkv.matmul, qkv.ones(2, 3, "float64"), qkv.ones(3, 2))
  fails({"matmul", "bool"}, qkv.matmul, qkv.ones(2, 3, "bool"), qkv.ones(3, 2, "bool"))
end

---------------------------------------------------------------- broadcasting

TestBroadcastErrors = {}

function TestBroadcastErrors:testBinary()
  local a, b = M(2, 3), qkv.ones(4)
  exact("add: shapes (2, 3) and (4,) do not broadcast", qkv.add, a, b)
  fails("add: shapes (2, 3) and (4,) do not broadcast", function() return a + b end)
  fails("sub: shapes (4,) and (2, 3) do not broadcast", function() return b - a end)
  fails("mul: shapes (2, 3) and (4,) do not broadcast", function() return a * b end)
  fails("div: shapes (2, 3) and (4,) do not broadcast", function() return a / b end)
  fails("pow: shapes (2, 3) and (4,) do not broadcast", function() return a ^ b end)
  for _, name in ipairs{"maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"} do
    fails(name .. ": shapes (2, 3) and (4,) do not broadcast", qkv[name], a, b)
    fails(name .. ": shapes (2, 3) and (4,) do not broadcast", function() return a[name](a, b) end)
  end
  fails("add: shapes (2, 0) and (3,) do not broadcast", qkv.add, qkv.zeros(2, 0), qkv.ones(3))
  fails("max", function() return a:max(b) end)
end

function TestBroadcastErrors:testMaskedFill()
  fails({"masked_fill", "(2,)", "(3, 4)"}, function() return M(3, 4):masked_fill(qkv.ones(2):gt(0), 1) end)
  fails({"masked_fill", "(3, 4, 2)", "(3, 4)"},
    function() return M(3, 4):masked_fill(qkv.ones(3, 4, 2):gt(0), 1) end)
end

function TestBroadcastErrors:testSetIndexAndExpand()
  local x = M(3, 4)
  fails({"index", "(5,)", "(4,)"}, function() x[1] = qkv.ones(5) end)
  fails({"expand", "(3, 4)", "(3, 5)"}, function() return x:expand(3, 5) end)
  fails({"expand", "(3, 4)"}, function() return x:expand(4) end)
end

---------------------------------------------------------------- ranges

TestRangeErrors = {}

function TestRangeErrors:testDims()
  local x = M(3, 4)
  fails({"sum", "dim 3 out of range"}, function() return x:sum(3) end)
  fails({"sum", "dim -3 out of range"}, function() return x:sum(-3) end)
  fails({"sum", "dim 0 out of range"}, function() return qkv.sum(x, 0) end)
  for _, name in ipairs{"mean", "max", "min", "var", "std", "argmax", "argmin"} do
    fails({name, "dim 3 out of range"}, x[name], x, 3)           -- found as qkv.<name>
  end
  fails({"argmax", "dim 3 out of range"}, function() return x:argmax(3) end)
  fails({"transpose", "dim 3 out of range"}, function() return x:transpose(1, 3) end)
  fails({"permute", "dim 3 out of range"}, function() return x:permute(1, 3) end)
  fails({"select", "dim 3 out of range"}, function() return x:select(3, 1) end)
  fails({"narrow", "dim 5 out of range"}, function() return x:narrow(5, 1, 1) end)
  fails({"squeeze", "dim 5 out of range"}, function() return x:squeeze(5) end)
  fails({"unsqueeze", "dim 4 out of range"}, function() return x:unsqueeze(4) end)
  fails({"size", "dim 3 out of range"}, function() return x:size(3) end)
  fails({"stride", "dim 3 out of range"}, function() return x:stride(3) end)
  fails({"cat", "dim 3 out of range"}, function() return qkv.cat({x, x}, 3) end)
  fails({"stack", "dim 4 out of range"}, function() return qkv.stack({x, x}, 4) end)
  -- a 0-d tensor takes dim 1 and -1, as PyTorch's takes 0 and -1, no other
  lu.assertEquals(qkv.tensor(3):sum(1):item(), 3)
  fails({"sum", "dim 2 out of range [-1, 1]"}, function() return qkv.tensor(1):sum(2) end)
end

function TestRangeErrors:testIndices()
  local x = M(3, 4)
  fails({"index", "index 4 out of range for size 3"}, function() return x[4] end)
  fails({"index", "index 0 out of range"}, function() return x[0] end)
  fails({"index", "index -4 out of range"}, function() return x[-4] end)
  fails({"index", "out of range"}, function() return qkv.ones(3)[4] end)
  fails({"index", "index 5 out of range"}, function() x[5] = 1 end)
  fails({"select", "index 5 out of range for size 4"}, function() return x:select(2, 5) end)
  fails({"select", "index 0 out of range"}, function() return x:select(1, 0) end)
end

function TestRangeErrors:testNarrow()
  local x = M(3, 4)
  fails({"narrow", "start 0 with length 1 is out of range"}, function() return x:narrow(2, 0, 1) end)
  fails({"narrow", "start 6 with length 0 is out of range"}, function() return x:narrow(2, 6, 0) end)
  fails({"narrow", "start 2 with length 5", "size 4"}, function() return x:narrow(2, 2, 5) end)
  fails({"narrow", "length -1"}, function() return x:narrow(2, 2, -1) end)
  fails({"narrow", "size 3"}, function() return x:narrow(1, 3, 2) end)
  fails({"narrow", "start -6 with length 1"}, function() return x:narrow(2, -6, 1) end)
  lu.assertEquals(x:narrow(2, -1, 1):tolist(), x:narrow(2, 4, 1):tolist())
end

---------------------------------------------------------------- shapes and sizes

TestShapeErrors = {}

function TestShapeErrors:testViewNeedsCopy()
  local t = M(3, 4):t()
  fails({"view", "reshape", "(4, 3)"}, function() return t:view(12) end)
  local r = t:reshape(12)                          -- reshape copies instead
  lu.assertEquals(tostring(r.shape), "(12,)")
  fails({"view", "reshape"}, function() return qkv.ones(4, 4):narrow(2, 1, 2):view(8) end)
end

function TestShapeErrors:testElementCount()
  local x = M(3, 4)
  fails({"view", "(5,)", "(3, 4)", "12"}, function() return x:view(5) end)
  fails({"reshape", "(5,)", "(3, 4)", "12"}, function() return x:reshape(5) end)
  fails({"view", "(3, 4)"}, function() return x:view(5, -1) end)
  fails({"reshape", "(3, 4)"}, function() return x:reshape(-1, 5) end)
  fails({"view", "(3, 4)"}, function() return x:view(0, -1) end)
  fails({"view", "only one size can be -1"}, function() return x:view(-1, -1) end)
  fails({"reshape", "only one size can be -1"}, function() return x:reshape(-1, 2, -1) end)
end

function TestShapeErrors:testBadSizes()
  fails({"zeros", "size must be a non-negative integer, got -1"}, function() return qkv.zeros(-1) end)
  fails({"ones", "got -3"}, function() return qkv.ones(2, -3) end)
  fails({"rand", "got -1"}, function() return qkv.rand(-1) end)
  fails({"view", "got -2"}, function() return M(3, 4):view(-2, 6) end)
  fails({"zeros", "got 1.5"}, function() return qkv.zeros(1.5) end)
  fails({"ones", "got 1.5"}, function() return qkv.ones(2, 1.5) end)
  fails({"zeros", "got 1.5"}, function() return qkv.zeros{2, 1.5} end)
  fails({"view", "got 1.5"}, function() return M(3, 4):view(1.5) end)
  fails({"expand", "got 2.5"}, function() return M(3, 4):expand(2.5, 4) end)
  fails({"eye", "got 1.5"}, function() return qkv.eye(1.5) end)
  fails({"zeros", "got 1e+300"}, function() return qkv.zeros(1e300) end)
end

function TestShapeErrors:testReadmeExamples()
  -- docs/tensors.md's two outputs of print(pcall(...)), verbatim
  exact("matmul: (2, 3) @ (4, 5): inner dims 3 and 4 differ", qkv.matmul, qkv.ones(2, 3), qkv.ones(4, 5))
  exact("bad argument #1 to 'qkv.zeros' (size must be a non-negative integer, got -1)", qkv.zeros, -1)
end

function TestShapeErrors:testHuge()
  fails({"zeros", "too large"}, function() return qkv.zeros(1e12, 1e12) end)
  fails({"zeros", "out of memory: tried to allocate"}, function() return qkv.zeros(1e12) end)
  fails({"ones", "out of memory: tried to allocate 8000000000000 bytes"},
    function() return qkv.ones(1e12, "float64") end)
  lu.assertEquals(qkv.zeros(2):numel(), 2)         -- still alive and well
end

function TestShapeErrors:testHugeDirectPcall()
  -- called straight from pcall, as the documents' examples do
  fails({"zeros", "too large"}, qkv.zeros, 1e12, 1e12)
  fails({"zeros", "out of memory: tried to allocate"}, qkv.zeros, 1e12)
end

function TestShapeErrors:testDirectPcallNamesMethod()
  -- pcall(f, ...) as in the documents: methods must still be named
  local x = M(3, 4)
  fails({"narrow", "dim 5 out of range"}, x.narrow, x, 5, 1, 1)
  fails({"transpose", "dim 3 out of range"}, x.transpose, x, 1, 3)
end

function TestShapeErrors:testRagged()
  fails({"tensor", "ragged"}, function() return qkv.tensor{{1, 2}, {3}} end)
  fails({"tensor", "ragged"}, function() return qkv.tensor{{1, 2}, 3} end)
  fails({"tensor", "ragged"}, function() return qkv.tensor{1, {2}} end)
  fails({"tensor", "ragged"}, function() return qkv.tensor{{{1}, {2}}, {{3}, {4, 5}}} end)
  fails({"tensor", "ragged"}, function() return qkv.tensor{{}, {1}} end)
end

function TestShapeErrors:testTooManyDims()
  local one8 = qkv.ones(1, 1, 1, 1, 1, 1, 1, 1)
  fails({"zeros", "more than 8 dims"}, function() return qkv.zeros(1, 1, 1, 1, 1, 1, 1, 1, 1) end)
  fails({"zeros", "more than 8 dims"}, function() return qkv.zeros{1, 1, 1, 1, 1, 1, 1, 1, 1} end)
  fails({"tensor", "8"}, function() return qkv.tensor{{{{{{{{{1}}}}}}}}} end)
  fails({"unsqueeze", "more than 8 dims"}, function() return one8:unsqueeze(1) end)
  fails({"view", "more than 8 dims"}, function() return M(3, 4):view(1, 1, 1, 1, 1, 1, 1, 3, 4) end)
  fails({"expand", "more than 8 dims"}, function() return M(3, 4):expand(1, 1, 1, 1, 1, 1, 1, 3, 4) end)
  fails({"stack", "more than 8 dims"}, function() return qkv.stack{one8, one8} end)
  fails({"rand", "more than 8 dims"}, function() return qkv.rand(1, 1, 1, 1, 1, 1, 1, 1, 1) end)
end

function TestShapeErrors:testPermuteAndT()
  local x = qkv.ones(2, 3, 4)
  fails({"permute", "dim 1 repeated"}, function() return x:permute(1, 1, 2) end)
  fails({"permute", "repeated"}, function() return x:permute(3, -1, 1) end)
  fails({"permute", "(2, 3, 4)"}, function() return x:permute(1, 2) end)
  fails({"t", "(2, 3, 4)", "transpose"}, function() return x:t() end)
end

---------------------------------------------------------------- dtypes

TestDtypeErrors = {}

function TestDtypeErrors:testUnknownDtypes()
  local msg = "unknown dtype"
  fails({"zeros", msg, "float8"}, function() return qkv.zeros(2, "float8") end)
  fails({"ones", msg}, function() return qkv.ones({2}, "double") end)
  fails({"tensor", msg, "int16"}, function() return qkv.tensor({1}, "int16") end)
  fails({"to", msg, "double"}, function() return M(2, 2):to("double") end)
  fails({"arange", msg, "foo"}, function() return qkv.arange(3, "foo") end)
  fails({"eye", msg}, function() return qkv.eye(2, "x") end)
  fails({"rand", msg, "half"}, function() return qkv.rand(2, "half") end)
  fails({"randn", msg}, function() return qkv.randn(2, "Float32") end)
  fails({"zeros", msg}, function() return qkv.zeros("a") end)
  fails({"full", msg}, function() return qkv.full({2}, 1, "x") end)
end

function TestDtypeErrors:testRandomDtypes()
  fails({"rand", "float32 or float64"}, function() return qkv.rand(2, "int64") end)
  fails({"rand", "float32 or float64"}, qkv.rand, 2, "int64")
  fails({"randn", "float32 or float64"}, function() return qkv.randn(2, 2, "bool") end)
end

function TestDtypeErrors:testValues()
  fails({"tensor", "int64"}, function() return qkv.tensor({1e300}, "int64") end)
  fails({"tensor", "int64"}, function() return qkv.tensor({0 / 0}, "int64") end)
end

---------------------------------------------------------------- misc

TestMiscErrors = {}

function TestMiscErrors:testItem()
  fails({"item", "(3, 4)", "12 elements"}, function() return M(3, 4):item() end)
  fails({"item", "(0,)", "0 elements"}, function() return qkv.zeros(0):item() end)
end

function TestMiscErrors:testCatStack()
  local x = M(3, 4)
  fails({"cat", "(3, 4)", "(2, 2)"}, function() return qkv.cat{x, M(2, 2)} end)
  fails({"cat", "(3, 4)", "(3,)"}, function() return qkv.cat{x, qkv.ones(3)} end)
  fails({"cat", "(3, 4)", "(3, 5)", "dim 1"}, function() return qkv.cat({x, M(3, 5)}, 1) end)
  fails({"stack", "(3, 4)", "(4, 3)"}, function() return qkv.stack{x, M(4, 3)} end)
  fails({"cat", "item 2", "number"}, function() return qkv.cat{x, 1} end)
  fails({"stack", "item 2", "string"}, function() return qkv.stack{x, "a"} end)
  fails({"cat", "non-empty"}, function() return qkv.cat{} end)
  fails({"stack", "non-empty"}, function() return qkv.stack{} end)
  fails({"cat", "non-empty"}, qkv.cat, {})
end

function TestMiscErrors:testArange()
  fails({"arange", "step"}, function() return qkv.arange(0, 5, 0) end)
  fails({"arange", "step"}, qkv.arange, 1, 2, 0)
  fails({"arange", "finite"}, function() return qkv.arange(0 / 0) end)
  fails({"arange", "finite"}, function() return qkv.arange(0, math.huge) end)
end

function TestMiscErrors:testReduceEmpty()
  fails({"max", "(0, 3)"}, function() return qkv.zeros(0, 3):max() end)
  fails({"argmin", "(0, 3)"}, function() return qkv.zeros(0, 3):argmin(1) end)
end

function TestMiscErrors:testNanInfAreValues()
  local _ <close> = R.cpu_only()
  local x = qkv.tensor{0 / 0, 1 / 0}
  lu.assertEquals(tostring(x), "tensor([nan, inf])")
  local y = qkv.tensor{-1 / 0, 0 / 0, 2}
  local s = tostring(y)
  lu.assertStrContains(s, "-inf")
  lu.assertStrContains(s, "nan")
  lu.assertTrue((x + 1):tolist()[2] == math.huge)
  lu.assertTrue(x:sum():item() ~= x:sum():item())
  lu.assertTrue(qkv.tensor({0 / 0}, "float64"):exp():tolist()[1] ~= 0)
end

function TestMiscErrors:testStillRunning()
  -- after all the errors above the interpreter still computes
  collectgarbage()
  lu.assertEquals(qkv.ones(3, 3):sum():item(), 9)
end


---------------------------------------------------------------- counting from 1

-- PyTorch's 0 says that qkv counts from 1, and what the 1-based value is
TestFromOne = {}

local DIM0 = "dim 0 out of range [-2, 2]: qkv counts dims from 1, so PyTorch's dim 0 is dim 1 here"
local INDEX0 = "qkv counts from 1, so PyTorch's index 0 is 1 here"
local IDS0 = "qkv counts from 1, so 0-based indices need a + 1"

function TestFromOne:testDims()
  local x = M(2, 3)
  missing("bad argument #1 to 'transpose' (" .. DIM0 .. ")", function() return x:transpose(0, 1) end)
  missing("bad argument #1 to 'sum' (" .. DIM0 .. ")", function() return x:sum(0) end)
  missing("bad argument #1 to 'softmax' (" .. DIM0 .. ")", function() return x:softmax(0) end)
  -- a dim out of range that is not 0 says nothing about PyTorch
  local msg = fails("dim 3 out of range [-2, 2]", function() return x:sum(3) end)
  lu.assertNotStrContains(msg, "PyTorch")
  lu.assertEquals(tostring(x:transpose(1, 2).shape), "(3, 2)")
end

function TestFromOne:testIndices()
  local x = qkv.tensor{{1, 2, 3}, {4, 5, 6}}
  missing("bad argument #2 to 'index' (index 0 out of range for size 2: " .. INDEX0 .. ")",
          function() return x[0] end)
  missing("bad argument #2 to 'newindex' (index 0 out of range for size 2: " .. INDEX0 .. ")",
          function() x[0] = 1 end)
  missing("index: 0 is out of range for dim 2 of size 3: " .. INDEX0, function() return x[{1, 0}] end)
  missing("bad argument #2 to 'select' (index 0 out of range for size 3: " .. INDEX0 .. ")",
          function() return x:select(2, 0) end)
  missing("narrow: start 0 with length 1 is out of range for dim 2 of size 3: " .. INDEX0,
          function() return x:narrow(2, 0, 1) end)
  local msg = fails("index 3 out of range for size 2", function() return x[3] end)
  lu.assertNotStrContains(msg, "PyTorch")
  lu.assertEquals(x[1]:tolist(), {1, 2, 3})
  lu.assertEquals(x[{2, 1}], 4)
end

function TestFromOne:testIndexTensors()
  local x = qkv.tensor{{1, 2, 3}, {4, 5, 6}}
  local ids = qkv.tensor({0, 1}, "int64")
  missing("embedding: index 0 is out of range for dim 1 of size 2: " .. IDS0,
          function() return qkv.embedding(ids, x) end)
  missing("index_select: index 0 is out of range for dim 2 of size 3: " .. IDS0,
          function() return x:index_select(2, ids) end)
  missing("gather: index 0 is out of range for dim 2 of size 3: " .. IDS0,
          function() return x:gather(2, qkv.tensor({{0}, {1}}, "int64")) end)
  -- the 1-based ids work
  lu.assertEquals(qkv.embedding(ids + 1, x):tolist(), {{1, 2, 3}, {4, 5, 6}})
  lu.assertEquals(x:gather(2, qkv.tensor({{1}, {3}}, "int64")):tolist(), {{1}, {6}})
end

---------------------------------------------------------------- matmul's dtypes

function TestMatmulErrors:testMixedFloatDtypes()
  local a, b = qkv.ones(3, 4, "float16"), qkv.ones(4, 2, "bfloat16")
  missing('matmul: (3, 4) @ (4, 2): the dtypes must agree, got float16 and bfloat16: for x:matmul(y), '
          .. 'convert one with y:to("float16") or x:to("bfloat16")', function() return a:matmul(b) end)
  missing('matmul: (3, 4) @ (4, 2): expected floating-point tensors, got int64 and float32: for '
          .. 'x:matmul(y), convert x with x:to("float32")',
          function() return qkv.ones(3, 4, "int64"):matmul(qkv.ones(4, 2)) end)
  missing("matmul: (3, 4) @ (4, 2): expected floating-point tensors, got bool and bool: convert "
          .. "both, e.g. with x:float()",
          function() return qkv.ones(3, 4, "bool"):matmul(qkv.ones(4, 2, "bool")) end)
  -- what the message says works
  lu.assertEquals(a:matmul(b:to("float16")):tolist(), {{4, 4}, {4, 4}, {4, 4}})
  lu.assertEquals(a:to("bfloat16"):matmul(b).dtype, "bfloat16")
end

os.exit(lu.LuaUnit.run(), true)
