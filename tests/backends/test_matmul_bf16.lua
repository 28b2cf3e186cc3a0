-- test_matmul_bf16.lua: bfloat16 matrix products on the CPU against the
-- float64 product of the same bfloat16 values: within one bfloat16
-- rounding of it (the sums are float32, in an order of each path's own).
-- Three paths, each in a child process: the tile unit's kernel
-- (vm/cpu/matmul_amx.c) on a CPU with AMX; under QKV_CPU=avx512 oneDNN's
-- bfloat16 gemm where libdnnl is installed (products past 160^3); with
-- QKV_BLAS=openblas as well the float32 path (converted operands, one
-- rounding). The cases take the tile kernel's edges: rows, columns and
-- depth off its tiles of 16 and 32 and its blocks of 32, a depth of three
-- slices (its sums kept between them), more columns than it packs at once
-- (about 1 MB of B), each operand transposed, rows wider
-- than the matrix (a narrowed view), batches, a broadcast operand, a scale
-- (qkv.scores), a product just past its threshold, NaN and infinity. Sums
-- below 2^-126 tell the paths apart: the tile unit flushes them to 0, the
-- float32 path keeps them (docs/numerics.md).
local lu = require "luaunit"
local shell = dofile("tests/helpers/shell.lua")
qkv.set_default_device("cpu")

local exe = arg and arg[-1] or "build/qkv"

-- the inputs (bfloat16) and the cases, as code a child runs and the parent
-- runs again in float64 on the saved inputs
local INPUTS = [[
  qkv.seed(9)
  local I = {a = qkv.randn(300, 200), b = qkv.randn(200, 260), c = qkv.randn(260, 200),
             x = qkv.randn(200, 300), d1 = qkv.randn(70, 1000), d2 = qkv.randn(1000, 90),
             wide = qkv.randn(300, 256), b3 = qkv.randn(3, 200, 40), s1 = qkv.randn(17, 16),
             s2 = qkv.randn(16, 18), odd = qkv.randn(33, 47), odd2 = qkv.randn(47, 65),
             w1 = qkv.randn(40, 300), w2 = qkv.randn(300, 3000)}
  I.a[5][3], I.a[7][1] = 0 / 0, 1 / 0
  for k, v in pairs(I) do I[k] = v:bfloat16() end
  I.tiny = qkv.full({32, 32}, 2 ^ -68):bfloat16()
]]

local CASES = {
  ab = "I.a:matmul(I.b)", atb = "I.x.mT:matmul(I.b)", abt = "I.a:matmul(I.c.mT)",
  atbt = "I.x.mT:matmul(I.c.mT)", deep = "I.d1:matmul(I.d2)",
  narrow = "I.wide[{{}, {1, 200}}]:matmul(I.b)",
  batch = "I.a:reshape(3, 100, 200):matmul(I.b)",
  batch2 = "I.a:reshape(3, 100, 200):matmul(I.b3)",
  scores = "qkv.scores(I.a:reshape(1, 300, 200), I.c:reshape(1, 260, 200))",
  small = "I.s1:matmul(I.s2)", odd = "I.odd:matmul(I.odd2)",
  wide = "I.w1:matmul(I.w2)",     -- B packed in chunks of columns, on each thread
  tiny = "I.tiny:matmul(I.tiny)",
}

local function child (env)
  local dir = shell.tmpdir()
  local lines = {INPUTS, ("local DIR = %q"):format(dir)}
  lines[#lines + 1] = "for k, v in pairs(I) do qkv.save(DIR .. '/in_' .. k .. '.npy', v:float()) end"
  for name, code in pairs(CASES) do
    local save = "do local r = %s; assert(r.dtype == 'bfloat16'); " ..
                 "qkv.save(DIR .. '/%s.npy', r:float()) end"
    lines[#lines + 1] = save:format(code, name)
  end
  local out, rc = shell.sh(env .. shell.quote(exe) .. " -e " .. shell.quote(table.concat(lines, "\n")))
  lu.assertEquals(rc, 0, out)
  local got, I = {}, {}
  for name in pairs(CASES) do got[name] = qkv.load(dir .. "/" .. name .. ".npy"):double() end
  for _, k in ipairs{"a", "b", "c", "x", "d1", "d2", "wide", "b3", "s1", "s2", "odd", "odd2", "w1",
                     "w2", "tiny"} do
    I[k] = qkv.load(dir .. "/in_" .. k .. ".npy"):double()
  end
  os.execute("rm -rf " .. shell.quote(dir))
  return got, I
end

-- within one bfloat16 rounding of the float64 product: half an ulp is 2^-8
-- of the value; NaN and infinities where the float64 product has them
local function check (got, I, env)
  for name, code in pairs(CASES) do
    local want = load("local I, qkv = ...; return " .. code)(I, qkv)
    local g = got[name]
    lu.assertEquals(g:size(), want:size(), name)
    local gbad, wbad = g:ne(g), want:ne(want)
    lu.assertTrue(qkv.eq(gbad, wbad):all():item(), ("%s (%s): NaN elsewhere"):format(name, env))
    local inf = want:abs():eq(1 / 0)
    lu.assertTrue(qkv.eq(g:abs():eq(1 / 0), inf):all():item(), ("%s (%s): inf elsewhere"):format(name, env))
    local fine = (gbad + inf):eq(0)
    local err = qkv.where(fine, (g - want):abs() - want:abs() * 2 ^ -8, qkv.zeros_like(g)):max():item()
    lu.assertTrue(err <= 1e-3, ("%s (%s): off by %g past bfloat16's rounding"):format(name, env, err))
  end
  lu.assertTrue(got.ab:ne(got.ab):sum():item() == 260, "row 5 (NaN in a) all NaN")
end

TestMatmulBf16 = {}

function TestMatmulBf16:testEveryPathAgainstFloat64()
  -- (QKV_CPU empty: the default even when the suite runs under a cap)
  local envs = {"QKV_CPU= ", "QKV_CPU=avx512 ", "QKV_CPU=avx512 QKV_BLAS=openblas "}
  local tiny = {}
  for i, env in ipairs(envs) do
    local got, I = child(env)
    check(got, I, i == 1 and "default" or env)
    tiny[i] = got.tiny
  end
  -- 32 products of 2^-136 sum to 2^-131: subnormal in float32 and a
  -- bfloat16 subnormal, kept by the float32 path; the tile unit flushes
  -- each product to 0
  lu.assertTrue(tiny[3]:eq(2 ^ -131):all():item(), "the float32 path keeps subnormal sums")
  if shell.has_amx() then
    lu.assertTrue(tiny[1]:eq(0):all():item(), "AMX is listed but the tile kernel did not run")
  else
    lu.assertTrue(tiny[1]:eq(2 ^ -131):all():item(), "no AMX: the float32 path's values")
  end
end

-- On the tile unit the panels split rows (or columns) between threads;
-- each output comes from one thread's tiles, summed in the same order, so
-- 1 thread and several give the same bits. Without AMX the product may go
-- through float32, whose BLAS sums a panel's edge in another order than
-- the whole (OpenBLAS, an AVX2-only CPU): each count of threads is then
-- within one bfloat16 rounding of the float64 product, as check() asks of
-- every path.
function TestMatmulBf16:testThreadsGiveTheSameBits()
  qkv.seed(4)
  local a, b = qkv.randn(512, 384):bfloat16(), qkv.randn(384, 1536):bfloat16()
  local n = qkv.get_num_threads()
  local two = a:matmul(b)
  qkv.set_num_threads(1)
  local one = a:matmul(b)
  qkv.set_num_threads(n)
  if shell.has_amx() then
    lu.assertTrue(qkv.eq(one, two):all():item())
    return
  end
  local ref = a:double():matmul(b:double())
  for threads, c in pairs{[1] = one, [n] = two} do
    local err = ((c:double() - ref):abs() - ref:abs() * 2 ^ -8):max():item()
    lu.assertTrue(err <= 1e-3, ("%d thread(s): off by %g past bfloat16's rounding"):format(threads, err))
  end
end

function TestMatmulBf16:testErrorsNameTheCall()
  local ok, err = pcall(qkv.matmul, qkv.ones(3, 4):bfloat16(), qkv.ones(5, 6):bfloat16())
  lu.assertFalse(ok)
  lu.assertStrContains(err, "matmul")
  lu.assertStrContains(err, "(3, 4) @ (5, 6)")
end

os.exit(lu.LuaUnit.run(), true)
