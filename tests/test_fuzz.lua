-- test_fuzz.lua: what the API fuzzer (tests/fuzz/fuzz_api.lua) found, kept
-- as regression cases, one per finding, each with the input that showed it.
local lu = require "luaunit"

-- pcall(f, ...) must fail with a string containing every piece
local function fails(pieces, f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  lu.assertIsString(err)
  for _, p in ipairs(pieces) do lu.assertStrContains(err, p) end
  return err
end

---------------------------------------------------------------- found

TestFuzzFound = {}

-- x:expand(-1, 1, 2) on a (1, 2) tensor gave a tensor of size -1: -1
-- keeps a size, and a new leading dim has none to keep
function TestFuzzFound:testExpandMinusOneNewDim()
  local x = qkv.ones(1, 2)
  fails({"expand", "(1, 2)", "(-1, 1, 2)"}, x.expand, x, -1, 1, 2)
  lu.assertEquals(qkv.ones(3, 1):expand(2, -1, 4).shape, {2, 3, 4})
end

-- sizes whose product overflows int64 wrapped around to a small numel:
-- zeros(0):view(2^62, 4) was a tensor of 0 elements with those sizes, and
-- its strides overflowed
function TestFuzzFound:testSizesOverflowingInt64()
  local big = 1 << 62
  local e = qkv.zeros(0)
  fails({"view", "(4611686018427387904, 4)"}, e.view, e, big, 4)
  fails({"reshape", "(0, 4611686018427387904, 4)"}, e.reshape, e, 0, big, 4)
  fails({"zeros", "too large"}, qkv.zeros, 0, big, 4)
  local one = qkv.ones(1, 1)
  fails({"expand", "(4611686018427387904, 4611686018427387904)"}, one.expand, one, big, big)
  -- a 0 size first still makes an empty tensor
  lu.assertEquals(qkv.zeros(2, 0, 3):reshape(0, 7).shape, {0, 7})
  lu.assertEquals(qkv.zeros(0, 5):view(5, 0).shape, {5, 0})
end

os.exit(lu.LuaUnit.run(), true)
