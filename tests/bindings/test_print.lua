-- test_print.lua: tostring of tensors, against strings derived from
-- PyTorch's printing rules (docs/tensors.md: "Printing follows PyTorch").
local lu = require "luaunit"
-- print formats of CPU tensors (a GPU tensor's, with device='cuda', is
-- checked in backends/cuda/test_copy.lua), also under `qkv test --device cuda`
qkv.set_default_device("cpu")

local inf, nan = math.huge, 0 / 0

-- compares exactly; on a mismatch shows both strings with visible newlines
local function check(x, expected)
  local got = tostring(x)
  if got ~= expected then
    lu.fail(string.format("tostring mismatch:\n got:\n%s\n expected:\n%s\n got (quoted): %q",
      got, expected, got))
  end
end

local function lines(s)
  local n = 1
  for _ in s:gmatch("\n") do n = n + 1 end
  return n
end

TestPrintScalars = {}

function TestPrintScalars:testZeroDim()
  check(qkv.tensor(3.5), "tensor(3.5000)")
end

TestPrintFloat = {}

function TestPrintFloat:testMatrix()
  check(qkv.tensor{{0.5, 0.5}, {0.6405, 0.3595}},
    "tensor([[0.5000, 0.5000],\n        [0.6405, 0.3595]])")
end

function TestPrintFloat:testReadmeMatmul()
  local x = qkv.tensor{{1, 0, 1}, {0, 2, 0}}
  local w = qkv.tensor{{0.5, 0.5}, {0.6405, 0.3595}, {1, 0}}
  check(x:matmul(w), "tensor([[1.5000, 0.5000],\n        [1.2810, 0.7190]])")
  check(qkv.eye(2), "tensor([[1., 0.],\n        [0., 1.]])")
end

function TestPrintFloat:testTransposedView()
  check(qkv.tensor{{0.5, 1, 1.5}, {2, 2.5, 3}}:t(),
    "tensor([[0.5000, 2.0000],\n        [1.0000, 2.5000],\n        [1.5000, 3.0000]])")
end

function TestPrintFloat:testIntegralFloats3D()
  check(qkv.arange(8):view(2, 2, 2),
    "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])")
end

function TestPrintFloat:testFloat64SuffixWraps()
  check(qkv.full(9, 0.2, "float64"),
    "tensor([0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000],\n       dtype=float64)")
end

function TestPrintFloat:testFloat64SuffixSameLine()
  check(qkv.full(7, 0.2, "float64"),
    "tensor([0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000], dtype=float64)")
end

-- the same two cases without qkv.full, so printing is tested on its own
local function rep(v, n) local t = {} for i = 1, n do t[i] = v end return t end

function TestPrintFloat:testFloat64SuffixFromTable()
  check(qkv.tensor(rep(0.2, 9), "float64"),
    "tensor([0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000],\n       dtype=float64)")
  check(qkv.tensor(rep(0.2, 7), "float64"),
    "tensor([0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000, 0.2000], dtype=float64)")
end

function TestPrintFloat:testFloat64Arange()   -- the docs/tensors.md example
  check(qkv.arange(3, "float64"), "tensor([0., 1., 2.], dtype=float64)")
end

function TestPrintFloat:testSummarisedSci()
  check(qkv.arange(2000),
    "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])")
end

function TestPrintFloat:testInfNan()
  check(qkv.tensor{1, inf, nan, -inf}, "tensor([1., inf, nan, -inf])")
  check(qkv.tensor{1.5, nan, -inf}, "tensor([1.5000,    nan,   -inf])")
end

function TestPrintFloat:testScientific()
  check(qkv.tensor{1, 1e9}, "tensor([1.0000e+00, 1.0000e+09])")
  check(qkv.tensor{-1.5e-5, 2, 0}, "tensor([-1.5000e-05,  2.0000e+00,  0.0000e+00])")
end

function TestPrintFloat:testNegativeZero()
  check(qkv.tensor{0, -0.0}, "tensor([0., -0.])")
end

function TestPrintFloat:testCommonWidth()
  check(qkv.tensor{-1.5, 2.25, 10}, "tensor([-1.5000,  2.2500, 10.0000])")
  check(qkv.tensor{-5, 3, 100}, "tensor([ -5.,   3., 100.])")
end

TestPrintOther = {}

function TestPrintOther:testInt64Arange()
  check(qkv.arange(30, "int64"),
    "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n" ..
    "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])")
end

function TestPrintOther:testInt64Width()
  check(qkv.tensor({-100, 5, 42}, "int64"), "tensor([-100,    5,   42])")
end

function TestPrintOther:testSummarisedMatrix()
  check(qkv.arange(1600, "int64"):view(40, 40),
    "tensor([[   0,    1,    2,  ...,   37,   38,   39],\n" ..
    "        [  40,   41,   42,  ...,   77,   78,   79],\n" ..
    "        [  80,   81,   82,  ...,  117,  118,  119],\n" ..
    "        ...,\n" ..
    "        [1480, 1481, 1482,  ..., 1517, 1518, 1519],\n" ..
    "        [1520, 1521, 1522,  ..., 1557, 1558, 1559],\n" ..
    "        [1560, 1561, 1562,  ..., 1597, 1598, 1599]])")
end

function TestPrintOther:testBool()
  check(qkv.tensor{true, false, true}, "tensor([ True, False,  True])")
end

function TestPrintOther:testEmpty()
  check(qkv.zeros(0), "tensor([])")
  check(qkv.zeros(0, 3), "tensor([], size=(0, 3))")
  check(qkv.zeros(2, 0, 3, "float64"), "tensor([], size=(2, 0, 3), dtype=float64)")
  check(qkv.zeros(0, "int64"), "tensor([], dtype=int64)")
end

function TestPrintOther:testLargeIsShort()
  local s = tostring(qkv.ones(100, 100))
  lu.assertTrue(lines(s) < 20, "100x100 printed on " .. lines(s) .. " lines")
  lu.assertStrContains(s, "...")
end

os.exit(lu.LuaUnit.run(), true)
