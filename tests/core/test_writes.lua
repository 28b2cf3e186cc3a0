-- test_writes.lua: writes into existing tensors give the value a float64
-- reference says, or an error: a source that overlaps the destination is
-- read as through a temporary (PyTorch's copy_), a destination whose
-- elements share memory (an expanded view) is refused, and a number an
-- int64 target cannot hold is an error rather than a clamp.
local lu = require "luaunit"
local t = qkv.test

local function err(f, ...)
  local ok, e = pcall(f, ...)
  lu.assertFalse(ok, "no error")
  return tostring(e)
end

-- x[i] = v on a plain Lua list of rows (the reference)
local function setrow(rows, i, vals)
  local copy = {}
  for k, v in ipairs(vals) do copy[k] = v end
  rows[i] = copy
end

TestOverlap = {}

-- the issue's case: b[2..7] seen as (2, 3), its first row written from b[1..3]
function TestOverlap:testShiftedWindow()
  local b = qkv.arange(8)
  local x = b:narrow(1, 2, 6):view(2, 3)
  x[1] = b:narrow(1, 1, 3)
  lu.assertEquals(b:tolist(), {0, 0, 1, 2, 4, 5, 6, 7})
  -- and the other direction
  b = qkv.arange(8)
  x = b:narrow(1, 1, 6):view(2, 3)
  x[1] = b:narrow(1, 2, 3)
  lu.assertEquals(b:tolist(), {1, 2, 3, 3, 4, 5, 6, 7})
end

-- every shift of a window over itself, against a Lua copy made first
function TestOverlap:testEveryShiftAndDtype()
  for _, dt in ipairs{"float32", "float64", "int64", "bool"} do
    for shift = -4, 4 do
      local n = 12
      local base = qkv.arange(n):to(dt)
      if dt == "bool" then base = qkv.arange(n):gt(5) end
      local want = base:tolist()
      local src0 = 5 + shift
      local expect = {}
      for i = 1, n do expect[i] = want[i] end
      for i = 0, 3 do expect[5 + i] = want[src0 + i] end
      local dst = base:narrow(1, 5, 4):view(1, 4)
      dst[1] = base:narrow(1, src0, 4)
      lu.assertEquals(base:tolist(), expect, dt .. " shift " .. shift)
    end
  end
end

-- a transposed source over its own storage: x[1] = x:t()[1] reads column 1
function TestOverlap:testTransposedSource()
  local x = qkv.arange(9):view(3, 3)
  local rows = x:tolist()
  x[1] = x:t()[1]
  setrow(rows, 1, {rows[1][1], rows[2][1], rows[3][1]})
  lu.assertEquals(x:tolist(), rows)
  local y = qkv.arange(9):view(3, 3)
  y:t()[2] = y[2]                     -- column 2 gets row 2
  lu.assertEquals(y:tolist(), {{0, 3, 2}, {3, 4, 5}, {6, 5, 8}})
end

-- a broadcast source overlapping the destination
function TestOverlap:testBroadcastSource()
  local x = qkv.arange(6):view(2, 3)
  x[2] = x[1][1]                      -- a number
  x[1] = x:narrow(2, 2, 1):select(1, 1)   -- (1,): x[1][2] broadcast over row 1
  lu.assertEquals(x:tolist(), {{1, 1, 1}, {0, 0, 0}})
end

TestStrideZero = {}

function TestStrideZero:testExpandedDestinations()
  local want = "index: cannot write into a tensor whose elements share memory"
  local x = qkv.zeros(1, 1):expand(3, 4)
  lu.assertStrContains(err(function() x[2] = qkv.arange(4) end), want)
  lu.assertStrContains(err(function() x[2] = 1 end), want)
  lu.assertEquals(x:sum():item(), 0)
  local y = qkv.zeros(3, 1):expand(3, 4)
  lu.assertStrContains(err(function() y[2] = qkv.arange(4) end), want)
  -- a row of it that is one element per location is fine, as in PyTorch
  -- (z[0] = 5 there): all rows see it
  local z = qkv.zeros(1, 4):expand(3, 4)
  z[1] = 5
  lu.assertEquals(z:tolist(), {{5, 5, 5, 5}, {5, 5, 5, 5}, {5, 5, 5, 5}})
  local w = qkv.zeros(3, 4)
  w[2] = qkv.arange(4)
  lu.assertEquals(w[2]:tolist(), {0, 1, 2, 3})
  local one = qkv.zeros(1):expand(1)
  one[1] = 3
  lu.assertEquals(one:tolist(), {3})
end

TestInt64Range = {}

function TestInt64Range:testIndexWrites()
  local x = qkv.zeros(4, "int64")
  for _, v in ipairs{1e300, -1e300, 2 ^ 63, -(2 ^ 63) * 2, math.huge, -math.huge, 0 / 0} do
    lu.assertStrMatches(err(function() x[1] = v end), ".*index: .+ does not fit in int64")
  end
  lu.assertEquals(x:tolist(), {0, 0, 0, 0})
  x[1] = math.maxinteger
  x[2] = math.mininteger
  x[3] = 9007199254740993              -- 2^53 + 1: no double holds it
  x[4] = -(2 ^ 63)                     -- a float that fits exactly
  lu.assertEquals(x:tolist(), {math.maxinteger, math.mininteger, 9007199254740993, math.mininteger})
  x[1] = -2.7                          -- toward 0, as PyTorch
  x[2] = true
  lu.assertEquals(x:narrow(1, 1, 2):tolist(), {-2, 1})
end

function TestInt64Range:testMaskedFillAndMask()
  local x = qkv.tensor({1, 2, 3}, "int64")
  local m = qkv.tensor{true, false, true}
  lu.assertStrContains(err(x.masked_fill, x, m, 2 ^ 70), "masked_fill: 1.1805916207174e+21 does not fit in int64")
  lu.assertStrContains(err(x.masked_fill, x, m, 0 / 0), "masked_fill: nan does not fit in int64")
  lu.assertEquals(x:masked_fill(m, 9007199254740993):tolist(), {9007199254740993, 2, 9007199254740993})
  lu.assertEquals(x:masked_fill(m, math.mininteger):tolist(), {math.mininteger, 2, math.mininteger})
  -- any nonzero mask value keeps its meaning on the exact path too
  lu.assertEquals(x:masked_fill(qkv.tensor{0, 2, 0.5}, math.maxinteger):tolist(),
                  {1, math.maxinteger, math.maxinteger})
  lu.assertStrContains(err(qkv.mask, x, m), "mask: -inf does not fit in int64")
  lu.assertEquals(qkv.mask(x, m, -1):tolist(), {1, -1, 3})
  -- float targets take any number, as before
  lu.assertEquals(qkv.mask(qkv.ones(2), qkv.tensor{true, false}):tolist(), {1, -math.huge})
end

function TestInt64Range:testConstructors()
  lu.assertStrContains(err(qkv.full, {2}, 1e300, "int64"), "full: 1e+300 does not fit in int64")
  lu.assertEquals(qkv.full({2}, math.maxinteger, "int64"):tolist(), {math.maxinteger, math.maxinteger})
  lu.assertStrContains(err(qkv.arange, 0, 1e19, 1e18, "int64"), "arange: end 1e+19 does not fit in int64")
  lu.assertStrContains(err(qkv.tensor, {1e300}, "int64"), "does not fit in int64")
end

os.exit(lu.LuaUnit.run(), true)
