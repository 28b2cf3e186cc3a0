-- attention_gpu.lua -- qkv.attention on the GPU against PyTorch's
-- scaled_dot_product_attention on the same GPU (bench/attention_gpu_torch.py,
-- the python3 on PATH), in one command:
--
--   build/qkv bench/attention_gpu.lua          (on a GPU machine; README "CUDA")
--
-- 16k tokens per case (B = 16384 / N sequences of N), hidden 2048 as 16
-- heads of 128 and 32 of 64, N from 512 to 16k, causal and not, bfloat16,
-- float16 and float32 (TF32 off). qkv's times are medians of 20 after 5
-- warm-ups, each run ended by qkv.cuda.synchronize() on the host's clock;
-- torch's are CUDA events. FLOPs: 4 B H N^2 d, halved when causal. Prints
-- a markdown table for bench/RESULTS.md, with the ceilings torch measures
-- (a device-to-device copy, a bf16 GEMM). The halves run the float32
-- kernel until the tensor-core one lands (issue 20).

local ok, why = qkv.cuda_available()
if not ok then print("attention_gpu: no GPU (" .. why .. "); skipped") return end
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local U = dofile(here .. "/lib/timing.lua")
local quote = U.quote

local torch, ceiling = {}, {}
local p = io.popen("python3 " .. quote(here .. "/attention_gpu_torch.py") .. " 2>&1")
local out = p:read("a")
p:close()
for dt, h, d, n, c, ms in out:gmatch("RESULT (%S+) (%d+) (%d+) (%d+) (%d) (%S+)") do
  torch[table.concat({dt, h, d, n, c}, " ")] = tonumber(ms)
end
for k, v in out:gmatch("CEILING (%S+) (%S+)") do ceiling[k] = v end
if not next(torch) then print("attention_gpu: torch: " .. out:gsub("\n$", "")) end

local median_ms = U.gpu_median_ms

print(("attention_gpu: %s; TFLOP/s (ms)"):format(qkv.cuda.device_name()))
print("| dtype | heads x d | N | causal | qkv | torch SDPA | qkv/torch |")
print("| --- | --- | --- | --- | --- | --- | --- |")
qkv.seed(1)
for _, dt in ipairs{"bfloat16", "float16", "float32"} do
  for _, hd in ipairs{{16, 128}, {32, 64}} do
    local h, d = hd[1], hd[2]
    for _, n in ipairs{512, 1024, 2048, 4096, 8192, 16384} do
      local b = 16384 // n
      local q = qkv.randn(b, h, n, d, "cuda"):to(dt)
      local k = qkv.randn(b, h, n, d, "cuda"):to(dt)
      local v = qkv.randn(b, h, n, d, "cuda"):to(dt)
      for _, causal in ipairs{false, true} do
        local ms = median_ms(function()
          return qkv.attention(q, k, v, {causal = causal, weights = false})
        end)
        local tms = torch[table.concat({dt, h, d, n, causal and 1 or 0}, " ")]
        local flops = 4 * b * h * n * n * d / (causal and 2 or 1)
        print(("| %s | %d x %d | %d | %s | %.1f (%.3f) | %s | %s |"):format(dt, h, d, n,
          causal and "yes" or "no", flops / ms / 1e9, ms,
          tms and ("%.1f (%.3f)"):format(flops / tms / 1e9, tms) or "-",
          tms and ("%.2f"):format(tms / ms) or "-"))
      end
      q, k, v = nil, nil, nil
      collectgarbage()
    end
  end
end
print(("ceilings (torch): copy %s GB/s, bf16 GEMM 8192^3 %s TFLOP/s"):format(
  ceiling.copy_gbs or "-", ceiling.bf16_gemm_tflops or "-"))
