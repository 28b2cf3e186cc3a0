-- decode_gpu.lua -- issue 49's decode step on the GPU (vm/cuda/attention_decode.cu:
-- the keys split across blocks): B 1, H 32, H_kv 8, d 128, one query a head
-- against n_k cached keys, float32 (the decode kernel) and bfloat16 (cuDNN's
-- or the tensor cores' path), against PyTorch's SDPA with enable_gqa=True on
-- the same GPU (bench/decode_gpu_torch.py, the python3 on PATH) and a read of
-- the cache (K and V summed: the bytes once). Medians of 50 runs between two
-- CUDA events, after 5 warm-ups. On a GPU machine:
--
--   build/qkv bench/decode_gpu.lua      (DECODE_GPU_TINY=1: n_k 256 alone, a dry run)
io.stdout:setvbuf("line")
local ok, why = qkv.cuda_available()
if not ok then print("decode_gpu: no GPU (" .. tostring(why) .. "); skipped") return end
local H, HKV, D = 32, 8, 128
local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")   -- its GPU medians
local function median(f) return (U.gpu_median_ms(f, 5, 50)) end
local here = arg[0]:match("^(.*)/[^/]*$") or "."
print(("decode_gpu: B 1, H %d, H_kv %d, d %d; ms, medians of 50 between CUDA events"):format(H, HKV, D))
print(("%-9s %7s %9s %9s %9s %7s %8s %7s"):format("dtype", "n_k", "qkv", "read", "sdpa", "x/read", "sdpa/x", "GB/s"))
for _, dt in ipairs{"float32", "bfloat16"} do
  for _, n in ipairs(os.getenv("DECODE_GPU_TINY") and {256} or {4096, 32768, 131072}) do
    qkv.seed(1)
    local q = qkv.randn(1, H, 1, D):to(dt):cuda()
    local k, v = qkv.randn(1, HKV, n, D):to(dt):cuda(), qkv.randn(1, HKV, n, D):to(dt):cuda()
    local t = median(function() return qkv.attention(q, k, v, {enable_gqa = true, weights = false}) end)
    local r = median(function() return k:sum() + v:sum() end)
    local p = io.popen(("python3 %s/decode_gpu_torch.py %s %d 2>&1"):format(here, dt, n))
    local out = p:read("a")
    p:close()
    local s = tonumber(out:match("RESULT (%S+)"))
    local bytes = 2 * HKV * n * D * (dt == "float32" and 4 or 2)
    print(("%-9s %7d %9.4f %9.4f %9s %7.2f %8s %7.0f"):format(dt, n, t, r, s and ("%.4f"):format(s) or "-",
          t / r, s and ("%.2f"):format(s / t) or "-", bytes / (t * 1e-3) / 1e9))
  end
end
