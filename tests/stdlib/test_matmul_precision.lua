-- test_matmul_precision.lua: qkv.set_float32_matmul_precision
-- (vm/dispatch/matmul.c) against float64 references: "medium" is the
-- product of the operands rounded to bfloat16 (nearest) with float32 sums,
-- "high" errs as float32 does and far less than "medium"; products of
-- every form (batched, broadcast, transposed views, scaled scores, linear,
-- the unfused attention) and their gradients take the setting; values that
-- are not finite, or past bfloat16's range, give float32's results; small
-- products and machines without bfloat16 units compute as "highest"; the
-- errors.  The bfloat16 parts run here through qkv._split_products(true),
-- which takes them on any machine (in float32 of the parts where the CPU
-- has no bfloat16 product: the same exact products and float32 sums).
local lu = require "luaunit"
local F = qkv.nn.functional

qkv.set_default_device("cpu")

TestMatmulPrecision = {}

function TestMatmulPrecision:tearDown()
  qkv.set_float32_matmul_precision("highest")
  qkv._split_products(false)
end

-- the largest absolute difference, in float64
local function diff(x, y) return (x:double() - y:double()):abs():max():item() end

-- f() at precision p with the parts forced
local function at(p, f, ...)
  qkv._split_products(true)
  qkv.set_float32_matmul_precision(p)
  local r = f(...)
  qkv.set_float32_matmul_precision("highest")
  qkv._split_products(false)
  return r
end

-- x with every element rounded to bfloat16 (to nearest), in float64
local function bf(x) return x:bfloat16():double() end

qkv.seed(7)
local A, B = qkv.randn(37, 300), qkv.randn(300, 29)
local REF = A:double():matmul(B:double())

function TestMatmulPrecision:testStartsHighestAndRoundTrips()
  lu.assertEquals(qkv.get_float32_matmul_precision(), "highest")
  for _, p in ipairs{"high", "medium", "highest"} do
    qkv.set_float32_matmul_precision(p)
    lu.assertEquals(qkv.get_float32_matmul_precision(), p)
  end
end

function TestMatmulPrecision:testMediumIsTheProductOfBfloat16Operands()
  local c = at("medium", A.matmul, A, B)
  lu.assertEquals(c.dtype, "float32")
  -- float32 sums of the rounded operands' exact products
  lu.assertTrue(diff(c, bf(A):matmul(bf(B))) < 1e-4)
  -- and not float32's product: bfloat16 keeps 8 bits
  lu.assertTrue(diff(c, REF) > 1e-2, "medium did not round the operands")
end

function TestMatmulPrecision:testHighErrsAsFloat32Does()
  local e32 = diff(A:matmul(B), REF)
  local eh = diff(at("high", A.matmul, A, B), REF)
  local em = diff(at("medium", A.matmul, A, B), REF)
  lu.assertTrue(eh <= 4 * e32, ("high %g against float32's %g"):format(eh, e32))
  lu.assertTrue(eh * 1000 < em, ("high %g against medium's %g"):format(eh, em))
end

function TestMatmulPrecision:testEveryProductTakesIt()
  local x = qkv.randn(2, 3, 40, 64)
  local w = qkv.randn(50, 64)
  local bias = qkv.randn(50)
  local q, k, v = qkv.randn(2, 4, 33, 16), qkv.randn(2, 4, 45, 16), qkv.randn(2, 4, 45, 16)
  local cases = {
    -- name, the op, its float64 reference from operands in float64 (r)
    {"broadcast matmul", function() return x:matmul(w.T) end,
     function(r) return r(x):matmul(r(w):t()) end},
    {"mm of a transposed view", function() return qkv.mm(w, x[1][1]:t()) end,
     function(r) return r(w):matmul(r(x[1][1]):t()) end},
    {"bmm", function() return qkv.bmm(x[1], x[2]:transpose(2, 3)) end,
     function(r) return r(x[1]):matmul(r(x[2]):transpose(2, 3)) end},
    {"linear", function() return F.linear(x, w, bias) end,
     function(r) return r(x):matmul(r(w):t()) + bias:double() end},
    {"scores", function() return qkv.scores(q, k) end,
     function(r) return r(q):matmul(r(k):transpose(3, 4)) / 4 end},
    -- (a weight's rounding may go the other way from float32's scores)
    {"unfused attention", function() local o = qkv.attention(q, k, v, {weights = true}); return o end,
     function(r)
       local s = (r(q):matmul(r(k):transpose(3, 4)) / 4):softmax(4)
       return (r == bf and bf(s) or s):matmul(r(v))
     end, 1e-3},
  }
  local id = function(t) return t:double() end
  for _, c in ipairs(cases) do
    local name, f, ref, tol = c[1], c[2], c[3], c[4] or 2e-5
    local exact = ref(id)
    local scale = exact:abs():max():item()
    local e32 = diff(f(), exact)
    local eh = diff(at("high", f), exact)
    lu.assertTrue(eh <= 4 * e32 + 1e-6 * scale, ("%s: high %g, float32 %g"):format(name, eh, e32))
    -- medium: the rounded operands' product to float32's sums
    local em = diff(at("medium", f), ref(bf))
    lu.assertTrue(em < tol * scale + 4 * e32, ("%s: medium %g from its reference"):format(name, em))
    lu.assertTrue(diff(at("medium", f), exact) > 100 * eh, name .. ": medium did not round")
  end
end

function TestMatmulPrecision:testGradientsTakeIt()
  -- d(sum(a @ b))/da = ones @ b^T: under medium, the rows' sums of b rounded
  local a = A:clone():requires_grad_()
  at("medium", function() a:matmul(B):sum():backward() end)
  local want = bf(B):sum(2):reshape(1, 300):expand(37, 300)
  lu.assertTrue(diff(a.grad, want) < 1e-4)
  lu.assertTrue(diff(a.grad, B:double():sum(2):reshape(1, 300):expand(37, 300)) > 1e-3)
end

function TestMatmulPrecision:testNonFiniteAndHugeValuesGiveFloat32s()
  local x = qkv.randn(20, 30)
  x[{1, 1}] = math.huge
  x[{2, 3}] = 0 / 0
  x[{3, 4}] = 3.4e38                 -- rounds past bfloat16's largest
  local y = qkv.randn(30, 10)
  y[4] = y[4] * 1e-3                 -- so that float32's row 3 is finite
  local want = x:matmul(y):tolist()
  local got = at("high", x.matmul, x, y):tolist()
  for i = 1, 20 do
    for j = 1, 10 do
      local w, g = want[i][j], got[i][j]
      if w ~= w then lu.assertTrue(g ~= g, ("(%d, %d): %s for NaN"):format(i, j, g))
      else lu.assertEquals(g, w, ("(%d, %d)"):format(i, j)) end
    end
  end
  for j = 1, 10 do lu.assertTrue(math.abs(want[3][j]) < math.huge) end
  -- medium: the operands rounded to bfloat16, as PyTorch's: 3.4e38 is inf
  local m = at("medium", x.matmul, x, y):tolist()
  for j = 1, 10 do
    lu.assertTrue(m[3][j] == math.huge or m[3][j] == -math.huge or m[3][j] ~= m[3][j])
    lu.assertTrue(m[2][j] ~= m[2][j])
  end
end

function TestMatmulPrecision:testEmptyAndScaledProducts()
  local z = at("high", qkv.matmul, qkv.zeros(4, 0), qkv.zeros(0, 3))
  lu.assertEquals(z:tolist(), qkv.zeros(4, 3):tolist())
  lu.assertEquals(at("high", qkv.matmul, qkv.zeros(0, 5), qkv.ones(5, 3)):size(), {0, 3})
  -- a scale of 0 or inf is float32's product then the multiply
  local q, k = qkv.ones(1, 1, 2, 4), qkv.ones(1, 1, 3, 4)
  lu.assertEquals(at("high", qkv.scores, q, k, {scale = 0}):tolist(),
                  qkv.scores(q, k, {scale = 0}):tolist())
end

function TestMatmulPrecision:testWhereNoFasterProductExistsItIsHighest()
  -- below a few million multiply-adds no backend takes the parts, and on a
  -- CPU without bfloat16 products none does: the values are float32's
  local a, b = qkv.randn(16, 32), qkv.randn(32, 8)
  for _, p in ipairs{"high", "medium"} do
    qkv.set_float32_matmul_precision(p)
    lu.assertEquals(a:matmul(b):tolist(), (function()
      qkv.set_float32_matmul_precision("highest")
      return a:matmul(b):tolist()
    end)())
  end
  -- float64 and the halves never take it
  qkv._split_products(true)
  qkv.set_float32_matmul_precision("medium")
  local a64, b64 = A:double(), B:double()
  lu.assertEquals(diff(a64:matmul(b64), REF), 0)
  lu.assertEquals(A:half():matmul(B:half()).dtype, "float16")
end

function TestMatmulPrecision:testErrorsNameTheFunction()
  for _, bad in ipairs{"low", "HIGH", 1, true} do
    lu.assertErrorMsgContains(
      'qkv.set_float32_matmul_precision: precision must be "highest", "high" or "medium", got',
      qkv.set_float32_matmul_precision, bad)
  end
  lu.assertErrorMsgContains("qkv.set_float32_matmul_precision: precision must be",
                            qkv.set_float32_matmul_precision)
  lu.assertErrorMsgContains("set_float32_matmul_precision", qkv.set_float32_matmul_precision,
                            "high", "extra")
  lu.assertErrorMsgContains("get_float32_matmul_precision", qkv.get_float32_matmul_precision, 1)
  lu.assertEquals(qkv.get_float32_matmul_precision(), "highest")
end
