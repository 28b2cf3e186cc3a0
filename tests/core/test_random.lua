-- test_random.lua: qkv.seed / rand / randn against an independent Philox
-- 4x32-10 written here in Lua integer arithmetic, and the stream layout
-- documented in the header of vm/cpu/random.c.
local lu = require "luaunit"

-- the default generator's first numbers, before any test reseeds it
local DEFAULT_SEED = qkv.initial_seed()
local DEFAULT_FIRST = qkv.rand(6):tolist()

---------------------------------------------------------------- Philox

local M32 = 0xffffffff
local PM0, PM1 = 0xD2511F53, 0xCD9E8D57
local W0, W1 = 0x9E3779B9, 0xBB67AE85

-- Philox 4x32-10: ctr {c0..c3}, key {k0, k1}; returns x0, x1, x2, x3
local function philox(c0, c1, c2, c3, k0, k1)
  for _ = 1, 10 do
    local p0 = PM0 * c0                  -- < 2^64: exact mod 2^64 in Lua
    local p1 = PM1 * c2
    local hi0, lo0 = (p0 >> 32) & M32, p0 & M32
    local hi1, lo1 = (p1 >> 32) & M32, p1 & M32
    c0, c1, c2, c3 = hi1 ~ c1 ~ k0, lo1, hi0 ~ c3 ~ k1, lo0
    k0, k1 = (k0 + W0) & M32, (k1 + W1) & M32
  end
  return c0, c1, c2, c3
end

-- block j of the stream keyed by seed
local function block(seed, j)
  return {philox(j & M32, (j >> 32) & M32, 0, 0, seed & M32, (seed >> 32) & M32)}
end

local TWO_M24 = 2.0 ^ -24
local TWO_M53 = 2.0 ^ -53

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

-- the expected outputs of a call at block `offset`
local function ref_rand32(seed, offset, n)
  local out = {}
  for i = 0, n - 1 do
    local x = block(seed, offset + i // 4)
    out[i + 1] = (x[i % 4 + 1] >> 8) * TWO_M24
  end
  return out
end

local function u53(a, b) return (((a << 32) | b) >> 11) * TWO_M53 end

local function ref_rand64(seed, offset, n)
  local out = {}
  for i = 0, n - 1 do
    local x = block(seed, offset + i // 2)
    local a = 2 * (i % 2)
    out[i + 1] = u53(x[a + 1], x[a + 2])
  end
  return out
end

local function box_muller(u1, u2)
  local r, th = math.sqrt(-2 * math.log(u1)), 2 * math.pi * u2
  return r * math.cos(th), r * math.sin(th)
end

local function ref_randn32(seed, offset, n)
  local out = {}
  for k = 0, (n + 1) // 2 - 1 do
    local x = block(seed, offset + k // 2)
    local a = 2 * (k % 2)
    local u1 = ((x[a + 1] >> 8) + 1) * TWO_M24
    local u2 = (x[a + 2] >> 8) * TWO_M24
    local c, s = box_muller(u1, u2)
    out[2 * k + 1] = f32(c)
    if 2 * k + 2 <= n then out[2 * k + 2] = f32(s) end
  end
  return out
end

local function ref_randn64(seed, offset, n)
  local out = {}
  for k = 0, (n + 1) // 2 - 1 do
    local x = block(seed, offset + k)
    local u1 = ((((x[1] << 32) | x[2]) >> 11) + 1) * TWO_M53
    local u2 = u53(x[3], x[4])
    local c, s = box_muller(u1, u2)
    out[2 * k + 1] = c
    if 2 * k + 2 <= n then out[2 * k + 2] = s end
  end
  return out
end

---------------------------------------------------------------- helpers

local function flatten(t, out)
  out = out or {}
  if type(t) ~= "table" then out[#out + 1] = t; return out end
  for _, v in ipairs(t) do flatten(v, out) end
  return out
end

local function assertExact(got, ref, what)
  lu.assertEquals(#got, #ref, what .. ": length")
  for i = 1, #ref do
    if got[i] ~= ref[i] then
      lu.fail(string.format("%s: element %d is %.17g, expected %.17g", what, i, got[i], ref[i]))
    end
  end
end

local function assertClose(got, ref, rtol, what)
  lu.assertEquals(#got, #ref, what .. ": length")
  for i = 1, #ref do
    local d = math.abs(got[i] - ref[i])
    if not (d <= rtol * math.max(1, math.abs(ref[i]))) then
      lu.fail(string.format("%s: element %d is %.17g, expected %.17g", what, i, got[i], ref[i]))
    end
  end
end

local function hex4(a) return string.format("%08x %08x %08x %08x", a[1], a[2], a[3], a[4]) end

---------------------------------------------------------------- tests

TestPhilox = {}

function TestPhilox:testKnownAnswers()
  lu.assertEquals(hex4{philox(0, 0, 0, 0, 0, 0)}, "6627e8d5 e169c58d bc57ac4c 9b00dbd8")
  lu.assertEquals(hex4{philox(M32, M32, M32, M32, M32, M32)},
    "408f276d 41c83b0e a20bc7c6 6d5451fd")
  lu.assertEquals(hex4{philox(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344,
    0xa4093822, 0x299f31d0)}, "d16cfe09 94fdcceb 5001e420 24126ea1")
end

TestUniform = {}

function TestUniform:testFloat32Layout()
  for _, seed in ipairs{0, 42, 67280421310721, 0x123456789abcdef0, -1} do
    for _, n in ipairs{1, 3, 4, 5, 17} do
      qkv.seed(seed)
      local x = qkv.rand(n)
      lu.assertEquals(x.dtype, "float32")
      assertExact(x:tolist(), ref_rand32(seed, 0, n), "rand(" .. n .. ") seed " .. seed)
    end
  end
end

function TestUniform:testFloat32Continues()
  qkv.seed(7)
  local a = flatten(qkv.rand(2, 3):tolist())       -- 6 -> 2 blocks
  local b = qkv.rand(5):tolist()                   -- blocks 2, 3
  local c = qkv.rand(1):tolist()                   -- block 4
  local d = qkv.rand(4):tolist()                   -- block 5
  assertExact(a, ref_rand32(7, 0, 6), "first")
  assertExact(b, ref_rand32(7, 2, 5), "second")
  assertExact(c, ref_rand32(7, 4, 1), "third")
  assertExact(d, ref_rand32(7, 5, 4), "fourth")
end

function TestUniform:testFloat64Layout()
  qkv.seed(123)
  local x = qkv.rand(5, "float64")                 -- 3 blocks
  lu.assertEquals(x.dtype, "float64")
  assertExact(x:tolist(), ref_rand64(123, 0, 5), "rand f64")
  local y = qkv.rand({2, 2}, "float64")            -- 2 blocks
  assertExact(flatten(y:tolist()), ref_rand64(123, 3, 4), "rand f64 second")
  local z = qkv.rand(3)                            -- float32 after float64
  assertExact(z:tolist(), ref_rand32(123, 5, 3), "rand f32 after f64")
end

function TestUniform:testDefaultSeed()
  lu.assertEquals(DEFAULT_SEED, 67280421310721)
  assertExact(DEFAULT_FIRST, ref_rand32(67280421310721, 0, 6), "default stream")
  qkv.seed(99)
  lu.assertEquals(qkv.initial_seed(), 99)
end

function TestUniform:testLargeParallel()
  local n = 100003                                  -- above the OpenMP threshold
  qkv.seed(2024)
  local x = qkv.rand(n):tolist()
  assertExact(x, ref_rand32(2024, 0, n), "rand(100003)")
  local y = qkv.rand(40001, "float64"):tolist()
  assertExact(y, ref_rand64(2024, (n + 3) // 4, 40001), "rand f64 after large")
end

function TestUniform:testRangeAndStats()
  qkv.seed(5)
  for _, dt in ipairs{"float32", "float64"} do
    local x = qkv.rand(100000, dt)
    local lo, hi, s, s2 = math.huge, -math.huge, 0, 0
    for _, v in ipairs(x:tolist()) do
      if v < lo then lo = v end
      if v > hi then hi = v end
      s = s + v; s2 = s2 + v * v
    end
    lu.assertTrue(lo >= 0 and hi < 1, dt .. " range")
    local mean = s / 100000
    lu.assertAlmostEquals(mean, 0.5, 0.01)
    lu.assertAlmostEquals(s2 / 100000 - mean * mean, 1 / 12, 0.005)
  end
end

TestNormal = {}

function TestNormal:testFloat32()
  for _, n in ipairs{1, 2, 3, 7, 8} do
    qkv.seed(31337)
    local x = qkv.randn(n)
    lu.assertEquals(x.dtype, "float32")
    assertClose(x:tolist(), ref_randn32(31337, 0, n), 1e-6, "randn(" .. n .. ")")
  end
  qkv.seed(11)
  local a = qkv.randn(3, 3):tolist()                -- 9 -> 3 blocks
  local b = qkv.randn(6):tolist()
  assertClose(flatten(a), ref_randn32(11, 0, 9), 1e-6, "randn 3x3")
  assertClose(b, ref_randn32(11, 3, 6), 1e-6, "randn continues")
end

function TestNormal:testFloat64()
  for _, n in ipairs{1, 2, 5} do
    qkv.seed(8)
    local x = qkv.randn(n, "float64")
    lu.assertEquals(x.dtype, "float64")
    assertClose(x:tolist(), ref_randn64(8, 0, n), 1e-12, "randn f64(" .. n .. ")")
  end
  qkv.seed(8)
  qkv.randn(5, "float64")                            -- 3 blocks
  local y = qkv.randn(4, "float64"):tolist()
  assertClose(y, ref_randn64(8, 3, 4), 1e-12, "randn f64 continues")
  local z = qkv.rand(2):tolist()                     -- uniform after normal
  assertExact(z, ref_rand32(8, 5, 2), "rand after randn")
end

function TestNormal:testLargeParallel()
  qkv.seed(77)
  local n = 50001
  local x = qkv.randn(n):tolist()
  assertClose(x, ref_randn32(77, 0, n), 1e-6, "randn(50001)")
end

function TestNormal:testStats()
  qkv.seed(1)
  for _, dt in ipairs{"float32", "float64"} do
    local n = 100000
    local x = qkv.randn(n, dt):tolist()
    local s, s2 = 0, 0
    for _, v in ipairs(x) do s = s + v; s2 = s2 + v * v end
    local mean = s / n
    lu.assertAlmostEquals(mean, 0, 0.02)
    lu.assertAlmostEquals((s2 - n * mean * mean) / (n - 1), 1, 0.03)
  end
end

TestSeed = {}

function TestSeed:testReadmeExample()
  qkv.seed(42)
  local a = qkv.randn(2, 3)
  qkv.seed(42)
  lu.assertEquals(qkv.randn(2, 3):eq(a):sum():item(), 6)
end

function TestSeed:testSameAndDifferent()
  qkv.seed(1000)
  local a = qkv.rand(64):tolist()
  local an = qkv.randn(64):tolist()
  qkv.seed(1000)
  lu.assertEquals(qkv.rand(64):tolist(), a)
  lu.assertEquals(qkv.randn(64):tolist(), an)
  qkv.seed(1001)
  local b = qkv.rand(64):tolist()
  local diff = 0
  for i = 1, 64 do if a[i] ~= b[i] then diff = diff + 1 end end
  lu.assertTrue(diff >= 60, "seeds 1000 and 1001 share " .. (64 - diff) .. " of 64")
  -- seeds differing only in the high 32 bits give different streams
  qkv.seed(5)
  local c = qkv.rand(8):tolist()
  qkv.seed(5 + (1 << 32))
  local d = qkv.rand(8):tolist()
  lu.assertNotEquals(c, d)
  assertExact(d, ref_rand32(5 + (1 << 32), 0, 8), "high seed bits")
end

function TestSeed:testShapesAndEmpty()
  qkv.seed(3)
  local x = qkv.rand{2, 3, 2}
  lu.assertEquals(tostring(x.shape), "(2, 3, 2)")
  local e = qkv.rand(0)                              -- consumes nothing
  lu.assertEquals(e:numel(), 0)
  local y = qkv.randn(2, 0, "float64")
  lu.assertEquals(y:numel(), 0)
  local z = qkv.rand(4):tolist()
  assertExact(z, ref_rand32(3, 3, 4), "after empty calls")
  lu.assertEquals(qkv.rand().ndim, 0)
end

os.exit(lu.LuaUnit.run(), true)
