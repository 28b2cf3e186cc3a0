-- test_isa.lua: the CPU kernels compiled per instruction set (vm/cpu/
-- elementwise_rows.h for the baseline, AVX2 and AVX-512; the AVX2 paths of
-- softmax, layer_norm and attention) give the same bits whichever one this
-- CPU runs, or, where the wider sets fuse multiply-adds, the same values
-- within float32's rounding. Each case runs in a child process under $QKV_CPU=baseline, avx2
-- and avx512 (each capped by what the CPU has), writes its results to .npy,
-- and the parent compares them bit for bit. Every op of the list
-- (vm/common/ops.h, as qkv._ops() gives it) is a case in each dtype its
-- kernels take, with no list here to edit. Inputs include 0, -0, +-inf,
-- NaN, subnormals and values past the functions' saturation points. Also:
-- gelu's one-pass backward in float32 against float64.
local lu = require "luaunit"
qkv.set_default_device("cpu")

local shell = dofile("tests/helpers/shell.lua")
local exe = arg and arg[-1] or "build/qkv"

-- the cases, as code a child runs: x, y (float32, 4099 elements: not a
-- multiple of any vector width) and xd (float64) are there
local SETUP = [[
  qkv.seed(11)
  -- (pnan: a NaN with every payload bit set, whose rounding to bfloat16
  -- would carry into the sign were it not quieted first)
  local pnan = string.unpack("d", string.pack("i8", 0x7fffffffffffffff))
  local special = {0, -0.0, 1/0, -1/0, 0/0, 1e-40, -1e-40, 3.4e38, -3.4e38, 14.5, -14.5, 88.9, -104,
                   pnan, -pnan}
  local x = qkv.randn(4099) * 6
  for i, v in ipairs(special) do x[i] = v end
  local y = qkv.randn(4099) * 3
  for i, v in ipairs(special) do y[4099 - i] = v end
  local xd, yd = x:double(), y:double()
  -- (away from the specials, which no integer holds)
  local xi, yi = (x[{{20, 4000}}] * 1000):long(), (y[{{20, 4000}}] * 7):long()
  local xb, yb = x:gt(0), y:gt(0)
  local out = {}
]]

local CASES = {
  sqrt_abs = "x:abs():sqrt()",
  -- float32 to bfloat16 and back (vm/cpu/copy.c: 16 or 8 at a time with
  -- integer ops, the rest one by one; a strided copy takes the plain row):
  -- rounding to nearest even, subnormals, inf, NaN, 3.4e38 past the largest
  bf16_round = "x:to('bfloat16'):float()",
  bf16_round_t = "x[{{1, 4098}}]:reshape(2, 2049):t():to('bfloat16'):float()",
  bf16_widen = "(x * 3):to('bfloat16'):t():contiguous():float()",
  -- float16 the same (F16C: 16 or 8 at a time, a signalling NaN's lanes
  -- put back from its bits): subnormals and overflow among x's values
  f16_round = "(x * 1e-4):to('float16'):float()",
  f16_round_big = "(x * 3e3):to('float16'):float()",
  f16_round_t = "x[{{1, 4098}}]:reshape(2, 2049):t():to('float16'):float()",
  f16_widen = "(x * 3):to('float16'):t():contiguous():float()",
  -- a half's sums read in place (reduce.c's staged lines and tiles)
  sum_cols_h = "x[{{1, 4096}}]:reshape(64, 64):to('float16'):sum(1):float()",
  sum_rows_bf = "x[{{1, 4096}}]:reshape(64, 64):to('bfloat16'):mean(2):float()",
  -- sums down columns (vm/cpu/reduce.c's tiles): each lane adds in row order
  sum_cols = "x[{{1, 4096}}]:reshape(64, 64):sum(1)",
  sum_cols_d = "xd[{{2, 4097}}]:reshape(32, 128):sum(1)",
  var_cols = "x[{{1, 4095}}]:reshape(63, 65):var(1)",
}

-- kernels whose AVX2 path sums in another order or with FMAs: the same
-- values within float32's rounding, NaN and inf where the baseline has them
local CLOSE = {
  tanh_small = "(x / 64):tanh()", log_abs = "x:abs():log()",
  gelu_bwd = "qkv._gelu_backward(x, y)", gelu_bwd_d = "qkv._gelu_backward(xd, y:double())",
  -- the backward's row loops (vm/cpu/attention_bwd.c); BLAS's products are
  -- the same library either way; its O comes from the forward's AVX2 path
  attention_bwd = [[(function()
    local Q, K = (x[{{1, 4096}}] / 8):reshape(4, 32, 32), y[{{1, 4096}}]:reshape(4, 32, 32)
    local V = x[{{3, 4098}}]:clamp(-5, 5):reshape(4, 32, 32)
    local O = qkv.attention(Q, K, V, {weights = false, causal = true})
    local dq, dk, dv = qkv._attention_backward(Q, K, V, O, O * 0.5, nil, true, 0.125)
    return qkv.cat({dq, dk, dv}, 1)
  end)()]],
  -- given the forward's log-sum-exps: with AVX-512 its products in
  -- registers (vm/cpu/attention_bwd_avx512.c), else BLAS's
  attention_bwd_lse = [[(function()
    local Q, K = (x[{{1, 4096}}] / 8):reshape(4, 32, 32), y[{{1, 4096}}]:reshape(4, 32, 32)
    local V = x[{{3, 4098}}]:clamp(-5, 5):reshape(4, 32, 32)
    local O, L = qkv._attention_lse(Q, K, V, nil, true, 0.125)
    local dq, dk, dv = qkv._attention_backward(Q, K, V, O, O * 0.5, nil, true, 0.125, L)
    return qkv.cat({dq, dk, dv}, 1)
  end)()]],
  -- a decode step's few queries (vm/cpu/attention_decode.c: 8 lanes, or 16
  -- where d_k and d_v are multiples of 16; 80 features end in a lone 16),
  -- 83 keys (not a multiple of its 8), from a float32 and a bfloat16 cache
  attention_decode = [[(function()
    local xy = qkv.cat({x[{{20, 4000}}], y[{{20, 4000}}]}) / 4
    local q, k = xy[{{1, 192}}]:reshape(1, 4, 48), xy[{{201, 4184}}]:reshape(1, 83, 48)
    return qkv.attention(q, k, xy[{{1, 6640}}]:reshape(1, 83, 80), {weights = false, causal = true})
  end)()]],
  attention_decode_bf16 = [[(function()
    local xy = (qkv.cat({x[{{20, 4000}}], y[{{20, 4000}}]}) / 4):to("bfloat16")
    local q, k = xy[{{1, 256}}]:reshape(2, 1, 128), xy[{{201, 7880}}]:reshape(2, 30, 128)
    return qkv.attention(q, k, xy[{{101, 7780}}]:reshape(2, 30, 128), {weights = false}):float()
  end)()]],
  -- the mods on the AVX2 path's tiles (attention_avx2.c), whose products
  -- take 16 lanes where the CPU has AVX-512: a block mask's spans (the
  -- window), a mask run per tile (documents) and a score_mod (ALiBi)
  attention_mods = [[(function()
    local V = qkv.variants
    local q, k = x[{{20, 2163}}]:reshape(2, 67, 4, 4):transpose(2, 3) / 8,
                 y[{{20, 2163}}]:reshape(2, 67, 4, 4):transpose(2, 3)
    local v = x[{{1000, 3143}}]:reshape(2, 4, 67, 4)
    local doc = qkv.tensor({1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3}):repeat_interleave(6):narrow(1, 1, 67)
    local bm = qkv.block_mask(V.sliding_window(21), nil, nil, 67, 67, {block = 16})
    local a = qkv.attention(q, k, v, {block_mask = bm, score_mod = V.alibi(4), weights = false})
    local b = qkv.attention(q, k, v, {mask_mod = V.document(doc), weights = false})
    return qkv.cat({a, b}, -1)
  end)()]],
  softmax = "x:reshape(1, -1):softmax(-1)",
  softmax_rows = "(x[{{1, 4096}}]):reshape(64, 64):softmax(-1)",
  log_softmax = "x[{{14, 4099}}]:reshape(2, -1):log_softmax()",
  layer_norm = "qkv.layer_norm(x[{{14, 4099}}]:reshape(2, -1), 2043)",
  attention = [[qkv.attention(x[{{1, 4096}}]:reshape(2, 32, 64) / 8, y[{{1, 4096}}]:reshape(2, 32, 64),
                             x[{{2, 4097}}]:reshape(2, 32, 64), {weights = false, causal = true})]],
  -- each query's log-sum-exp, which the forward leaves for the backward
  attention_lse = [[select(2, qkv._attention_lse((x[{{1, 4096}}]:reshape(2, 32, 64) / 8):clamp(-9, 9),
                                                 y[{{1, 4096}}]:reshape(2, 32, 64):clamp(-9, 9),
                                                 x[{{2, 4097}}]:reshape(2, 32, 64), nil, true, 0.125))]],
}

-- the ops whose float32 formulas take the CPU's own primitives (vexp.h's
-- exp, log and tanh, the GELU polynomial: vm/common/elementwise.h's hooks),
-- which the AVX2 and AVX-512 builds fuse into FMAs: close, not the same bits
local FUSED = {exp = true, log = true, tanh = true, sigmoid = true, silu = true, gelu = true}

-- every public op of the list in float32 (x, y), float64 (_d), int64 (_i)
-- and bool (_b), as far as its row takes them; the others are lifted
-- (int64 to float32 for a float op), which the float32 case covers
for _, op in ipairs(qkv._ops()) do
  if op.public then
    local function call(a, b) return ("qkv.%s(%s)"):format(op.name, op.arity == 2 and a .. ", " .. b or a) end
    if FUSED[op.name] then CLOSE[op.name] = call("x", "y") else CASES[op.name] = call("x", "y") end
    CASES[op.name .. "_d"] = call("xd", "yd")
    if op.takes ~= "float" then CASES[op.name .. "_i"] = call("xi", "yi") end
    if op.takes == "any" then CASES[op.name .. "_b"] = call("xb", "yb") end
  end
end

local function run(isa)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. shell.quote(dir)))
  local lines = {SETUP}
  for _, cases in ipairs{CASES, CLOSE} do
    for name, code in pairs(cases) do
      lines[#lines + 1] = ("qkv.save(%q, %s)"):format(dir .. "/" .. name .. ".npy", code)
    end
  end
  local out, code = shell.sh("QKV_CPU=" .. isa .. " " .. shell.quote(exe) .. " -e " ..
                             shell.quote(table.concat(lines, "\n")))
  lu.assertEquals(code, 0, out)
  local got = {}
  for _, cases in ipairs{CASES, CLOSE} do
    for name in pairs(cases) do got[name] = qkv.load(dir .. "/" .. name .. ".npy") end
  end
  os.execute("rm -rf " .. shell.quote(dir))
  return got
end

-- the same bits: equal, or both NaN, element by element
local function same(a, b)
  if a.dtype == "bool" or a.dtype == "int64" then return qkv.eq(a, b):all():item() end
  local both_nan = a:ne(a):logical_and(b:ne(b))
  local zero_sign = a:ne(0):logical_or(qkv.eq(1 / a, 1 / b))     -- -0 is not +0
  return qkv.eq(a, b):logical_and(zero_sign):logical_or(both_nan):all():item()
end

-- (the backward sums 64 products of values that already differ)
local TOL = {attention_bwd = 1e-5, attention_bwd_lse = 1e-5,
             attention_decode_bf16 = 2 ^ -7}   -- (one rounding to bfloat16 apart)

local function close(a, b, tol)
  local finite = a:abs():lt(1 / 0)
  if not qkv.eq(finite, b:abs():lt(1 / 0)):all():item() then return false end
  if not same(a:masked_fill(finite, 0), b:masked_fill(finite, 0)) then return false end
  local d = (a:masked_fill(finite:logical_not(), 0):double() - b:masked_fill(finite:logical_not(), 0))
  return d:abs():max():item() <= (tol or 1e-6) * math.max(1, b:masked_fill(finite:logical_not(), 0):abs():max():item())
end

-- tanh and log, never subnormal where x is normal: also each element within
-- 4 float32 ulps of the baseline's relative to it (close's tolerance is
-- absolute: 1e-6 is nothing to tanh 1e-30), and the baseline's sign of 0
local REL = {tanh = true, tanh_small = true, log = true, log_abs = true}

local function near(a, b)
  if not close(a, b) then return false end
  local fa = a:masked_fill(a:abs():lt(1 / 0):logical_not(), 0):double()
  local fb = b:masked_fill(b:abs():lt(1 / 0):logical_not(), 0):double()
  return (fa - fb):abs():le(fb:abs() * 2 ^ -21):all():item() and
         a:ne(0):logical_or(qkv.eq(1 / a, 1 / b)):all():item()
end

TestIsa = {}

function TestIsa:testEverySetGivesTheBaselinesBits()
  local base = run("baseline")
  for _, isa in ipairs{"avx2", "avx512"} do
    local got = run(isa)
    for name in pairs(CASES) do
      lu.assertTrue(same(got[name], base[name]), name .. " under QKV_CPU=" .. isa)
    end
    for name in pairs(CLOSE) do
      local ok
      if REL[name] then ok = near(got[name], base[name]) else ok = close(got[name], base[name], TOL[name]) end
      lu.assertTrue(ok, name .. " under QKV_CPU=" .. isa)
    end
  end
end

function TestIsa:testAnUnknownSetIsSaidAndIgnored()
  local out = shell.sh("QKV_CPU=sse9 " .. shell.quote(exe) .. " -e 'print((qkv.ones(3) * 2):sum():item())'")
  lu.assertStrContains(out, "QKV_CPU=sse9 is not baseline, avx2, avx512 or amx; ignored")
  lu.assertStrContains(out, "6")
end

-- gelu's backward in one pass: float32 against the float64 formula, over
-- the whole range (erfc's tail, the x phi(x) term's, and inf)
function TestIsa:testGeluBackwardAgainstFloat64()
  local x = qkv.linspace(-20, 20, 40001)
  local g = qkv.randn(40001)
  local got = qkv._gelu_backward(x, g)
  local xd, gd = x:double(), g:double()
  local phi = (xd * xd * -0.5):exp() / math.sqrt(2 * math.pi)
  local Phi = qkv.where(xd:eq(0), 0.5, xd:gelu() / xd)   -- float64's gelu: libm's erfc
  local want = gd * (Phi + xd * phi)
  -- per unit of g (gelu' is at most 1.13, and 0 near x = -0.75)
  local err = ((got:double() - want):abs() / (gd:abs() + 1e-30)):max():item()
  lu.assertTrue(err < 1e-6, "error " .. err)
  -- the ends: gelu'(+inf) = 1, gelu'(-inf) = 0, NaN stays NaN
  local e = qkv._gelu_backward(qkv.tensor{1 / 0, -1 / 0, 0 / 0}, qkv.ones(3))
  local v = e:tolist()
  lu.assertEquals(v[1], 1)
  lu.assertEquals(v[2], 0)
  lu.assertTrue(v[3] ~= v[3])
end

-- float32's gelu and its backward against float64 (libm's erfc) element by
-- element, relative to their size, under each instruction set: a grid of
-- [-15, 8] (Phi(x) down to 1e-50, so the tail from -5 on is in it) and one
-- about 0, where the worst errors are (3.3e-7 and 3.7e-7 measured, every 7th
-- float32 in [-20, 20], bench/NOTES.md). gelu' is measured against
-- |Phi(x)| + |x phi(x)|, its size but where the two cancel (x near -0.75).
-- Results past the normals within a few of the smallest subnormal.
local GELU_ERRORS = [[
  local x = qkv.cat({qkv.linspace(-15, 8, 400001), qkv.linspace(-0.01, 0.01, 20001)})
  local xd = x:double()
  local want = xd:gelu()
  local function worst(got, ref, size)
    local normal = size:ge(2 ^ -126)
    local d = (got:double() - ref):abs()
    return (d / qkv.maximum(size, 2 ^ -126)):masked_fill(normal:logical_not(), 0):max():item(),
           d:masked_fill(normal, 0):max():item() / 2 ^ -149
  end
  local phi = (xd * xd * -0.5):exp() / math.sqrt(2 * math.pi)
  local Phi = qkv.where(xd:eq(0), 0.5, want / xd)
  local g1, g2 = worst(x:gelu(), want, want:abs())
  local d1, d2 = worst(qkv._gelu_backward(x, qkv.ones(x.shape)), Phi + xd * phi, Phi:abs() + (xd * phi):abs())
  print(("errors %.17g %.17g %.17g %.17g"):format(g1, g2, d1, d2))
]]

function TestIsa:testGeluFloat32AgainstFloat64()
  local eps = 2 ^ -23
  for _, isa in ipairs{"baseline", "avx2", "avx512"} do
    local out, code = shell.sh("QKV_CPU=" .. isa .. " " .. shell.quote(exe) .. " -e " .. shell.quote(GELU_ERRORS))
    lu.assertEquals(code, 0, out)
    local g1, g2, d1, d2 = out:match("errors (%S+) (%S+) (%S+) (%S+)")
    g1, g2, d1, d2 = tonumber(g1), tonumber(g2), tonumber(d1), tonumber(d2)
    lu.assertTrue(g1 < 4 * eps, ("gelu under QKV_CPU=%s: relative error %g"):format(isa, g1))
    lu.assertTrue(d1 < 4 * eps, ("gelu' under QKV_CPU=%s: relative error %g"):format(isa, d1))
    lu.assertTrue(g2 <= 4 and d2 <= 4, ("gelu, gelu' under QKV_CPU=%s: %g, %g of 2^-149 past the normals"):format(isa, g2, d2))
  end
end

function TestIsa:testGeluBackwardRefusesMismatches()
  local ok, err = pcall(qkv._gelu_backward, qkv.ones(3), qkv.ones(4))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "_gelu_backward: x (3,) and g (4,) must be float32 or float64")
  ok, err = pcall(qkv._gelu_backward, qkv.ones(3), qkv.ones(3, "float64"))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "_gelu_backward")
end

-- float32 products from oneDNN where libdnnl is installed, else OpenBLAS
-- (vm/cpu/blas.c); $QKV_BLAS=openblas keeps OpenBLAS's. Both against the
-- float64 product, over the layouts and shapes gemm is handed (transposed
-- operands, vectors, one-row and one-column products, batches, leading
-- dimensions wider than the rows)
local PRODUCTS = {
  "a:matmul(b)", "a.mT:matmul(a)", "a:matmul(b[{{}, {1, 1}}])", "a[{{1, 1}}]:matmul(b)",
  "a[{{}, {1, 1}}]:matmul(b[{{1, 1}}])", "a[{{3, 40}, {5, 70}}]:matmul(b[{{5, 70}, {2, 90}}])",
  "a:reshape(4, 25, 80):matmul(b:reshape(80, 120))", "a:reshape(4, 25, 80):matmul(a:reshape(4, 25, 80).mT)",
  "b.mT:matmul(a.mT)", "a[{{1, 64}}]:matmul(b) * 0.5",
}

local function products(blas)
  local dir = os.tmpname()
  local lines = {"qkv.seed(5)", "local a, b = qkv.randn(100, 80), qkv.randn(80, 120)",
                 "qkv.save(" .. ("%q"):format(dir .. "_a.npy") .. ", a)",
                 "qkv.save(" .. ("%q"):format(dir .. "_b.npy") .. ", b)"}
  for i, code in ipairs(PRODUCTS) do
    lines[#lines + 1] = ("qkv.save(%q, %s)"):format(dir .. "_" .. i .. ".npy", code)
  end
  lines[#lines + 1] = [[print(io.open("/proc/self/maps"):read("a"):find("libdnnl", 1, true) and "onednn" or "openblas")]]
  local out, code = shell.sh((blas and "QKV_BLAS=" .. blas .. " " or "") .. shell.quote(exe) ..
                             " -e " .. shell.quote(table.concat(lines, "\n")))
  lu.assertEquals(code, 0, out)
  local got = {a = qkv.load(dir .. "_a.npy"), b = qkv.load(dir .. "_b.npy"), name = out:match("(%S+)%s*$")}
  for i = 1, #PRODUCTS do got[i] = qkv.load(dir .. "_" .. i .. ".npy") end
  os.execute("rm -f " .. shell.quote(dir) .. "*")
  return got
end

-- (make test-asan sets QKV_BLAS=openblas for every process it starts: the
-- sanitizers' runs check OpenBLAS alone, see the Makefile's ASAN_ENV)
local FORCED = os.getenv("QKV_BLAS") == "openblas"

function TestIsa:testBothSgemmsAgainstFloat64()
  if not io.open("/proc/self/maps") then lu.skip("no /proc/self/maps") end
  local have_dnnl = not FORCED and shell.sh("ldconfig -p 2>/dev/null"):find("libdnnl.so.2", 1, true) ~= nil
  for _, blas in ipairs{"openblas", false} do
    local got = products(blas)
    lu.assertEquals(got.name, (blas or not have_dnnl) and "openblas" or "onednn")
    local a, b = got.a:double(), got.b:double()
    for i, code in ipairs(PRODUCTS) do
      local want = load("local a, b = ...; return " .. code)(a, b)
      local err = (got[i]:double() - want):abs():max():item()
      lu.assertTrue(err < 1e-4, ("%s (%s): off by %g"):format(code, got.name, err))
    end
  end
end

-- bfloat16 products: on oneDNN's bfloat16 gemm where libdnnl is installed
-- (big enough products, operands laid out for gemm), else in float32 from
-- converted operands; both the float64 product rounded to bfloat16, within
-- one bfloat16 rounding (float32 sums in another order)
function TestIsa:testBfloat16ProductsBothWays()
  local code = [[
    qkv.seed(9)
    local a, b = qkv.randn(300, 200):bfloat16(), qkv.randn(200, 260):bfloat16()
    qkv.save(arg_dir .. "/a.npy", a:float()) qkv.save(arg_dir .. "/b.npy", b:float())
    qkv.save(arg_dir .. "/ab.npy", a:matmul(b):float())
    qkv.save(arg_dir .. "/atb.npy", a.mT:matmul(a):float())
    qkv.save(arg_dir .. "/batch.npy", a:reshape(3, 100, 200):matmul(b):float())]]
  for _, blas in ipairs(FORCED and {"openblas"} or {"openblas", "dnnl"}) do
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. shell.quote(dir)))
    local out, status = shell.sh("QKV_BLAS=" .. blas .. " " .. shell.quote(exe) .. " -e " ..
                                 shell.quote("arg_dir = " .. ("%q"):format(dir) .. "\n" .. code))
    lu.assertEquals(status, 0, out)
    local a, b = qkv.load(dir .. "/a.npy"):double(), qkv.load(dir .. "/b.npy"):double()
    local want = {ab = a:matmul(b), atb = a.mT:matmul(a), batch = a:reshape(3, 100, 200):matmul(b)}
    for name, w in pairs(want) do
      local got = qkv.load(dir .. "/" .. name .. ".npy"):double()
      -- bfloat16 keeps 8 bits: half an ulp is 2^-8 of the value, plus the sums' rounding
      local err = ((got - w):abs() - w:abs() * 2 ^ -8):max():item()
      lu.assertTrue(err <= 1e-3, ("%s with QKV_BLAS=%s: off by %g past bfloat16's rounding"):format(name, blas, err))
    end
    os.execute("rm -rf " .. shell.quote(dir))
  end
end

os.exit(lu.LuaUnit.run(), true)
