-- cuda.lua -- qkv on the GPU against PyTorch on the same GPU
-- (bench/cuda_torch.py, the python3 on PATH): the seed-sized step (project
-- to Q, K, V, scores, softmax, weights @ V on 6 tokens of 16), float32
-- fused attention at B = 1, H = 8, d = 64 and N = 1k, 4k, 16k (causal and
-- not), bfloat16 elementwise ops and a row sum at 4096 x 4096, and the
-- cost of the first x:cuda() in a fresh process (loading the
-- plugin, cudart and cuBLAS, and making the context). Times are medians of
-- 20 runs after 5 warm-ups, each between two CUDA events (qkv.cuda.Event),
-- as torch's are. FLOPs: 4 B H N^2 d, halved when causal.
--
--   build/qkv bench/cuda.lua            (run by `make bench`; says why it skips)

local ok, why = qkv.cuda_available()
if not ok then print("cuda: no GPU (" .. why .. "); skipped") return end
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local U = dofile(here .. "/lib/timing.lua")
local exe = arg[-1] or "build/qkv"
local quote = U.quote

local median_ms = U.gpu_median_ms

-- the first x:cuda() of a fresh process, from inside it
local p = io.popen(quote(exe) .. " -e " .. quote(
  "local t = qkv.clock(); qkv.ones(1):cuda(); io.write(qkv.clock() - t)"))
local first = tonumber(p:read("a"))
p:close()

local torch = {}
p = io.popen("python3 " .. quote(here .. "/cuda_torch.py") .. " 2>&1")
local out = p:read("a")
p:close()
for name, ms in out:gmatch("RESULT (%S+) (%S+)") do torch[name] = tonumber(ms) end
if not next(torch) then print("cuda: torch: " .. out:gsub("\n$", "")) end

local rows = {}
local function row(name, ms, flops)
  rows[#rows + 1] = {name, ms, torch[name], flops}
end

qkv.seed(1)
local x = qkv.randn(6, 16, "cuda")
local w = {qkv.randn(16, 16, "cuda"), qkv.randn(16, 16, "cuda"), qkv.randn(16, 16, "cuda")}
row("seed_step", median_ms(function()
  local q, k, v = qkv.project(x, w[1]), qkv.project(x, w[2]), qkv.project(x, w[3])
  return qkv.softmax(qkv.scores(q, k), -1):matmul(v)
end))
for _, n in ipairs{1024, 4096, 16384} do
  local q, k, v = qkv.randn(1, 8, n, 64, "cuda"), qkv.randn(1, 8, n, 64, "cuda"),
                  qkv.randn(1, 8, n, 64, "cuda")
  for _, causal in ipairs{false, true} do
    local name = ("attention_%d_%s"):format(n, causal and "causal" or "full")
    local flops = 4 * 8 * n * n * 64 / (causal and 2 or 1)
    row(name, median_ms(function()
      return qkv.attention(q, k, v, {causal = causal, weights = false})
    end), flops)
  end
end

-- bfloat16 elementwise ops and a row sum, 4096 x 4096 (32 MB a tensor):
-- one kernel each, the halves read as float32 where they lie; memory
-- bound (an add moves 96 MB: ~20 us at an H200's 4.8 TB/s)
do
  local a, b = qkv.randn(4096, 4096, "cuda"):bfloat16(), qkv.randn(4096, 4096, "cuda"):bfloat16()
  local c = qkv.randn(4096, 4096, "cuda")
  row("bf16_add", median_ms(function() return a + b end))
  row("bf16_plus_f32", median_ms(function() return a + c end))
  row("bf16_gelu", median_ms(function() return qkv.gelu(a) end))
  row("bf16_sum_rows", median_ms(function() return a:sum(2) end))
end

print(("cuda: %s, float32, TF32 off; medians of 20 (ms)"):format(qkv.cuda.device_name()))
print(("%-24s %10s %10s %10s %10s"):format("", "qkv", "torch", "qkv/torch", "qkv TFLOP/s"))
for _, r in ipairs(rows) do
  print(("%-24s %10.3f %10s %10s %10s"):format(r[1], r[2], r[3] and ("%.3f"):format(r[3]) or "-",
    r[3] and ("%.2f"):format(r[3] / r[2]) or "-", r[4] and ("%.1f"):format(r[4] / r[2] / 1e9) or "-"))
end
print(("first x:cuda() in a fresh process: %.0f ms (plugin, cudart, cuBLAS, context)"):format(first * 1e3))
