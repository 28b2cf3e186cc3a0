-- attention_gpu.lua -- qkv.attention on the GPU against PyTorch's
-- scaled_dot_product_attention on the same GPU (bench/attention_gpu_torch.py,
-- the python3 on PATH), in one command:
--
--   build/qkv bench/attention_gpu.lua [--quick] [--fp32]   (on a GPU machine; docs/cuda.md)
--
-- Each case on each of qkv's half-precision paths (qkv.cuda.attention_backend):
-- "auto", what a script gets (cuDNN's fused attention where the plugin has
-- it, vm/cuda/cudnn.cpp), and "mma", qkv's own tensor-core kernels forced
-- (vm/cuda/attention_mma.cu); the column says which ran.
--
-- 1. Numerics: B 1, N 1024, both head shapes, causal and not; each dtype's
--    inputs rounded from one float64 draw (saved as safetensors for torch
--    to read); max and RMS error of out, and RMS error of dQ, dK, dV,
--    against float64 on the CPU, beside torch's on the same inputs.
-- 2. Forward, and 3. forward + backward: 16k tokens per case (B = 16384 / N
--    sequences of N), hidden 2048 as 16 heads of 128 and 32 of 64, N from
--    512 to 16k, causal and not, bfloat16 and float16 (--fp32 adds float32's
--    forward, TF32 off). qkv's times are medians (20 after 5 warm-ups
--    forward, 10 after 3 with the backward), each run ended by
--    qkv.cuda.synchronize() on the host's clock; torch's are CUDA events.
--    FLOPs: 4 B H N^2 d forward, 10 B H N^2 d backward (FlashAttention-2's
--    count), halved when causal.
-- Prints markdown tables for bench/RESULTS.md, with the ceilings torch
-- measures (a device-to-device copy, a bf16 GEMM). --quick: N 4k and 16k,
-- no numerics; --tiny: a dry run (below).

io.stdout:setvbuf("line")            -- a step killed at its limit keeps its rows
local ok, why = qkv.cuda_available()
if not ok then print("attention_gpu: no GPU (" .. why .. "); skipped") return end
require "qkv.autograd"
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local U = dofile(here .. "/lib/timing.lua")
local quote, median_ms = U.quote, U.gpu_median_ms
local flag = {}
for _, a in ipairs(arg) do flag[a] = true end
-- --tiny: 256 tokens, N 64 and 128, a dry run of this script on the host
-- simulation (QKV_CUDA_PLUGIN=build/simcuda.so), whose times mean nothing
local QUICK, TINY = flag["--quick"], flag["--tiny"]
local NS = TINY and {64, 128} or QUICK and {4096, 16384} or {512, 1024, 2048, 4096, 8192, 16384}
local TOKENS, NNUM = TINY and 256 or 16384, TINY and 96 or 1024
local HALVES, SHAPES = {"bfloat16", "float16"}, {{16, 128}, {32, 64}}

-- torch's side first, all of it (its rows keyed "dtype heads d N causal [bwd]")
local torch, ceiling = {}, {}
local p = io.popen("python3 " .. quote(here .. "/attention_gpu_torch.py") ..
                   (QUICK and " --quick" or "") .. (flag["--fp32"] and " --fp32" or "") ..
                   (TINY and " --tiny" or "") .. " 2>&1")
local out = p:read("a")
p:close()
for kind, dt, h, d, n, c, ms in out:gmatch("(%u+) (%S+) (%d+) (%d+) (%d+) (%d) (%S+)") do
  if kind == "RESULT" or kind == "BACKWARD" then
    torch[table.concat({dt, h, d, n, c}, " ") .. (kind == "BACKWARD" and " bwd" or "")] = tonumber(ms)
  end
end
for k, v in out:gmatch("CEILING (%S+) (%S+)") do ceiling[k] = v end
if not next(torch) then print("attention_gpu: torch: " .. out:gsub("\n$", "")) end

-- runs f with path forced ("auto": none), then back to auto; the path that ran
local function on(path, f)
  qkv.cuda.attention_backend(path)
  local okf, r = pcall(f)
  local ran = qkv.cuda.attention_backend("auto")
  if not okf then error(r, 0) end
  return ran, r
end
-- qkv's paths here: auto, and mma where auto is another
local PATHS = {"auto"}
do
  local x = qkv.randn(1, 1, 64, 64, "cuda"):to("bfloat16")
  if on("auto", function() return qkv.attention(x, x, x, {weights = false}) end) ~= "mma" then
    PATHS[2] = "mma"
  end
end

---------------------------------------------------------------- numerics
local function errs(got, want)
  local d = (got:cpu():double() - want):abs()
  return d:max():item(), math.sqrt((d * d):mean():item())
end
local function grads(q, k, v, g, causal)
  local x, y, z = q:detach():requires_grad_(), k:detach():requires_grad_(), v:detach():requires_grad_()
  local o = qkv.attention(x, y, z, {causal = causal, weights = false})
  o:backward(g)
  return o, x.grad, y.grad, z.grad
end
if not QUICK then
  print("numerics: B 1, N 1024; errors against float64 (out max, RMS; gradients RMS)")
  print("| dtype | heads x d | causal | path | out max | out RMS | dQ RMS | dK RMS | dV RMS | worst RMS / torch's |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
  local tmp = os.tmpname()
  qkv.seed(2)
  for _, dt in ipairs(HALVES) do
    for _, hd in ipairs(SHAPES) do
      local function draw() return qkv.randn(1, hd[1], NNUM, hd[2]):to(dt) end
      local q, k, v, g = draw(), draw(), draw(), draw()
      qkv.save_safetensors(tmp, {q = q, k = k, v = v, g = g})
      local ref = {}
      local pn = io.popen(("python3 %s --numerics %s %s %d %d 2>&1"):format(
        quote(here .. "/attention_gpu_torch.py"), quote(tmp), dt, hd[1], hd[2]))
      for line in pn:lines() do
        local c, rest = line:match("^NUMERICS %S+ %d+ %d+ (%d) (.*)$")
        if c then
          ref[c] = {}
          for x in rest:gmatch("%S+") do ref[c][#ref[c] + 1] = tonumber(x) end
        end
      end
      pn:close()
      for _, causal in ipairs{false, true} do
        local want = {grads(q:double(), k:double(), v:double(), g:double(), causal)}
        local rows = {}
        for _, path in ipairs(PATHS) do
          local ran, got = on(path, function()
            return {grads(q:cuda(), k:cuda(), v:cuda(), g:cuda(), causal)}
          end)
          local e = {errs(got[1], want[1])}
          for i = 2, 4 do e[#e + 1] = select(2, errs(got[i], want[i])) end
          rows[#rows + 1] = {ran, e}
        end
        local t = ref[causal and "1" or "0"]
        if t then rows[#rows + 1] = {"torch", t} end
        for _, r in ipairs(rows) do
          local e, worst = r[2], 0
          for i = 2, 5 do if t and t[i] then worst = math.max(worst, e[i] / t[i]) end end
          print(("| %s | %d x %d | %s | %s | %.2e | %.2e | %.2e | %.2e | %.2e | %s |"):format(dt,
            hd[1], hd[2], causal and "yes" or "no", r[1], e[1], e[2], e[3], e[4], e[5],
            t and ("%.2f"):format(worst) or "-"))
        end
      end
    end
  end
  os.remove(tmp)
  print()
end

---------------------------------------------------------------- speed
local function head(title, cols)
  print(("attention_gpu: %s; %s"):format(qkv.cuda.device_name(), title))
  local h, sep = {"dtype", "heads x d", "N", "causal"}, {}
  for _, c in ipairs(cols) do h[#h + 1] = c end
  for i = 1, #h do sep[i] = "---" end
  print("| " .. table.concat(h, " | ") .. " |")
  print("| " .. table.concat(sep, " | ") .. " |")
end
local function cols()
  local c = {}
  for _, path in ipairs(PATHS) do c[#c + 1] = "qkv " .. path end
  c[#c + 1] = "torch SDPA"
  for _, path in ipairs(PATHS) do c[#c + 1] = path .. "/torch" end
  return c
end

-- one table: per case, each path's TFLOP/s (ms) and what ran, torch's, the ratios
local function table_of(dtypes, backward)
  local runs = backward and {3, 10} or {5, 20}
  for _, dt in ipairs(dtypes) do
    for _, hd in ipairs(SHAPES) do
      local h, d = hd[1], hd[2]
      for _, n in ipairs(NS) do
        local b = TOKENS // n
        local function draw() return qkv.randn(b, h, n, d, "cuda"):to(dt) end
        local q, k, v, g = draw(), draw(), draw(), backward and draw() or nil
        if backward then q:requires_grad_(); k:requires_grad_(); v:requires_grad_() end
        for _, causal in ipairs{false, true} do
          local flops = (backward and 14 or 4) * b * h * n * n * d / (causal and 2 or 1)
          local cells, ratios = {}, {}
          local tms = torch[table.concat({dt, h, d, n, causal and 1 or 0}, " ") ..
                            (backward and " bwd" or "")]
          for _, path in ipairs(dt == "float32" and {"auto"} or PATHS) do
            local ran, ms = on(path, function()
              return median_ms(function()
                if not backward then return qkv.attention(q, k, v, {causal = causal, weights = false}) end
                q.grad, k.grad, v.grad = nil, nil, nil
                qkv.attention(q, k, v, {causal = causal, weights = false}):backward(g)
                return q.grad
              end, runs[1], runs[2])
            end)
            cells[#cells + 1] = ("%.1f (%.3f) %s"):format(flops / ms / 1e9, ms, ran)
            ratios[#ratios + 1] = tms and ("%.2f"):format(tms / ms) or "-"
          end
          if dt == "float32" then
            for _ = 2, #PATHS do cells[#cells + 1] = "-"; ratios[#ratios + 1] = "-" end
          end
          cells[#cells + 1] = tms and ("%.1f (%.3f)"):format(flops / tms / 1e9, tms) or "-"
          for _, r in ipairs(ratios) do cells[#cells + 1] = r end
          print(("| %s | %d x %d | %d | %s | %s |"):format(dt, h, d, n, causal and "yes" or "no",
                                                         table.concat(cells, " | ")))
        end
        q, k, v, g = nil, nil, nil, nil
        collectgarbage()
      end
    end
  end
  print()
end

qkv.seed(1)
head("forward, TFLOP/s of 4 B H N^2 d (ms) and the path that ran", cols())
local fwd = {table.unpack(HALVES)}
if flag["--fp32"] then fwd[#fwd + 1] = "float32" end
table_of(fwd, false)
head("forward + backward, TFLOP/s of 14 B H N^2 d (ms) and the path that ran", cols())
table_of(HALVES, true)
print(("ceilings (torch): copy %s GB/s, bf16 GEMM 8192^3 %s TFLOP/s"):format(
  ceiling.copy_gbs or "-", ceiling.bf16_gemm_tflops or "-"))
