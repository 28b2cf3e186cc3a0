-- test_halves_ops.lua: elementwise ops with float16 and bfloat16 operands
-- (docs/tensors.md, "dtypes"). The CPU runs them in runs of float32 with
-- each half converted as it is read and out rounded once as it is
-- written (vm/cpu/elementwise.c's staged rows), with float32 operands
-- mixed in as they are; the values must be those of converting the
-- operands whole, computing in float32 and rounding once. References:
-- add, sub, mul and div in float64 of the operands, rounded to float32
-- and then to the half (float64 holds both halves' products and sums
-- exactly, and rounding its quotient to float32 is float32's division:
-- 53 >= 2 x 24 + 2 bits); other ops against the same op on float32
-- copies, converted after; a half copied into its own dtype against its
-- bits, read back from a safetensors file; a half product's bias added
-- to its float32 sums, rounded once; every half widened to float32 and
-- float32 around every half and midpoint narrowed to float16, against
-- bits decoded and rounded here, on each ISA the CPU has; sums and
-- moments of a half read in place against float32 copies'.
local lu = require "luaunit"

local HALVES = {"bfloat16", "float16"}

-- the reference of a binary op: float64, then float32, then out's dtype
local function ref2(f, a, b, dt)
  return f(a:double(), b:double()):float():to(dt)
end

-- x and y the same values (NaN where both are)
local function same(x, y, what)
  lu.assertEquals(x.dtype, y.dtype, what)
  lu.assertEquals(x.shape, y.shape, what)
  if x.dtype == "bool" then lu.assertTrue(x:eq(y):all():item(), what) return end
  lu.assertTrue(qkv.allclose(x:double(), y:double(), 0, 0, true), what .. ": values differ")
end

-- values of every size class of the halves, with NaN and infinities
local function values(shape, dt)
  local x = qkv.randn(shape) * qkv.exp(qkv.randn(shape) * 3)
  local flat = x:view(-1)
  flat[1], flat[2], flat[3] = 0 / 0, math.huge, -math.huge
  return x:to(dt)
end

local OPS = {
  add = function(x, y) return x + y end,
  sub = function(x, y) return x - y end,
  mul = function(x, y) return x * y end,
  div = function(x, y) return x / y end,
}

TestHalvesOps = {}

-- long rows (past a run of 256), and more than one thread's share
function TestHalvesOps:testBinaryContiguous()
  qkv.seed(1)
  for _, dt in ipairs(HALVES) do
    for _, shape in ipairs{{3, 700}, {70000}} do
      local a, b = values(shape, dt), values(shape, dt)
      for name, f in pairs(OPS) do
        same(f(a, b), ref2(f, a, b, dt), ("%s %s %s"):format(dt, name, table.concat(shape, "x")))
      end
    end
  end
end

-- float32 and a half mixed (out float32), the two halves mixed (float32),
-- a bias broadcast over rows, a number, transposed and strided operands
function TestHalvesOps:testBinaryMixedAndStrided()
  qkv.seed(2)
  for _, dt in ipairs(HALVES) do
    local a, f = values({300, 520}, dt), qkv.randn(300, 520)
    local bias = values({520}, dt)
    for name, op in pairs(OPS) do
      local r = op(a, f)
      lu.assertEquals(r.dtype, "float32")
      same(r, op(a:double(), f:double()):float(), dt .. " " .. name .. " float32")
      same(op(f, a), op(f:double(), a:double()):float(), dt .. " float32 " .. name)
      same(op(a, bias), ref2(op, a, bias, dt), dt .. " " .. name .. " bias")
      same(op(bias, a), ref2(op, bias, a, dt), dt .. " bias " .. name)
      same(op(a, 3.25), op(a:double(), 3.25):float():to(dt), dt .. " " .. name .. " number")
      local t, u = a:t(), values({520, 300}, dt)
      same(op(t, u), ref2(op, t, u, dt), dt .. " " .. name .. " transposed")
      local s = a:narrow(2, 1, 400):narrow(1, 1, 200)
      local v = values({200, 400}, dt)
      same(op(s, v), ref2(op, s, v, dt), dt .. " " .. name .. " narrowed")
    end
  end
  local h, b = values({4000}, "float16"), values({4000}, "bfloat16")
  local r = h + b
  lu.assertEquals(r.dtype, "float32")
  same(r, (h:double() + b:double()):float(), "float16 + bfloat16")
end

-- comparisons of halves give bool; NaN compares false (ne: true)
function TestHalvesOps:testComparisons()
  qkv.seed(3)
  for _, dt in ipairs(HALVES) do
    local a, b = values({500, 90}, dt), values({500, 90}, dt)
    b:view(-1)[5] = a:view(-1)[5]
    for _, m in ipairs{"lt", "le", "gt", "ge", "eq", "ne"} do
      local r = a[m](a, b)
      lu.assertEquals(r.dtype, "bool")
      same(r, a:double()[m](a:double(), b:double()), dt .. " " .. m)
      same(a[m](a, 0.5), a:double()[m](a:double(), 0.5), dt .. " " .. m .. " number")
    end
  end
end

-- unary ops on halves: the float32 op of the converted tensor, rounded once
function TestHalvesOps:testUnary()
  qkv.seed(4)
  for _, dt in ipairs(HALVES) do
    local a = values({600, 120}, dt)
    for _, m in ipairs{"neg", "abs", "exp", "tanh", "sigmoid", "sqrt", "gelu", "relu"} do
      local r = a[m](a)
      lu.assertEquals(r.dtype, dt, m)
      same(r, a:float()[m](a:float()):to(dt), dt .. " " .. m)
      same(a:t()[m](a:t()), a:t():float()[m](a:t():float()):to(dt), dt .. " " .. m .. " transposed")
    end
  end
end

-- a number times or over a half stays in float32, as PyTorch's opmath:
-- the result is the float32 op of the half and the number rounded to
-- float32, then rounded once to the half (1e5 and 100001 are inf in
-- float16 and 1e-8 is 0, 0.1 is not a half); either order, and in place.
-- add and sub round the number to the half first, as PyTorch's do: 1 +
-- 0.0039063 in bfloat16 is 1 (2^-8, a tie, rounds to even), not 1 + 2^-7
function TestHalvesOps:testNumberMulDivInFloat32()
  qkv.seed(6)
  local f32 = function(v) return qkv.tensor(v, "float64"):float():double():item() end
  for _, dt in ipairs(HALVES) do
    local a = values({300, 70}, dt)
    for _, v in ipairs{1e5, 1e-8, 0.1, 70000, 100001, 3} do
      local n = f32(v)
      local mul = (a:double() * n):float():to(dt)
      local what = ("%s %s %s"):format(dt, "%s", v)
      lu.assertEquals((a * v).dtype, dt, what:format("mul dtype"))
      same(a * v, mul, what:format("x * n"))
      same(v * a, mul, what:format("n * x"))
      same(a:mul(v), mul, what:format("x:mul(n)"))
      same(a:clone():mul_(v), mul, what:format("mul_"))
      local div = (a:double() / n):float():to(dt)
      same(a / v, div, what:format("x / n"))
      same(a:div(v), div, what:format("x:div(n)"))
      same(a:clone():div_(v), div, what:format("div_"))
      same(v / a, (n / a:double()):float():to(dt), what:format("n / x"))
    end
  end
  local h = qkv.tensor({1, 1000, 6e-4}, "float16")
  lu.assertEquals((h / 1e5):tolist(), {1.0013580322265625e-05, 0.01000213623046875, 0})
  lu.assertEquals((h * 1e5):tolist(), {math.huge, math.huge, 60})
  lu.assertEquals((qkv.tensor({9}, "bfloat16") * 0.1):item(), 0.8984375)
  local one = qkv.tensor({1}, "bfloat16")
  lu.assertEquals((one + 0.0039063):item(), 1)
  lu.assertEquals(one:clone():add_(0.0039063):item(), 1)
end

-- in place: into a half from a float32 and from itself; an operand that
-- overlaps the one written (not it) is read whole first
function TestHalvesOps:testInPlace()
  qkv.seed(5)
  for _, dt in ipairs(HALVES) do
    local a, f = values({300, 300}, dt), qkv.randn(300, 300)
    local want = (a:double() + f:double()):float():to(dt)
    a:add_(f)
    same(a, want, dt .. " add_ float32")
    want = (a:double() * a:double()):float():to(dt)
    a:mul_(a)
    same(a, want, dt .. " mul_ itself")
    local t = a:t()
    want = (t:double() - f:double()):float():to(dt)
    t:sub_(f)
    same(t, want, dt .. " sub_ into a transposed view")
    local x = values({5000}, dt)
    local head, tail = x:narrow(1, 1, 4000), x:narrow(1, 1001, 4000)
    want = (tail:double() + head:double()):float():to(dt)
    tail:add_(head)           -- element by element, it would read what it wrote
    same(tail, want, dt .. " add_ from an overlapping view")
  end
end

-- a half product with a bias rounds once, as PyTorch's addmm and linear
-- (1.0078125 there): the product's sums 1 + 2^-8 (bfloat16's tie between
-- 1 and 1 + 2^-7) plus a bias of 2^-8 give 1 + 2^-7, where rounding the
-- product first gives 1 and then 1 again; a product big enough for
-- oneDNN and a small one
function TestHalvesOps:testProductWithBiasRoundsOnce()
  for _, c in ipairs{{"bfloat16", 2^-8, 1 + 2^-7}, {"float16", 2^-11, 1 + 2^-10}} do
    for _, rows in ipairs{256, 2} do
      local x = qkv.zeros(rows, 256)
      x:narrow(2, 1, 2):fill_(1)
      local W = qkv.zeros(256, 64)
      W[1]:fill_(1)
      W[2]:fill_(c[2])
      local b = qkv.full({64}, c[2])
      local what = ("%s, %d rows"):format(c[1], rows)
      local r = qkv.project(x:to(c[1]), W:to(c[1]), b:to(c[1]))
      lu.assertEquals(r.dtype, c[1])
      lu.assertTrue(r:eq(c[3]):all():item(), what .. ": project")
      r = qkv.nn.functional.linear(x:to(c[1]), W:t():to(c[1]), b:to(c[1]))
      lu.assertTrue(r:eq(c[3]):all():item(), what .. ": linear")
    end
  end
end

-- safetensors' bytes: a tensor of `dtype` ("F16", "BF16", "F32") from the
-- little-endian packed values, and back
-- index_add_ into a half (a gradient into a captured half bias): the
-- adds in float32 and out rounded once, against float64 sums rounded to
-- float32 and then to the half (a few adds of halves are exact in
-- float64), duplicates and a strided out included; and the composed
-- variant path's gradient into a captured float16 bias
function TestHalvesOps:testIndexAddIntoHalves()
  for _, dt in ipairs(HALVES) do
    local base = values({6, 4}, dt)
    local x = base:t():contiguous():t()                     -- a strided out
    local src = values({5, 4}, dt)
    local idx = qkv.tensor({3, 1, 3, 6, 3}, "int64")
    local want = base:double():index_add_(1, idx, src:double()):float():to(dt)
    same(x:index_add_(1, idx, src), want, dt .. " index_add_")
    lu.assertEquals(x.dtype, dt)
  end
  local n = 6
  local q = qkv.randn(2, n, 8):half():requires_grad_()
  local bias = qkv.randn(2, 2 * n - 1):half():requires_grad_()
  local b64 = bias:detach():double():requires_grad_()
  local q64 = q:detach():double():requires_grad_()
  local function run(x, bb)
    return qkv.attention(x, x, x, {weights = true,
      score_mod = function(sc, _, h, i, j) return sc + bb[{h, j - i + n}] end})
  end
  run(q, bias):float():sum():backward()
  run(q64, b64):sum():backward()
  lu.assertEquals(bias.grad.dtype, "float16")
  local err = (bias.grad:double() - b64.grad):abs():max():item()
  lu.assertTrue(err <= 2e-2 * b64.grad:abs():max():item(), ("bias gradient off by %g"):format(err))
end

local function from_bytes(path, dtype, n, data)
  local header = ('{"x":{"dtype":"%s","shape":[%d],"data_offsets":[0,%d]}}'):format(
    dtype, n, #data)
  local f = assert(io.open(path, "wb"))
  f:write(string.pack("<I8", #header), header, data)
  f:close()
  return qkv.load_safetensors(path).x
end

local function to_bytes(path, x, fmt)
  qkv.save_safetensors(path, {y = x})
  local f = assert(io.open(path, "rb"))
  local data = f:read("a")
  f:close()
  local off, out = 8 + string.unpack("<I8", data), {}
  local w = string.packsize(fmt)
  for i = 1, x:numel() do out[i] = string.unpack(fmt, data, off + 1 + w * (i - 1)) end
  return out
end

-- every 16-bit pattern, packed
local function every_half()
  local parts = {}
  for i = 0, 65535 do parts[#parts + 1] = string.pack("<I2", i) end
  return table.concat(parts)
end

-- a half copied into its own dtype: the same bits, a NaN's payload and
-- quiet bit included (a signalling NaN stays signalling: docs/formats.md's
-- bit-exact round trips); every bit pattern through a transposed view made
-- contiguous, a strided column cloned, and a strided view saved as it is,
-- read back from the bytes qkv.save_safetensors writes
function TestHalvesOps:testSelfCopyBits()
  local path, n = os.tmpname(), 65536
  local bytes = every_half()
  for _, c in ipairs{{"bfloat16", "BF16"}, {"float16", "F16"}} do
    local x = from_bytes(path, c[2], n, bytes)
    lu.assertEquals(x.dtype, c[1])
    local x2 = x:view(256, 256)
    local col = x:view(n / 2, 2)               -- the even patterns, then the odd ones
    for _, v in ipairs{{"transposed, contiguous", x2:t():contiguous():t(), 0, 1},
                       {"strided column, cloned", col:select(2, 1):clone(), 0, 2},
                       {"strided column, saved", col:select(2, 2), 1, 2}} do
      local got = to_bytes(path, v[2], "<I2")
      lu.assertEquals(#got, n // v[4])
      for i = 1, #got do
        local want = v[3] + (i - 1) * v[4]
        if got[i] ~= want then
          lu.fail(("%s %s: bits 0x%04x copied as 0x%04x"):format(c[1], v[1], want, got[i]))
        end
      end
    end
  end
  os.remove(path)
end

-- sums and moments of a half read as float32 where they lie (reduce.c's
-- staged lines and tiles): those of float32 copies, which the float64
-- sums of the same exact values give bit for bit here; along each dim of
-- a contiguous and a transposed tensor (lines and column tiles), whole
-- (one long line cut in pieces across threads), and against float64
function TestHalvesOps:testReductions()
  qkv.seed(21)
  for _, dt in ipairs(HALVES) do
    local x = (qkv.randn(300, 70) * qkv.exp(qkv.randn(300, 70))):to(dt)
    -- every dim strided: lines read element by element, no tile
    local x3 = (qkv.randn(60, 70, 3) * 3):to(dt):narrow(3, 2, 1):squeeze(3)
    for _, v in ipairs{{"contiguous", x}, {"transposed", x:t()}, {"narrowed", x:narrow(2, 3, 61)},
                       {"strided", x3}} do
      for _, op in ipairs{"sum", "mean", "var", "std"} do
        for d = 1, 2 do
          local what = ("%s %s %s(%d)"):format(dt, v[1], op, d)
          local got = v[2][op](v[2], d)
          same(got, v[2]:float()[op](v[2]:float(), d):to(dt), what)
          if op == "sum" then
            local ref = v[2]:double():sum(d)
            lu.assertTrue(qkv.allclose(got:double(), ref, 1e-2, 1e-1), what .. ": against float64")
          end
        end
      end
    end
    local big = (qkv.randn(300001) + 0.5):to(dt)
    same(big:sum(), big:float():sum():to(dt), dt .. " whole sum of 300001")
    same(big:mean(), big:float():mean():to(dt), dt .. " whole mean of 300001")
    same(x:sum(), x:float():sum():to(dt), dt .. " whole sum of a matrix")
  end
end

-- float32's bits of a half's, decoded here: a NaN keeps its payload and
-- its quiet bit as it is (a signalling one stays signalling)
local function widen_ref(h, dt)
  if dt == "bfloat16" then return h << 16 end
  local sign, e, m = (h & 0x8000) << 16, (h >> 10) & 0x1f, h & 0x3ff
  if e == 31 then return sign | 0x7f800000 | (m << 13) end
  if e > 0 then return sign | ((e + 112) << 23) | (m << 13) end
  if m == 0 then return sign end
  e = 113                                   -- a subnormal: normalise m
  while m & 0x400 == 0 do m, e = m << 1, e - 1 end
  return sign | (e << 23) | ((m & 0x3ff) << 13)
end

-- float16's bits of a float32's, rounded to nearest even on the value
-- (float64 holds every float32 and every half exactly); a NaN quiet, its
-- payload's top bits kept
local function narrow_ref(b)
  local sign, a = (b >> 16) & 0x8000, b & 0x7fffffff
  if a > 0x7f800000 then return sign | 0x7e00 | ((a >> 13) & 0x3ff) end
  local v = string.unpack("<f", string.pack("<I4", a))
  if v >= 65520 then return sign | 0x7c00 end
  -- the half step at v: 2^-24 below 2^-14, else 2^(e - 10)
  local step = 2.0 ^ -24
  while v >= step * 2048 do step = step * 2 end
  local q = v / step                        -- exact: a power of 2
  local f = math.floor(q)
  if q - f > 0.5 or (q - f == 0.5 and f % 2 == 1) then f = f + 1 end
  v = f * step
  if v < 2.0 ^ -14 then return sign | math.tointeger(v / 2.0 ^ -24) end  -- 0 or a subnormal
  local e = -14                             -- 2^e <= v < 2^(e + 1)
  while v >= 2.0 ^ (e + 1) do e = e + 1 end
  return sign | ((e + 15) << 10) | (math.tointeger(v / 2.0 ^ (e - 10)) - 1024)
end

-- every half's bits widened to float32, contiguous (the vector rows) and
-- strided (the per-element ones); float32 bits around every half's value
-- and every midpoint narrowed to float16
function TestHalvesOps:testConversionBits()
  local path, n = os.tmpname(), 65536
  local bytes = every_half()
  for _, c in ipairs{{"bfloat16", "BF16"}, {"float16", "F16"}} do
    local x = from_bytes(path, c[2], n, bytes)
    lu.assertEquals(x.dtype, c[1])
    for _, how in ipairs{"contiguous", "strided"} do
      local y = how == "contiguous" and x:float() or x:view(256, 256):t():float():t():reshape(-1)
      local got = to_bytes(path, y, "<I4")
      for i = 0, n - 1 do
        local want = widen_ref(i, c[1])
        if got[i + 1] ~= want then
          lu.fail(("%s 0x%04x to float32 (%s): got 0x%08x, want 0x%08x"):format(
            c[1], i, how, got[i + 1], want))
        end
      end
    end
  end
  -- float32 patterns: each half's value (from its float32 bits) and the
  -- three float32 values around each midpoint with the next half, with
  -- NaN payloads, float32's subnormals and the edge of overflow among them
  local bits = {}
  for h = 0, 0x7c00 do
    local w = widen_ref(h, "float16")
    local nx = widen_ref(h + 1, "float16")
    local mid = (w + nx) // 2              -- the midpoint's bits (the step is even)
    for _, b in ipairs{w, mid - 1, mid, mid + 1} do
      bits[#bits + 1] = b
      bits[#bits + 1] = b | 0x80000000
    end
  end
  for _, b in ipairs{0x7f800001, 0x7fbfffff, 0x7fc00000, 0x7fffffff, 0x7f802000, 1, 0x7fffff,
                     0x477fefff, 0x477ff000, 0x477fffff, 0x7f7fffff} do
    bits[#bits + 1] = b
    bits[#bits + 1] = b | 0x80000000
  end
  local m = #bits
  local packed = {}
  for i = 1, m do packed[i] = string.pack("<I4", bits[i]) end
  local f = from_bytes(path, "F32", m, table.concat(packed))
  for _, how in ipairs{"contiguous", "strided"} do
    local y = how == "contiguous" and f:to("float16")
              or f:view(m // 2, 2):t():to("float16"):t():reshape(-1)
    local got = to_bytes(path, y, "<I2")
    for i = 1, m do
      local want = narrow_ref(bits[i])
      if got[i] ~= want then
        lu.fail(("float32 0x%08x to float16 (%s): got 0x%04x, want 0x%04x"):format(
          bits[i], how, got[i], want))
      end
    end
  end
  os.remove(path)
end

-- the same bits from the AVX2 rows (F16C, 8 at a time) and the scalar
-- ones: testConversionBits in a child under each $QKV_CPU cap (the cap
-- is at most what this CPU has: tests/helpers/isa_children.lua)
function TestHalvesOps:testConversionBitsOnEachIsa()
  dofile("tests/helpers/isa_children.lua")(lu, "tests/core/test_halves_ops.lua", "testConversionBits")
end

os.exit(lu.LuaUnit.run())
