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
--
-- Then the tensor-core forward in each variant (QKV_CUDA_MMA_VARIANT: rows
-- a warp and keys a tile, vm/cuda/attention_mma.cu), each in a process of
-- its own (this script again, with --variant-child): bfloat16, both head
-- shapes, N 1k, 4k and 16k, causal and not, TFLOP/s beside the default's
-- (the variable unset, also a process of its own) and SDPA's; and each
-- variant's relative RMS difference from the float32 kernel at N 1024.
--
--   build/qkv bench/attention_gpu.lua --variants   (that table alone, ~20 s)

io.stdout:setvbuf("line")            -- a step killed at its limit keeps its rows
local ok, why = qkv.cuda_available()
if not ok then print("attention_gpu: no GPU (" .. why .. "); skipped") return end
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local U = dofile(here .. "/lib/timing.lua")
local quote = U.quote

-- the variant table's cases: bfloat16, {heads, d}, N, causal and not
local VHD, VNS = {{16, 128}, {32, 64}}, {1024, 4096, 16384}

-- --variant-child: this process's variant (QKV_CUDA_MMA_VARIANT, set by the
-- parent) on the variant table's cases: "VCHECK d causal rel" (relative RMS
-- difference from the float32 kernel on the same inputs, N 1024, B 1),
-- then "VARIANT d N causal ms" (medians of 20 after 5 warm-ups), or "-"
-- where the variant is not built for d
if arg[1] == "--variant-child" then
  qkv.seed(5)
  for _, hd in ipairs(VHD) do
    local q, k, v = qkv.randn(1, hd[1], 1024, hd[2], "cuda"):to("bfloat16"),
                    qkv.randn(1, hd[1], 1024, hd[2], "cuda"):to("bfloat16"),
                    qkv.randn(1, hd[1], 1024, hd[2], "cuda"):to("bfloat16")
    for _, causal in ipairs{false, true} do
      local okv, got = pcall(qkv.attention, q, k, v, {causal = causal, weights = false})
      if okv then
        local want = qkv.attention(q:float(), k:float(), v:float(), {causal = causal, weights = false})
        local dd = got:float() - want
        print(("VCHECK %d %d %.3e"):format(hd[2], causal and 1 or 0,
          math.sqrt((dd * dd):sum():item() / (want * want):sum():item())))
      else
        print(("VCHECK %d %d -"):format(hd[2], causal and 1 or 0))
      end
    end
  end
  for _, hd in ipairs(VHD) do
    for _, n in ipairs(VNS) do
      local b = 16384 // n
      local q = qkv.randn(b, hd[1], n, hd[2], "cuda"):to("bfloat16")
      local k = qkv.randn(b, hd[1], n, hd[2], "cuda"):to("bfloat16")
      local v = qkv.randn(b, hd[1], n, hd[2], "cuda"):to("bfloat16")
      for _, causal in ipairs{false, true} do
        local f = function() return qkv.attention(q, k, v, {causal = causal, weights = false}) end
        local okv = pcall(f)
        print(("VARIANT %d %d %d %s"):format(hd[2], n, causal and 1 or 0,
          okv and ("%.4f"):format(U.gpu_median_ms(f)) or "-"))
      end
      q, k, v = nil, nil, nil
      collectgarbage()
    end
  end
  return
end

local torch, ceiling = {}, {}
-- --quick: the halves at N 4k and 16k only, no numerics (a short GPU run);
-- --variants: the variant table alone, without torch
local QUICK = arg[1] == "--quick"
local VARIANTS_ONLY = arg[1] == "--variants"
local DTYPES = QUICK and {"bfloat16", "float16"} or {"bfloat16", "float16", "float32"}
local NS = QUICK and {4096, 16384} or {512, 1024, 2048, 4096, 8192, 16384}
local out = ""
if not VARIANTS_ONLY then
  local p = io.popen("python3 " .. quote(here .. "/attention_gpu_torch.py") ..
                     (QUICK and " --quick" or "") .. " 2>&1")
  out = p:read("a")
  p:close()
end
for dt, h, d, n, c, ms in out:gmatch("RESULT (%S+) (%d+) (%d+) (%d+) (%d) (%S+)") do
  torch[table.concat({dt, h, d, n, c}, " ")] = tonumber(ms)
end
for dt, h, d, n, c, ms in out:gmatch("BACKWARD (%S+) (%d+) (%d+) (%d+) (%d) (%S+)") do
  torch[table.concat({dt, h, d, n, c, "bwd"}, " ")] = tonumber(ms)
end
for k, v in out:gmatch("CEILING (%S+) (%S+)") do ceiling[k] = v end
if not next(torch) and not VARIANTS_ONLY then
  print("attention_gpu: torch: " .. out:gsub("\n$", ""))
end

local median_ms = U.gpu_median_ms

-- the tensor-core forward in each variant, a process each (--variant-child)
local VARIANTS = {"r16k64", "r32k32", "r32k64", "r32k128"}
local function variant_table()
  if os.getenv("QKV_CUDA_MMA_SYNC") then     -- every variant would be the one-stage kernel
    print("attention_gpu: the variant table: skipped under QKV_CUDA_MMA_SYNC\n")
    return
  end
  local exe = arg[-1] or "qkv"
  local t, check, cols = {}, {}, {"default"}
  for _, v in ipairs(VARIANTS) do cols[#cols + 1] = v end
  for _, v in ipairs(cols) do
    local pv = io.popen(("QKV_CUDA_MMA_VARIANT=%s %s %s --variant-child 2>&1"):format(
      v == "default" and "" or v, quote(exe), quote(arg[0])))
    local text = pv:read("a")
    pv:close()
    for d, c, e in text:gmatch("VCHECK (%d+) (%d) (%S+)") do check[table.concat({v, d, c}, " ")] = e end
    for d, n, c, ms in text:gmatch("VARIANT (%d+) (%d+) (%d) (%S+)") do
      t[table.concat({v, d, n, c}, " ")] = tonumber(ms)
    end
    if not text:find("VARIANT") then print(("attention_gpu: variant %s: %s"):format(v, text)) end
  end
  print(("attention_gpu: %s; the tensor-core forward by QKV_CUDA_MMA_VARIANT (default: unset), "
         .. "bfloat16, TFLOP/s (ms), each a process of its own; rows \"check\": relative RMS "
         .. "difference from the float32 kernel"):format(qkv.cuda.device_name()))
  print("| heads x d | N | causal | " .. table.concat(cols, " | ") .. " | torch SDPA |")
  print("|" .. (" --- |"):rep(#cols + 4))
  for _, hd in ipairs(VHD) do
    local h, d = hd[1], hd[2]
    for _, c in ipairs{0, 1} do
      local row = {}
      for i, v in ipairs(cols) do row[i] = check[table.concat({v, d, c}, " ")] or "-" end
      print(("| %d x %d | 1024: check | %s | %s | - |"):format(h, d, c == 1 and "yes" or "no",
        table.concat(row, " | ")))
    end
    for _, n in ipairs(VNS) do
      for _, c in ipairs{0, 1} do
        local flops = 4 * (16384 // n) * h * n * n * d / (c == 1 and 2 or 1)
        local row = {}
        for i, v in ipairs(cols) do
          local ms = t[table.concat({v, d, n, c}, " ")]
          row[i] = ms and ("%.1f (%.3f)"):format(flops / ms / 1e9, ms) or "-"
        end
        local tms = torch[table.concat({"bfloat16", h, d, n, c}, " ")]
        print(("| %d x %d | %d | %s | %s | %s |"):format(h, d, n, c == 1 and "yes" or "no",
          table.concat(row, " | "), tms and ("%.1f"):format(flops / tms / 1e9) or "-"))
      end
    end
  end
  print()
end
if VARIANTS_ONLY then variant_table() return end

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
variant_table()

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
