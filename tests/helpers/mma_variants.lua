-- mma_variants.lua: the tensor-core attention (vm/cuda/attention_mma.cu)
-- under the one QKV_CUDA_MMA_VARIANT this process was started with;
-- tests/backends/cuda/test_attention.lua runs it once for each variant:
--
--   QKV_CUDA_MMA_VARIANT=r32k64 build/qkv tests/helpers/mma_variants.lua
--
-- Shapes that are no multiple of any variant's tiles, one and several
-- query and key tiles, causal with nq < nk and nq > nk (rows with no key),
-- masks with rows masked out, another scale, float16 and bfloat16, and one
-- layout that the one-stage kernel takes, the mma path forced.  Each
-- result against the CPU's (float32 inside) to the dtype's tolerance,
-- against float64 within twice the CPU's own error, masked rows exactly
-- 0, and the log-sum-exps the kernel keeps (qkv._attention_lse).  Prints
-- "ok N cases" and exits 0, or the first failure and exits 1.  A variant
-- that is not built for a head size must say so.
-- (QKV_CUDA_ATTENTION=wgmma runs the same on the Hopper forward, in the
-- tile of QKV_CUDA_WGMMA_BK)
local path = os.getenv("QKV_CUDA_ATTENTION") or "mma"
local variant = path == "wgmma" and "wgmma " .. (os.getenv("QKV_CUDA_WGMMA_BK") or "default")
                or os.getenv("QKV_CUDA_MMA_VARIANT") or "default"
qkv.cuda.attention_backend(path)           -- ours, where cuDNN's would run
local TOL = {float16 = 2e-3, bfloat16 = 1e-2}
local D128 = variant ~= "r32k128"          -- r32k128 is built at d 64 only

local function rel(x, want)
  local d = x:cpu():double() - want:double()
  return math.sqrt((d * d):sum():item() / (want:double() * want:double()):sum():item())
end

local function fail(fmt, ...)
  io.write(("FAIL %s: " .. fmt .. "\n"):format(variant, ...))
  os.exit(1)
end

qkv.seed(11)
local cases = {  -- batch, heads, nq, nk, d, causal, dtype
  {1, 2, 70, 50, 64, false, "bfloat16"}, {1, 1, 33, 100, 64, true, "bfloat16"},
  {1, 1, 100, 40, 64, true, "float16"}, {2, 1, 200, 300, 64, true, "bfloat16"},
  {1, 2, 130, 129, 128, false, "float16"}, {1, 1, 150, 260, 128, true, "bfloat16"},
  {1, 1, 260, 150, 128, true, "bfloat16"},
}
local n = 0
for _, c in ipairs(cases) do
  local b, h, nq, nk, d, causal, dt = table.unpack(c)
  local q = qkv.randn(b, h, nq, d, "float64"):to(dt)
  local k, v = qkv.randn(b, h, nk, d, "float64"):to(dt), qkv.randn(b, h, nk, d, "float64"):to(dt)
  local m = qkv.randn(nq, nk, "float64"):gt(-0.5)
  m:narrow(1, 1, 3):fill_(false)                          -- rows with no key: zeros
  for _, opts in ipairs{{causal = causal}, {causal = causal, mask = m, scale = 0.3}} do
    local label = ("%s %dx%d %d x %d d %d%s%s"):format(dt, b, h, nq, nk, d,
      causal and " causal" or "", opts.mask and " mask" or "")
    opts.weights = false
    local gopts = {causal = opts.causal, mask = opts.mask and opts.mask:cuda(), scale = opts.scale,
                   weights = false}
    local ok, got = pcall(qkv.attention, q:cuda(), k:cuda(), v:cuda(), gopts)
    if d == 128 and not D128 then
      if ok or not tostring(got):find("head size 64 only") then
        fail("%s: no error for a variant not built at d 128 (%s)", label, tostring(got))
      end
    else
      if not ok then fail("%s: %s", label, tostring(got)) end
      if qkv.cuda.attention_backend() ~= path then
        fail("%s: ran %s", label, qkv.cuda.attention_backend())
      end
      local cpu = qkv.attention(q, k, v, opts)
      local want = qkv.attention(q:double(), k:double(), v:double(), opts)
      local e = rel(got, cpu)
      if e > TOL[dt] then fail("%s: ||gpu - cpu|| / ||cpu|| = %.3g", label, e) end
      local eg, ec = rel(got, want), rel(cpu, want)
      if eg > 2 * ec then fail("%s: error %.3g against float64, the CPU's %.3g", label, eg, ec) end
      if opts.mask and got:narrow(3, 1, 3):cpu():abs():max():item() ~= 0 then
        fail("%s: masked rows not 0", label)
      end
      -- the log-sum-exps the kernel keeps (float32), against float64's:
      -- -inf in the same places (rows with no key), else within 1e-4
      local scale = opts.scale or 1 / math.sqrt(d)
      local _, lse = qkv._attention_lse(q:cuda(), k:cuda(), v:cuda(), gopts.mask, causal, scale)
      local _, lse64 = qkv._attention_lse(q:double(), k:double(), v:double(), opts.mask, causal,
                                          scale)
      local gl, wl = lse:cpu():double(), lse64
      if not gl:eq(-math.huge):eq(wl:eq(-math.huge)):all():item() then
        fail("%s: lse's -inf rows differ", label)
      end
      local fin = wl:eq(-math.huge)
      local el = (gl:masked_fill(fin, 0) - wl:masked_fill(fin, 0)):abs():max():item()
      if not (el <= 1e-4) then fail("%s: lse off by %.3g", label, el) end
      n = n + 1
    end
  end
end
-- K and V rows 129 elements apart: not read 16 bytes at a time, so the
-- one-stage kernel
local q = qkv.randn(1, 1, 90, 128, "float64"):to("bfloat16")
local wide = qkv.randn(1, 1, 90, 129, "float64"):to("bfloat16")
local kv, gkv = wide:narrow(4, 2, 128), wide:cuda():narrow(4, 2, 128)
local ok, got = pcall(qkv.attention, q:cuda(), gkv, gkv, {causal = true, weights = false})
if path == "wgmma" then      -- it reads rows 16 bytes at a time only, and says so
  if ok or not tostring(got):find("16 bytes at a time") then
    fail("strided K and V: no error from the wgmma path (%s)", tostring(got))
  end
else
  if not ok then fail("strided K and V: %s", tostring(got)) end
  local e = rel(got, qkv.attention(q, kv, kv, {causal = true, weights = false}))
  if e > TOL.bfloat16 then fail("strided K and V: ||gpu - cpu|| / ||cpu|| = %.3g", e) end
end
io.write(("ok %d cases\n"):format(n + 1))
