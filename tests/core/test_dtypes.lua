-- test_dtypes.lua: int32, float16 and bfloat16 (docs/tensors.md, "dtypes"): stored in
-- 4 and 2 bytes, converted both ways with round-to-nearest-even (against a
-- reference written here in exact double arithmetic), computed in int64 /
-- float32 and returned in their own dtype, promoted as PyTorch promotes,
-- printed with their dtype, drawn from the generator as float32's numbers
-- rounded; bad values are errors naming the dtype. .npy round trips are
-- test_npy.lua's.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local fails = R.fails

math.randomseed(16)

-- v rounded to a float32 (v a double)
local function f32(v) return (string.unpack("<f", string.pack("<f", v))) end

-- v (a value float32 holds) rounded to a format with `bits` of precision,
-- smallest normal 2^emin, largest finite max: to nearest, ties to even
local function round(v, bits, emin, max)
  if v ~= v then return v end
  local a = math.abs(v)
  local q
  if a < 2^emin then q = 2^(emin - bits + 1)
  else
    local _, e = math.frexp(a)                    -- a in [2^(e-1), 2^e)
    q = 2^(e - bits)
  end
  local n = a / q
  local f = math.floor(n)
  local r = n - f
  if r > 0.5 or (r == 0.5 and f % 2 == 1) then f = f + 1 end
  local res = f * q
  if res > max then res = math.huge end
  return v < 0 and -res or (res == 0 and 1 / v < 0 and -0.0 or res)
end
local function ref_f16(v) return round(v, 11, -14, 65504) end
local function ref_bf16(v) return round(v, 8, -126, 3.3895313892515355e38) end

-- float32 values across every range the halves have, and ties of each
local function samples()
  local v = {0, -0.0, 1, -1, 65504, 65519.996, 65520, -70000, 2^-24, 2^-25, 3 * 2^-26,
             2^-14, 2^-14 - 2^-25, 1 + 2^-11, 1 + 3 * 2^-11, 1 + 2^-8, 1 + 3 * 2^-8,
             3.3895313892515355e38, 3.4e38, 2^-133, 2^-140, math.huge, -math.huge}
  for _ = 1, 300 do
    local e = math.random(-30, 20)
    v[#v + 1] = f32((math.random() * 2 - 1) * 2^e)
  end
  return v
end

TestConversion = {}

function TestConversion:testRoundToNearestEven()
  local v = samples()
  for i = 1, #v do v[i] = f32(v[i]) end
  local x = qkv.tensor(v, "float32")
  for _, c in ipairs{{"float16", ref_f16}, {"bfloat16", ref_bf16}} do
    local got = x:to(c[1]):tolist()
    for i, w in ipairs(v) do
      local want = c[2](w)
      if got[i] ~= want or 1 / got[i] ~= 1 / want then
        lu.fail(string.format("%s of %.17g: got %.17g, want %.17g", c[1], w, got[i], want))
      end
    end
  end
  -- NaN stays NaN; widening back is exact
  lu.assertTrue(qkv.tensor({0 / 0}):to("float16")[1] ~= qkv.tensor({0 / 0}):to("float16")[1])
  local h = x:to("float16")
  lu.assertEquals(h:to("float32"):tolist(), h:tolist())
  lu.assertEquals(h:to("float64"):to("float16"):tolist(), h:tolist())
  lu.assertEquals(h:to("bfloat16").dtype, "bfloat16")
end

function TestConversion:testInt32()
  local x = qkv.tensor({-2147483648, -1, 0, 2147483647}, "int32")
  lu.assertEquals(x:tolist(), {-2147483648, -1, 0, 2147483647})
  lu.assertEquals(x:to("int64"):tolist(), {-2147483648, -1, 0, 2147483647})
  lu.assertEquals(qkv.tensor({2.9, -2.9}):to("int32"):tolist(), {2, -2})
  -- NaN and values out of range are errors, not 0 and a clamp (test_conversions.lua)
  fails("to: cannot convert nan at [3] to int32", qkv.tensor({2.9, -2.9, 0 / 0}).to,
        qkv.tensor({2.9, -2.9, 0 / 0}), "int32")
  fails("to: cannot convert -10000000000 at [2] to int32", qkv.tensor({1, -1e10}).to,
        qkv.tensor({1, -1e10}), "int32")
  fails("tensor: 2147483648 does not fit in int32", qkv.tensor, {2147483648}, "int32")
  fails("full: 3000000000 does not fit in int32", qkv.full, {2}, 3000000000, "int32")
  fails("index: 2147483648 does not fit in int32", function() x[1] = 2147483648 end)
  lu.assertEquals(qkv.arange(3, "int32"):tolist(), {0, 1, 2})
end

TestCompute = {}

-- arithmetic on a half is float32's, rounded once into the half
function TestCompute:testHalvesComputeInFloat32()
  for _, c in ipairs{{"float16", ref_f16}, {"bfloat16", ref_bf16}} do
    local a = qkv.randn(200):to(c[1])
    local b = qkv.randn(200):to(c[1])
    local av, bv = a:tolist(), b:tolist()
    for name, f in pairs{add = function(x, y) return x + y end,
                         mul = function(x, y) return x * y end,
                         div = function(x, y) return x / y end} do
      local r = a[name](a, b)
      lu.assertEquals(r.dtype, c[1], name)
      for i, got in ipairs(r:tolist()) do
        lu.assertEquals(got, c[2](f32(f(av[i], bv[i]))), name .. " " .. i)
      end
    end
    local e = a:exp()
    lu.assertEquals(e.dtype, c[1])
    R.close(e:float(), a:float():exp(), 1e-2, c[1] .. " exp")
    lu.assertEquals(a:sum().dtype, c[1])
    lu.assertEquals(a:sum():item(), c[2](f32(a:float():sum():item())))
    lu.assertEquals(a:max():item(), math.max(table.unpack(av)))
  end
end

-- the layers and attention on halves: float32's results, rounded
function TestCompute:testLayersOnHalves()
  qkv.seed(5)
  local x = qkv.randn(4, 6, 8)
  for _, dt in ipairs{"float16", "bfloat16"} do
    local h = x:to(dt)
    local f = h:float()
    qkv.test.assertTensorEqual(h:softmax(), f:softmax():to(dt))
    qkv.test.assertTensorEqual(h:log_softmax(), f:log_softmax():to(dt))
    qkv.test.assertTensorEqual(qkv.layer_norm(h, 8), qkv.layer_norm(f, 8):to(dt))
    qkv.test.assertTensorEqual(h:matmul(h.mT), f:matmul(f.mT):to(dt))
    local out, w = qkv.attention(h, h, h)
    lu.assertEquals({out.dtype, w.dtype}, {dt, dt})
    R.close(out:float(), (qkv.attention(f, f, f)), dt == "float16" and 5e-3 or 3e-2, dt)
    R.close(qkv.attention(h, h, h, {weights = false}):float(), out:float(), 1e-2, dt .. " fused")
  end
end

function TestCompute:testInt32()
  local x = qkv.tensor({2147483647, -5, 7}, "int32")
  lu.assertEquals((x + 1):tolist(), {-2147483648, -4, 8}, "wraps as int32")
  lu.assertEquals((x + 1).dtype, "int32")
  lu.assertEquals(x:sum().dtype, "int64", "sum gives int64, as PyTorch")
  lu.assertEquals(x:sum():item(), 2147483649)
  lu.assertEquals(x:max():item(), 2147483647)
  lu.assertEquals(x:max().dtype, "int32")
  lu.assertEquals(x:mean().dtype, "float32")
  lu.assertEquals((x / 2).dtype, "float32")
  lu.assertEquals(x:abs():tolist(), {2147483647, 5, 7})
  local v, i = x:sort()
  lu.assertEquals(v:tolist(), {-5, 7, 2147483647})
  lu.assertEquals(i:tolist(), {2, 3, 1})
end

-- sum's and cumsum's dtype= is the result's dtype, as PyTorch's: an int32
-- sum wraps. PyTorch: torch.tensor([2**31-1, 1], dtype=torch.int32)
-- .sum(dtype=torch.int32) is tensor(-2147483648, dtype=torch.int32),
-- .cumsum(0, dtype=torch.int32) tensor([2147483647, -2147483648], dtype=torch.int32),
-- torch.tensor([True, True]).sum(dtype=torch.bool) tensor(True)
-- (qkv gave the int64 2147483648, [2147483647, 2147483648] and 2)
function TestCompute:testSumDtypeIsTheResult()
  local x = qkv.tensor({2147483647, 1}, "int32")
  local s = x:sum{dtype = "int32"}
  lu.assertEquals({s.dtype, s:item()}, {"int32", -2147483648})
  s = x:view(1, 2):sum(2, {dtype = "int32"})
  lu.assertEquals({s.dtype, s:tolist()}, {"int32", {-2147483648}})
  s = qkv.tensor({2147483647, 1}, "int64"):sum{dtype = "int32"}
  lu.assertEquals({s.dtype, s:item()}, {"int32", -2147483648})
  local c = x:cumsum(1, {dtype = "int32"})
  lu.assertEquals({c.dtype, c:tolist()}, {"int32", {2147483647, -2147483648}})
  s = qkv.tensor{true, true}:sum{dtype = "bool"}
  lu.assertEquals({s.dtype, s:item()}, {"bool", true})
  s = qkv.tensor{1.5, 2.5}:sum{dtype = "int64"}           -- torch: tensor(3)
  lu.assertEquals({s.dtype, s:item()}, {"int64", 3})
  lu.assertEquals(x:sum().dtype, "int64", "without dtype=, int64 as before")
end

function TestCompute:testPromotion()
  local h, b, f = qkv.ones(2, "float16"), qkv.ones(2, "bfloat16"), qkv.ones(2)
  local i, l, t = qkv.ones(2, "int32"), qkv.ones(2, "int64"), qkv.ones(2, "bool")
  local cases = {
    {h + b, "float32"}, {h + f, "float32"}, {b + f:double(), "float64"},
    {h + i, "float16"}, {i + l, "int64"}, {i + t, "int32"}, {i + 1, "int32"},
    {i + 1.5, "float32"}, {h + 1, "float16"}, {h * 2.5, "float16"}, {t + t, "int64"},
    {i:eq(h), "bool"},
  }
  for k, c in ipairs(cases) do lu.assertEquals(c[1].dtype, c[2], "case " .. k) end
end

TestMisc = {}

-- the halves draw float32's numbers from the generator, rounded
function TestMisc:testRandom()
  for _, dt in ipairs{"float16", "bfloat16"} do
    qkv.seed(7)
    local h = qkv.randn({3, 5}, dt)
    qkv.seed(7)
    qkv.test.assertTensorEqual(h, qkv.randn(3, 5):to(dt))
    qkv.seed(7)
    local r = qkv.rand({4}, dt)
    qkv.seed(7)
    lu.assertEquals(r:tolist(), qkv.rand(4):to(dt):tolist())
  end
  fails("random tensors are float32 or float64", qkv.randn, {2}, "int32")
end

function TestMisc:testPrinting()
  local _ <close> = R.cpu_only()
  lu.assertEquals(tostring(qkv.tensor({1.5, -2}, "float16")), "tensor([ 1.5000, -2.0000], dtype=float16)")
  lu.assertEquals(tostring(qkv.tensor({1, 2}, "bfloat16")), "tensor([1., 2.], dtype=bfloat16)")
  lu.assertEquals(tostring(qkv.tensor({1, -2}, "int32")), "tensor([ 1, -2], dtype=int32)")
  lu.assertEquals(tostring(qkv.zeros(0, "int32")), "tensor([], dtype=int32)")
  lu.assertEquals(qkv.float16, "float16")
  lu.assertEquals(qkv.tensor({1}, "float16"):element_size(), 2)
end

os.exit(lu.LuaUnit.run(), true)
