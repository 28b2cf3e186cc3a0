-- attention_gpu.lua -- qkv.attention on the GPU against PyTorch's
-- scaled_dot_product_attention on the same GPU (bench/attention_gpu_torch.py,
-- the python3 on PATH), in one command:
--
--   build/qkv bench/attention_gpu.lua [--quick]   (on a GPU machine; docs/cuda.md)
--
-- 16k tokens per case (B = 16384 / N sequences of N), hidden 2048 as 16
-- heads of 128 and 32 of 64, N from 512 to 16k, causal and not, bfloat16,
-- float16 and float32 (TF32 off). qkv's times are medians of 20 after 5
-- warm-ups, each run ended by qkv.cuda.synchronize() on the host's clock;
-- torch's are CUDA events. FLOPs: 4 B H N^2 d, halved when causal. Prints
-- a markdown table for bench/RESULTS.md, with the ceilings torch measures
-- (a device-to-device copy, a bf16 GEMM), and first the numerics: on the
-- same inputs (saved as safetensors for torch to read), each side's max
-- and RMS error against a float64 reference. The halves with head sizes 64
-- and 128 run on the tensor cores (vm/cuda/attention_mma.cu); the column
-- "path" says which kernel ran (qkv.cuda.attention_backend()).

io.stdout:setvbuf("line")            -- a step killed at its limit keeps its rows
local ok, why = qkv.cuda_available()
if not ok then print("attention_gpu: no GPU (" .. why .. "); skipped") return end
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local U = dofile(here .. "/lib/timing.lua")
local quote = U.quote

local torch, ceiling = {}, {}
-- --quick: the halves at N 4k and 16k only, no numerics (a short GPU run)
local QUICK = arg[1] == "--quick"
local DTYPES = QUICK and {"bfloat16", "float16"} or {"bfloat16", "float16", "float32"}
local NS = QUICK and {4096, 16384} or {512, 1024, 2048, 4096, 8192, 16384}
local p = io.popen("python3 " .. quote(here .. "/attention_gpu_torch.py") ..
                   (QUICK and " --quick" or "") .. " 2>&1")
local out = p:read("a")
p:close()
for dt, h, d, n, c, ms in out:gmatch("RESULT (%S+) (%d+) (%d+) (%d+) (%d) (%S+)") do
  torch[table.concat({dt, h, d, n, c}, " ")] = tonumber(ms)
end
for dt, h, d, n, c, ms in out:gmatch("BACKWARD (%S+) (%d+) (%d+) (%d+) (%d) (%S+)") do
  torch[table.concat({dt, h, d, n, c, "bwd"}, " ")] = tonumber(ms)
end
for k, v in out:gmatch("CEILING (%S+) (%S+)") do ceiling[k] = v end
if not next(torch) then print("attention_gpu: torch: " .. out:gsub("\n$", "")) end

local median_ms = U.gpu_median_ms

-- numerics: B 1, N 1024, both head shapes, causal and not, each dtype's
-- inputs rounded from one float64 draw; errors against float64 attention
-- of the rounded inputs (torch computes its own reference the same way)
local tmp = os.tmpname()
local function errors(got, want)
  local d = (got:cpu():double() - want):abs()
  return d:max():item(), math.sqrt((d * d):mean():item())
end
local numerics = {}
qkv.seed(2)
for _, dt in ipairs(QUICK and {} or {"bfloat16", "float16"}) do
  for _, hd in ipairs{{16, 128}, {32, 64}} do
    local q, k, v = qkv.randn(1, hd[1], 1024, hd[2]):to(dt), qkv.randn(1, hd[1], 1024, hd[2]):to(dt),
                    qkv.randn(1, hd[1], 1024, hd[2]):to(dt)
    for _, causal in ipairs{false, true} do
      local want = qkv.attention(q:double(), k:double(), v:double(), {causal = causal, weights = false})
      local got = qkv.attention(q:cuda(), k:cuda(), v:cuda(), {causal = causal, weights = false})
      local key = table.concat({dt, hd[1], hd[2], causal and 1 or 0}, " ")
      numerics[#numerics + 1] = {key, qkv.cuda.attention_backend(), errors(got, want)}
    end
    qkv.save_safetensors(tmp, {q = q, k = k, v = v})
    local pn = io.popen(("python3 %s --numerics %s %s %d %d 2>&1"):format(
      quote(here .. "/attention_gpu_torch.py"), quote(tmp), dt, hd[1], hd[2]))
    for line in pn:lines() do
      local key, mx, rms = line:match("^NUMERICS (.-) (%S+) (%S+)$")
      if key then numerics[key] = {tonumber(mx), tonumber(rms)} end
    end
    pn:close()
  end
end
os.remove(tmp)
print("| dtype | heads x d | causal | qkv path | qkv max | qkv RMS | torch max | torch RMS | qkv/torch RMS |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for _, r in ipairs(numerics) do
  local dt, h, d, c = r[1]:match("(%S+) (%S+) (%S+) (%S+)")
  local t = numerics[r[1]]
  print(("| %s | %s x %s | %s | %s | %.2e | %.2e | %s | %s | %s |"):format(dt, h, d,
    c == "1" and "yes" or "no", r[2], r[3], r[4], t and ("%.2e"):format(t[1]) or "-",
    t and ("%.2e"):format(t[2]) or "-", t and ("%.2f"):format(r[4] / t[2]) or "-"))
end
print()

print(("attention_gpu: %s; TFLOP/s (ms)"):format(qkv.cuda.device_name()))
print("| dtype | heads x d | N | causal | path | qkv | torch SDPA | qkv/torch |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
qkv.seed(1)
for _, dt in ipairs(DTYPES) do
  for _, hd in ipairs{{16, 128}, {32, 64}} do
    local h, d = hd[1], hd[2]
    for _, n in ipairs(NS) do
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
        print(("| %s | %d x %d | %d | %s | %s | %.1f (%.3f) | %s | %s |"):format(dt, h, d, n,
          causal and "yes" or "no", qkv.cuda.attention_backend(), flops / ms / 1e9, ms,
          tms and ("%.1f (%.3f)"):format(flops / tms / 1e9, tms) or "-",
          tms and ("%.2f"):format(tms / ms) or "-"))
      end
      q, k, v = nil, nil, nil
      collectgarbage()
    end
  end
end
print()

-- forward and backward: the halves, g = dL/dout drawn once; FLOPs 4 B H N^2 d
-- forward and 10 B H N^2 d backward (FlashAttention-2's count), halved when
-- causal; medians of 10 after 3 warm-ups
require "qkv.autograd"
print(("attention_gpu: %s; forward + backward, TFLOP/s of 14 B H N^2 d (ms)"):format(
  qkv.cuda.device_name()))
print("| dtype | heads x d | N | causal | qkv | torch SDPA | qkv/torch |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for _, dt in ipairs{"bfloat16", "float16"} do
  for _, hd in ipairs{{16, 128}, {32, 64}} do
    local h, d = hd[1], hd[2]
    for _, n in ipairs(NS) do
      local b = 16384 // n
      local q = qkv.randn(b, h, n, d, "cuda"):to(dt):requires_grad_()
      local k = qkv.randn(b, h, n, d, "cuda"):to(dt):requires_grad_()
      local v = qkv.randn(b, h, n, d, "cuda"):to(dt):requires_grad_()
      local g = qkv.randn(b, h, n, d, "cuda"):to(dt)
      for _, causal in ipairs{false, true} do
        local ms = median_ms(function()
          q.grad, k.grad, v.grad = nil, nil, nil
          qkv.attention(q, k, v, {causal = causal, weights = false}):backward(g)
          return q.grad
        end, 3, 10)
        local tms = torch[table.concat({dt, h, d, n, causal and 1 or 0, "bwd"}, " ")]
        local flops = 14 * b * h * n * n * d / (causal and 2 or 1)
        print(("| %s | %d x %d | %d | %s | %.1f (%.3f) | %s | %s |"):format(dt, h, d, n,
          causal and "yes" or "no", flops / ms / 1e9, ms,
          tms and ("%.1f (%.3f)"):format(flops / tms / 1e9, tms) or "-",
          tms and ("%.2f"):format(tms / ms) or "-"))
      end
      q, k, v, g = nil, nil, nil, nil
      collectgarbage()
    end
  end
end
print(("ceilings (torch): copy %s GB/s, bf16 GEMM 8192^3 %s TFLOP/s"):format(
  ceiling.copy_gbs or "-", ceiling.bf16_gemm_tflops or "-"))
