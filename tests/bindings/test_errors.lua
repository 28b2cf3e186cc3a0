-- test_errors.lua: every bad input is a Lua error that pcall catches and
-- whose message names the function (and the shapes, for shape errors);
-- the process never crashes (docs/tensors.md, "Errors").
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
  fails({"sum", "0-d"}, function() return qkv.tensor(1):sum(1) end)
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

---------------------------------------------------------------- names

-- reading a name that qkv, a library table or a tensor does not have is an
-- error at the script's line naming the nearest name, not a nil that fails
-- later as "attempt to call a nil value"
TestMissingNames = {}

local HERE = "test_errors%.lua:%d+: "

-- f() fails at this file's line with exactly `want` after the place
local function missing(want, f)
  local ok, msg = pcall(f)
  lu.assertFalse(ok, want)
  lu.assertEquals(type(msg), "string")
  local place, rest = msg:match("^(.-" .. HERE .. ")(.*)$")
  lu.assertNotNil(place, msg)
  lu.assertEquals(rest, want)
  return msg
end

-- a function both qkv and the tensor methods hold (sum) has one name in
-- argument errors where the call site gives none (through pcall, or
-- autograd's rules): Lua finds it by walking package.loaded, whose order
-- changes from process to process, so each run is a fresh process
-- an argument past those a function takes is an error, never ignored:
-- PyTorch's F.gelu(x, approximate = "tanh") would else give the erf form
function TestMissingNames:testExtraArgumentsAreErrors()
  local x = qkv.tensor{-1, 0, 2}
  local F = qkv.nn.functional
  for _, c in ipairs{{qkv.gelu, "gelu", {approximate = "tanh"}, "table"},
                     {F.gelu, "gelu", {approximate = "tanh"}, "table"},
                     {qkv.relu, "relu", 1, "number"}, {qkv.exp, "exp", "x", "string"}} do
    local ok, msg = pcall(c[1], x, c[3])
    lu.assertFalse(ok)
    lu.assertEquals(msg, c[2] .. ": takes 1 argument, got 2 (argument #2 is a " .. c[4] .. ")")
  end
  -- trailing nils are no arguments, and unary minus still works
  lu.assertEquals(qkv.relu(x, nil):tolist(), {0, 0, 2})
  lu.assertEquals((-x):tolist(), {1, 0, -2})
  lu.assertEquals(x:gelu():size(1), 3)
end

function TestMissingNames:testArgumentErrorNamesAreStable()
  local S = dofile("tests/helpers/shell.lua")
  local code = "local x = qkv.ones(2) io.write(select(2, pcall(x.sum, x, 3)))"
  for _ = 1, 8 do
    local out = S.exe(arg[-1], "-e", code)
    lu.assertEquals(out, "bad argument #2 to 'qkv.sum' (dim 3 out of range [-1, 1])")
  end
  -- a method the module lacks is named as a method
  local out = S.exe(arg[-1], "-e", "local x = qkv.ones(2) io.write(select(2, pcall(x.view, x, 'a')))")
  lu.assertEquals(out, "bad argument #2 to 'qkv.Tensor.view' (size expected, got string)")
end

function TestMissingNames:testQkv()
  local x = M(2, 3)
  missing("qkv has no function 'softmaxx' (did you mean 'softmax'?)",
          function() return qkv.softmaxx(x) end)
  missing("qkv has no function 'randperm' (help(qkv) lists what it has)",
          function() return qkv.randperm(5) end)
  missing("qkv has no function 'sofmax' (did you mean 'softmax'?)", function() return qkv.sofmax end)
  -- a lazily loaded library's name is suggested too
  missing("qkv has no function 'einsun' (did you mean 'einsum'?)", function() return qkv.einsun end)
  -- one slip per four letters: 'sofmx' is two from softmax, too far for 5 letters
  missing("qkv has no function 'sofmx' (help(qkv) lists what it has)", function() return qkv.sofmx end)
  missing("qkv has no function 'log_sofmaxx' (did you mean 'log_softmax'?)",
          function() return qkv.log_sofmaxx end)
  -- what is there still reads, lazy names load, and internal or non-string
  -- keys stay nil for the code that probes them
  lu.assertEquals(type(qkv.softmax), "function")
  lu.assertEquals(type(qkv.einsum), "function")
  lu.assertEquals(qkv.float16, "float16")
  lu.assertNil(qkv._no_such_hook)
  lu.assertNil(qkv[1])
  lu.assertNil(rawget(qkv, "softmaxx"))
  lu.assertTrue(pcall(function() return qkv.Tensor end))
end

function TestMissingNames:testLibraries()
  missing("qkv.plot has no function 'bar' (help(qkv.plot) lists what it has)",
          function() return qkv.plot.bar({1, 2, 3}) end)
  missing("qkv.plot has no function 'heatmpa' (did you mean 'heatmap'?)",
          function() return qkv.plot.heatmpa end)
  missing("qkv.nn has no class or function 'Linaer' (did you mean 'Linear'?)",
          function() return qkv.nn.Linaer(2, 3) end)
  missing("qkv.nn has no class or function 'Conv2d' (help(qkv.nn) lists what it has)",
          function() return qkv.nn.Conv2d end)
  missing("qkv.optim has no class or function 'SDG' (did you mean 'SGD'?)",
          function() return qkv.optim.SDG end)
  missing("qkv.optim has no class or function 'Adamw' (did you mean 'AdamW'?)",
          function() return qkv.optim.Adamw end)
  lu.assertEquals(type(qkv.plot.heatmap), "function")
  lu.assertEquals(tostring(qkv.nn.Linear(2, 3).W.shape), "(2, 3)")
  lu.assertEquals(type(qkv.optim.Adam), "function")
  lu.assertNil(qkv.plot._no_such_hook)
  lu.assertNil(qkv.nn._no_such_hook)
  -- help names the namespace that the message sends the reader to
  lu.assertStrContains(require("qkv.doc").text(qkv.optim), "qkv.optim")
end

function TestMissingNames:testTensor()
  local x = M(2, 3)
  -- PyTorch's dtype shorthands: those qkv has convert ('half' is not
  -- taken for a slip of 'all'), those it lacks say what to use
  lu.assertEquals(x:half().dtype, "float16")
  lu.assertEquals(x:bfloat16().dtype, "bfloat16")
  lu.assertEquals(x:long().dtype, "int64")
  local msg = missing("index: a tensor has no field 'short' (qkv has no int16: x:int() converts "
                      .. "to int32)", function() return x:short() end)
  lu.assertNotStrContains(msg, "'sort'")
  missing("index: a tensor has no field 'byte' (qkv has no uint8: x:int() converts to int32, "
          .. "x:bool() to bool)", function() return x:byte() end)
  -- a slip of case alone is the nearest name
  missing("index: a tensor has no field 'Sum' (did you mean 'sum'?)", function() return x:Sum() end)
  missing("index: a tensor has no field 'maen' (did you mean 'mean'?)", function() return x:maen() end)
  missing("index: a tensor has no field 'sofmx'", function() return x:sofmx() end)
  missing("index: a tensor has no field '_versoin' (did you mean '_version'?)",
          function() return x._versoin end)
  lu.assertEquals(x:to("float16").dtype, "float16")
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

---------------------------------------------------------------- PyTorch's keywords

-- x:sum{dim = 1, keepdim = true}: an options table as the last argument
-- holds what PyTorch passes as keywords
TestKeywords = {}

local X = qkv.tensor{{1, 2, 3}, {4, 5, 6}}

local function same(a, b) qkv.test.assertTensorEqual(a, b) end

function TestKeywords:testReductions()
  same(X:sum{dim = 1}, X:sum(1))
  same(X:sum{dim = 2, keepdim = true}, X:sum(2, true))
  same(X:sum(2, {keepdim = true}), X:sum(2, true))
  same(qkv.sum(X, {dim = -1}), X:sum(2))
  same(X:sum{}, X:sum())
  same(X:sum{dtype = "float64"}, X:double():sum())
  same(X:mean{dim = 1, dtype = qkv.float64}, X:double():mean(1))
  for _, name in ipairs{"mean", "var", "std", "argmax", "argmin"} do
    same(X[name](X, {dim = 2, keepdim = true}), X[name](X, 2, true))
  end
  for _, name in ipairs{"max", "min"} do
    local v, i = X[name](X, {dim = 1})
    local v1, i1 = X[name](X, 1)
    same(v, v1)
    same(i, i1)
  end
  same(X:gt(2):any{dim = 2}, X:gt(2):any(2))
  same(X:gt(2):all{dim = 1, keepdim = true}, X:gt(2):all(1, true))
  same(X:cumsum{dim = 2}, X:cumsum(2))
  lu.assertEquals(X:cumsum{dim = 1, dtype = "float64"}.dtype, "float64")
end

function TestKeywords:testSoftmaxCatStack()
  same(X:softmax{dim = -1}, X:softmax(-1))
  same(X:softmax{dim = 1}, X:softmax(1))
  same(X:log_softmax{dim = 1}, X:log_softmax(1))
  same(qkv.softmax(X, {dim = 2, dtype = "float64"}), X:double():softmax(2))
  same(qkv.cat({X, X}, {dim = 2}), qkv.cat({X, X}, 2))
  same(qkv.stack({X, X}, {dim = 3}), qkv.stack({X, X}, 3))
  same(qkv.cat({X, X}, {}), qkv.cat({X, X}))
end

function TestKeywords:testFactories()
  same(qkv.zeros(2, 3, {dtype = "float64"}), qkv.zeros(2, 3, "float64"))
  same(qkv.ones({2, 3}, {dtype = "int64", device = "cpu"}), qkv.ones({2, 3}, "int64", "cpu"))
  lu.assertEquals(qkv.randn(4, {dtype = qkv.float64}).dtype, "float64")
  lu.assertEquals(qkv.rand(2, 2, {}).dtype, "float32")
  lu.assertEquals(qkv.eye(2, {dtype = "int32"}):tolist(), {{1, 0}, {0, 1}})
  missing("bad argument #2 to 'zeros' (unknown option 'dtyp' (did you mean 'dtype'?))",
          function() return qkv.zeros(2, {dtyp = "float64"}) end)
  missing("bad argument #3 to 'ones' (unknown option 'requires_grad')",
          function() return qkv.ones(2, 2, {requires_grad = true}) end)
  missing('bad argument #2 to \'zeros\' (option \'device\' must be "cpu" or "cuda", got tpu)',
          function() return qkv.zeros(2, {device = "tpu"}) end)
  missing("bad argument #2 to 'zeros' (option 'dtype' must be a dtype name (float32, float64, "
          .. "float16, bfloat16, int64, int32, bool), got number)",
          function() return qkv.zeros(2, {dtype = 3}) end)
  missing("bad argument #2 to 'zeros' (unknown option 1 (options are named: {key = value}))",
          function() return qkv.zeros(2, {3}) end)
end

function TestKeywords:testErrors()
  missing("sum: unknown option 'dims' (did you mean 'dim'?)", function() return X:sum{dims = 1} end)
  missing("softmax: unknown option 'keepdim'", function() return X:softmax{dim = 1, keepdim = true} end)
  missing("max: unknown option 'dtype'", function() return X:max{dtype = "float64"} end)
  missing("cat: unknown option 'axis'", function() return qkv.cat({X, X}, {axis = 1}) end)
  missing("sum: dim is given twice, as an argument and as an option",
          function() return X:sum(1, {dim = 2}) end)
  missing("sum: 3 arguments before the options table, at most 2",
          function() return X:sum(1, true, 3, {}) end)
  missing("sum: option 'dtype' must be a dtype name (float32, float64, float16, bfloat16, int64, "
          .. "int32, bool), got float8", function() return X:sum{dtype = "float8"} end)
  missing("bad argument #1 to 'sum' (" .. DIM0 .. ")", function() return X:sum{dim = 0} end)
end

-- every key of a shape, list or options table is understood or an error
-- naming the function and the closest key (issue 46: they were ignored)
function TestKeywords:testShapeTables()
  missing("bad argument #1 to 'zeros' (unknown key 'dtyp' in the shape (did you mean 'dtype'?))",
          function() return qkv.zeros{2, 3, dtyp = "float64"} end)
  missing("bad argument #1 to 'ones' (unknown key 'x' in the shape (it takes its items, "
          .. "'size', 'dtype' and 'device'))", function() return qkv.ones{2, x = 3} end)
  missing("bad argument #1 to 'rand' (the shape has key 4 past its 1 item (a nil in the list?))",
          function() return qkv.rand{2, [4] = 3} end)
  missing("bad argument #1 to 'randn' (unknown key 'sizes' in the shape (did you mean 'size'?))",
          function() return qkv.randn{sizes = {2}} end)
  missing("bad argument #1 to 'eye' (unknown key 'size' in the shape (it takes its items, "
          .. "'dtype' and 'device'))", function() return qkv.eye{3, size = 3} end)
  missing("bad argument #1 to 'zeros' (the sizes are given twice, as items and as 'size')",
          function() return qkv.zeros{2, size = {2}} end)
  missing("bad argument #1 to 'zeros' ('size' must be a table of sizes, got number)",
          function() return qkv.zeros{size = 2} end)
  missing("bad argument #1 to 'zeros' (unknown key 'n' in 'size' (it holds its 1 item only))",
          function() return qkv.zeros{size = {2, n = 1}} end)
  missing("bad argument #2 to 'zeros' (the dtype is given twice)",
          function() return qkv.zeros({2, dtype = "int64"}, {dtype = "int32"}) end)
  missing("bad argument #2 to 'ones' (the dtype is given twice)",
          function() return qkv.ones({2, dtype = "int64"}, "int64") end)
  missing("bad argument #1 to 'zeros' (option 'dtype' must be a dtype name (float32, float64, "
          .. "float16, bfloat16, int64, int32, bool), got float8)",
          function() return qkv.zeros{2, dtype = "float8"} end)
  missing("bad argument #1 to 'full' (unknown key 'fill_value' in the shape (it takes its "
          .. "items, 'size', 'dtype' and 'device'))",
          function() return qkv.full({2, fill_value = 1}, 1) end)
  missing("bad argument #1 to 'view' (unknown key 'shape' in the shape (it takes its items "
          .. "and 'size'))", function() return qkv.arange(6):view{shape = {2, 3}} end)
  missing("bad argument #1 to 'reshape' (unknown key 'size' in the shape (it takes its items "
          .. "and 'shape'))", function() return qkv.arange(6):reshape{size = {2, 3}} end)
  missing("bad argument #1 to 'expand' (unknown key 'dtype' in the shape (it takes its items "
          .. "and 'size'))", function() return qkv.ones(1):expand{2, dtype = "int64"} end)
  missing("permute: unknown key 'dim' in the dims (did you mean 'dims'?)",
          function() return X:permute{2, 1, dim = 1} end)
  missing("permute: the dims are given twice, as items and as 'dims'",
          function() return X:permute{2, 1, dims = {2, 1}} end)
  missing("permute: takes 2 arguments, got 3 (argument #3 is a string)",
          function() return X:permute({2, 1}, "x") end)
end

function TestKeywords:testExtraArgumentsAfterTheDtype()
  missing("bad argument #5 to 'zeros' (size, dtype or device expected, got string)",
          function() return qkv.zeros(2, 3, "float64", "cpu", "x") end)
  missing("bad argument #5 to 'full' (dtype or device expected, got number)",
          function() return qkv.full(2, 7, "int64", "cpu", 5) end)
  missing("bad argument #5 to 'arange' (dtype or device expected, got number)",
          function() return qkv.arange(0, 5, "int64", "cpu", 1) end)
  missing("bad argument #3 to 'tensor' (dtype or device expected, got number)",
          function() return qkv.tensor({1}, "int64", 1) end)
  missing("bad argument #2 to 'arange' (unknown option 'dtyp' (did you mean 'dtype'?))",
          function() return qkv.arange(5, {dtyp = "int64"}) end)
end

function TestKeywords:testListsHoldTheirItemsOnly()
  local x = qkv.arange(6):view(2, 3)
  missing("cat: unknown key 'dim' in the list of tensors (it holds its 2 items only)",
          function() return qkv.cat{x, x, dim = 2} end)
  missing("stack: the list of tensors has key 4 past its 2 items (a nil in the list?)",
          function() return qkv.stack{x, x, [4] = x} end)
  missing("tensor: unknown key 'x' in a list at depth 2 (it holds its 2 items only)",
          function() return qkv.tensor{{1, 2}, {3, 4, x = 1}} end)
  missing("bad argument #1 to 'tensor' (unknown key 'dtyp' in the table (did you mean "
          .. "'dtype'?))", function() return qkv.tensor{1, 2, dtyp = "int64"} end)
  missing("index: unknown key 'foo' in the index table (it holds its 1 item only)",
          function() return x[{1, foo = 2}] end)
  missing("index: unknown key 'x' in a range {i, j} of the index table (it holds its 2 items "
          .. "only)", function() x[{1, {2, 3, x = 1}}] = 0 end)
  missing("layer_norm: unknown key 'eps' in normalized_shape (it holds its 1 item only)",
          function() return qkv.layer_norm(x, {3, eps = 1}) end)
  missing("align: unknown key 'bias' in the weights (it holds its 4 items only)",
          function() return qkv.align(x, {x, x, x, x, bias = x}) end)
  missing("padding: unknown key 'n' in the lengths (it holds its 2 items only)",
          function() return qkv.padding({1, 2, n = 2}, 3) end)
  missing("grad: unknown key 'x' in inputs (it holds its 1 item only)",
          function() return qkv.grad(function(a) return a:sum() end, {x:double(), x = 1}) end)
  missing("grad: input 2 is a nil, not a tensor",
          function() return qkv.grad(function(a) return a:sum() end, {x:double(), nil, x}) end)
end

-- a method's options table holds PyTorch's names of its arguments, and
-- nothing else: x:sort(1, {descending = false}) sorted descending, and
-- x:add(y, {alpha = 2}) or qkv.dropout(x, 0.5, {training = false}) ignored
-- their keys (issue 46)
function TestKeywords:testMethodsTakeTheirKeywords()
  local x = qkv.tensor{{3, 1, 2}, {0, 5, 4}}
  same(x:sort(2, {descending = false}), x:sort(2))
  same(select(2, x:sort{dim = 1, descending = true}), select(2, x:sort(1, true)))
  same(x:topk(1, 2, {largest = false}), x:topk(1, 2, false))
  same(x:topk{k = 2}, x:topk(2))
  same(x:tril{diagonal = -1}, x:tril(-1))
  same(x:clamp{min = 1}, x:clamp(1))
  same(x:clamp(1, {max = 3}), x:clamp(1, 3))
  same(x:squeeze{dim = 1}, x:squeeze(1))
  same(x:unsqueeze{dim = -1}, x:unsqueeze(-1))
  same(x:transpose{dim0 = 1, dim1 = 2}, x:t())
  same(x:narrow{dim = 2, start = 2, length = 2}, x:narrow(2, 2, 2))
  same(x:select(1, {index = 2}), x[2])
  local i31 = qkv.tensor({3, 1}, "int64")
  same(x:index_select(2, {index = i31}), x:index_select(2, i31))
  lu.assertEquals(x:size{dim = 2}, 3)
  same(x:add{other = 1}, x + 1)
  same(x:pow{exponent = 2}, x * x)
  same(x:clone{}, x)
  for _, to in ipairs{{"cpu", {dtype = "float64"}}, {{dtype = "float64", device = "cpu"}},
                      {"cpu", "float64"}, {"float64", "cpu"}} do
    local y = x:to(table.unpack(to))
    lu.assertEquals({y.dtype, y.device}, {"float64", "cpu"})
  end
  lu.assertTrue(rawequal(x:to{device = x.device}, x))
  local d = qkv.ones(100)
  same(qkv.dropout(d, 0.5, {training = false}), d)
  same(qkv.dropout(d, {p = 0}), d)
  same(qkv.layer_norm(x, 3, {eps = 1e-3}), qkv.layer_norm(x, 3, nil, nil, 1e-3))
end

function TestKeywords:testMethodsRefuseWhatTheyDoNotTake()
  local x = qkv.tensor{{3, 1, 2}, {0, 5, 4}}
  local I = qkv.tensor({1}, "int64")
  missing("add: unknown option 'alpha'", function() return x:add(1, {alpha = 2}) end)
  missing("sub_: unknown option 'alpha'", function() return x:clone():sub_(1, {alpha = 2}) end)
  missing("div: unknown option 'rounding_mode'",
          function() return x:div(2, {rounding_mode = "floor"}) end)
  missing("index_add_: unknown option 'alpha'",
          function() return x:clone():index_add_(1, I, x:narrow(1, 1, 1), {alpha = 2}) end)
  missing("sort: unknown option 'stable'", function() return x:sort(1, {stable = true}) end)
  missing("topk: unknown option 'sorted'", function() return x:topk(1, {sorted = false}) end)
  missing("clone: unknown option 'memory_format'",
          function() return x:clone{memory_format = "contiguous"} end)
  missing("float: takes 1 argument, got 2 (argument #2 is a number)",
          function() return x:float(1) end)
  missing("eq: takes 2 arguments, got 3 (argument #3 is a number)", function() return x:eq(1, 2) end)
  missing("clamp: unknown option 'mn' (did you mean 'min'?)", function() return x:clamp{mn = 0} end)
  missing("bad argument #2 to 'to' (the dtype is given twice)",
          function() return x:to("float64", {dtype = "int64"}) end)
  missing("bad argument #2 to 'to' (the dtype is given twice)",
          function() return x:to("float64", "int64") end)
  missing("dropout: unknown option 'trainig' (did you mean 'training'?)",
          function() return qkv.dropout(x, 0.5, {trainig = false}) end)
  missing("layer_norm: unknown option 'epsilon'",
          function() return qkv.layer_norm(x, 3, {epsilon = 1e-3}) end)
  missing("half: takes 1 argument, got 2 (argument #2 is a number)", function() return x:half(1) end)
  missing("norm: takes 5 arguments, got 6 (argument #6 is a number)",
          function() return x:norm(2, 1, false, "float64", 5) end)
  missing("zeros_like: takes 2 arguments, got 3 (argument #3 is a number)",
          function() return qkv.zeros_like(x, {}, 3) end)
  missing("flip: dims come as one list or as numbers, got a table and 1 more argument",
          function() return x:flip({1}, {2}) end)
  missing("embedding: unknown option 'padding_idx'",
          function() return qkv.embedding(I, qkv.ones(3, 2), {padding_idx = 1}) end)
  missing("seed: takes 1 argument, got 2 (argument #2 is a table)",
          function() return qkv.seed(1, {}) end)
  -- nothing is written or read: the check comes first
  local path = os.tmpname()
  missing("save: takes 2 arguments, got 3 (argument #3 is a table)",
          function() return qkv.save(path, x, {}) end)
  missing("load: takes 1 argument, got 2 (argument #2 is a table)",
          function() return qkv.load(path, {mmap = true}) end)
  missing("savez: takes 2 arguments, got 3 (argument #3 is a table)",
          function() return qkv.savez(path, {x = x}, {compress = true}) end)
  missing("save_safetensors: takes 3 arguments, got 4 (argument #4 is a table)",
          function() return qkv.save_safetensors(path, {x = x}, nil, {}) end)
  os.remove(path)
  -- autograd: create_graph and retain_graph would be ignored
  local w = qkv.ones(2, "float64"):requires_grad_()
  missing("backward: takes 2 arguments, got 3 (argument #3 is a table)",
          function() (w * 2):sum():backward(nil, {create_graph = true}) end)
  missing("grad: takes 3 arguments, got 4 (argument #4 is a table)",
          function() return qkv.grad(function(a) return a:sum() end, {w}, nil, {}) end)
  missing("requires_grad_: takes 2 arguments, got 3 (argument #3 is a table)",
          function() return qkv.ones(2):requires_grad_(true, {}) end)
end

function TestKeywords:testAutogradSeesPositions()
  local x = qkv.tensor({{1, 2}, {3, 4}}, "float64"):requires_grad_()
  x:sum{dim = 2, keepdim = true}:sum():backward()
  lu.assertEquals(x.grad:tolist(), {{1, 1}, {1, 1}})
  x.grad = nil
  local y = x:softmax{dim = 1}
  lu.assertEquals(tostring(y.grad_fn), "<SoftmaxBackward0>")
  qkv.test.assertClose(y, x:detach():softmax(1))
end

os.exit(lu.LuaUnit.run(), true)
