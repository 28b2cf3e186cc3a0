-- attention_gpu.lua -- qkv.attention on the GPU against PyTorch's
-- scaled_dot_product_attention on the same GPU (bench/attention_gpu_torch.py,
-- the python3 on PATH), in one command:
--
--   build/qkv bench/attention_gpu.lua [--quick] [--fp32]   (on a GPU machine; docs/cuda.md)
--
-- Each case on each of qkv's half-precision paths (qkv.cuda.attention_backend):
-- "auto", what a script gets (cuDNN's fused attention where the plugin has
-- it, vm/cuda/cudnn.cpp), "mma", qkv's own tensor-core kernels forced
-- (vm/cuda/attention_mma.cu), and "wgmma", the Hopper forward forced
-- (vm/cuda/attention_wgmma.cu; its backward is mma's); the column says
-- which ran.
--
-- 1. Numerics: B 1, N 1024, both head shapes, causal and not; each dtype's
--    inputs rounded from one float64 draw (saved as safetensors for torch
--    to read); max and RMS error of out, and RMS error of dQ, dK, dV,
--    against float64 on the CPU, beside torch's on the same inputs.
-- 2. Forward, and 3. forward + backward: 16k tokens per case (B = 16384 / N
--    sequences of N), hidden 2048 as 16 heads of 128 and 32 of 64, N from
--    512 to 16k, causal and not, bfloat16 and float16 (--fp32 adds float32's
--    forward, TF32 off). qkv's times are medians (20 after 5 warm-ups
--    forward, 10 after 3 with the backward), each run between two CUDA
--    events (qkv.cuda.Event), as torch's are; the last column is the auto
--    path's median on the host's clock around the same runs (from before
--    the first event to the end of the wait: its host work and wake-up).
--    FLOPs: 4 B H N^2 d forward, 10 B H N^2 d backward (FlashAttention-2's
--    count), halved when causal.
-- 4. The tensor-core forward in each variant (QKV_CUDA_MMA_VARIANT: rows a
--    warp and keys a tile, vm/cuda/attention_mma.cu), the mma path forced,
--    each in a process of its own (this script again, --variant-child):
--    bfloat16, both head shapes, N 1k, 4k and 16k, causal and not, TFLOP/s
--    beside the default's (the variable unset, a process too) and SDPA's;
--    and each one's relative RMS difference from the float32 kernel at
--    N 1024 ("check" rows). About 15 s; --variants prints it alone.
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
local VNS = TINY and {64, 128} or {1024, 4096, 16384}          -- the variants' N

-- --variant-child: the mma path forced, in this process's variant
-- (QKV_CUDA_MMA_VARIANT, set by the parent): "VCHECK d causal rel" (the
-- relative RMS difference from the float32 kernel on the same inputs, N
-- NNUM, B 1), then "VARIANT d N causal ms" (medians of 20 after 5
-- warm-ups, one run with --tiny); "-" where the variant is not built for d
if flag["--variant-child"] then
  qkv.cuda.attention_backend("mma")
  qkv.seed(5)
  local function try(f)
    local okf, r = pcall(f)
    if not okf and not tostring(r):find("QKV_CUDA_MMA_VARIANT") then error(r, 0) end
    return okf and r
  end
  for _, hd in ipairs(SHAPES) do
    local function draw() return qkv.randn(1, hd[1], NNUM, hd[2], "cuda"):to("bfloat16") end
    local q, k, v = draw(), draw(), draw()
    for _, causal in ipairs{false, true} do
      local o = {causal = causal, weights = false}
      local got = try(function() return qkv.attention(q, k, v, o) end)
      local e = "-"
      if got then
        local want = qkv.attention(q:float(), k:float(), v:float(), o)
        local dd = got:float() - want
        e = ("%.3e"):format(math.sqrt((dd * dd):sum():item() / (want * want):sum():item()))
      end
      print(("VCHECK %d %d %s"):format(hd[2], causal and 1 or 0, e))
    end
  end
  for _, hd in ipairs(SHAPES) do
    for _, n in ipairs(VNS) do
      local function draw() return qkv.randn(TOKENS // n, hd[1], n, hd[2], "cuda"):to("bfloat16") end
      local q, k, v = draw(), draw(), draw()
      for _, causal in ipairs{false, true} do
        local f = function() return qkv.attention(q, k, v, {causal = causal, weights = false}) end
        local ms = try(function() return median_ms(f, TINY and 1 or 5, TINY and 1 or 20) end)
        print(("VARIANT %d %d %d %s"):format(hd[2], n, causal and 1 or 0,
                                             ms and ("%.4f"):format(ms) or "-"))
      end
      q, k, v = nil, nil, nil
      collectgarbage()
    end
  end
  return
end

-- torch's side first, all of it (its rows keyed "dtype heads d N causal [bwd]")
local torch, ceiling = {}, {}
local out = ""
if not flag["--variants"] then
  local p = io.popen("python3 " .. quote(here .. "/attention_gpu_torch.py") ..
                     (QUICK and " --quick" or "") .. (flag["--fp32"] and " --fp32" or "") ..
                     (TINY and " --tiny" or "") .. " 2>&1")
  out = p:read("a")
  p:close()
end
for kind, dt, h, d, n, c, ms in out:gmatch("(%u+) (%S+) (%d+) (%d+) (%d+) (%d) (%S+)") do
  if kind == "RESULT" or kind == "BACKWARD" then
    torch[table.concat({dt, h, d, n, c}, " ") .. (kind == "BACKWARD" and " bwd" or "")] = tonumber(ms)
  end
end
for k, v in out:gmatch("CEILING (%S+) (%S+)") do ceiling[k] = v end
if not next(torch) and not flag["--variants"] then
  print("attention_gpu: torch: " .. out:gsub("\n$", ""))
end

-- runs f with path forced ("auto": none), then back to auto; the path that ran
local function on(path, f)
  qkv.cuda.attention_backend(path)
  local r = table.pack(pcall(f))
  local ran = qkv.cuda.attention_backend("auto")
  if not r[1] then error(r[2], 0) end
  return ran, table.unpack(r, 2, r.n)
end
-- qkv's paths here: auto, mma where auto is another, and wgmma (the
-- Hopper forward, taken only when forced) where the device takes it
local PATHS = {"auto"}
do
  local x = qkv.randn(1, 1, 64, 64, "cuda"):to("bfloat16")
  local function attn() return qkv.attention(x, x, x, {weights = false}) end
  if on("auto", attn) ~= "mma" then PATHS[#PATHS + 1] = "mma" end
  if pcall(on, "wgmma", attn) then PATHS[#PATHS + 1] = "wgmma" end
end

---------------------------------------------------------------- variants
-- 4.: each variant a process (--variant-child), beside the default's
local VARIANTS = {"r16k64", "r32k32", "r32k64", "r32k128"}
local function variant_table()
  if os.getenv("QKV_CUDA_MMA_SYNC") then     -- every variant would be the one-stage kernel
    print("attention_gpu: the variant table: skipped under QKV_CUDA_MMA_SYNC\n")
    return
  end
  local t, check, vcols = {}, {}, {"default"}
  for _, v in ipairs(VARIANTS) do vcols[#vcols + 1] = v end
  for _, v in ipairs(vcols) do
    local pv = io.popen(("QKV_CUDA_MMA_VARIANT=%s %s %s --variant-child%s 2>&1"):format(
      v == "default" and "" or v, quote(arg[-1] or "qkv"), quote(arg[0]), TINY and " --tiny" or ""))
    local text = pv:read("a")
    pv:close()
    for d, c, e in text:gmatch("VCHECK (%d+) (%d) (%S+)") do check[table.concat({v, d, c}, " ")] = e end
    for d, n, c, ms in text:gmatch("VARIANT (%d+) (%d+) (%d) (%S+)") do
      t[table.concat({v, d, n, c}, " ")] = tonumber(ms)
    end
    if not text:find("VARIANT") then print(("attention_gpu: variant %s: %s"):format(v, text)) end
  end
  print(("attention_gpu: %s; the tensor-core forward (mma forced) by QKV_CUDA_MMA_VARIANT "
         .. "(default: unset), bfloat16, TFLOP/s (ms), each a process of its own; rows "
         .. "\"check\": relative RMS difference from the float32 kernel"):format(
         qkv.cuda.device_name()))
  print("| heads x d | N | causal | " .. table.concat(vcols, " | ") .. " | torch SDPA |")
  print("|" .. (" --- |"):rep(#vcols + 4))
  for _, hd in ipairs(SHAPES) do
    local h, d = hd[1], hd[2]
    for _, c in ipairs{0, 1} do
      local row = {}
      for i, v in ipairs(vcols) do row[i] = check[table.concat({v, d, c}, " ")] or "-" end
      print(("| %d x %d | %d: check | %s | %s | - |"):format(h, d, NNUM, c == 1 and "yes" or "no",
        table.concat(row, " | ")))
    end
    for _, n in ipairs(VNS) do
      for _, c in ipairs{0, 1} do
        local flops = 4 * (TOKENS // n) * h * n * n * d / (c == 1 and 2 or 1)
        local row = {}
        for i, v in ipairs(vcols) do
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
if flag["--variants"] then variant_table() return end

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
  c[#c + 1] = "auto, host clock (ms)"
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
          local cells, ratios, host = {}, {}, "-"
          local tms = torch[table.concat({dt, h, d, n, causal and 1 or 0}, " ") ..
                            (backward and " bwd" or "")]
          for _, path in ipairs(dt == "float32" and {"auto"} or PATHS) do
            local ran, ms, hms = on(path, function()
              return median_ms(function()
                if not backward then return qkv.attention(q, k, v, {causal = causal, weights = false}) end
                q.grad, k.grad, v.grad = nil, nil, nil
                qkv.attention(q, k, v, {causal = causal, weights = false}):backward(g)
                return q.grad
              end, runs[1], runs[2])
            end)
            cells[#cells + 1] = ("%.1f (%.3f) %s"):format(flops / ms / 1e9, ms, ran)
            if path == "auto" then host = ("%.3f"):format(hms) end
            ratios[#ratios + 1] = tms and ("%.2f"):format(tms / ms) or "-"
          end
          if dt == "float32" then
            for _ = 2, #PATHS do cells[#cells + 1] = "-"; ratios[#ratios + 1] = "-" end
          end
          cells[#cells + 1] = tms and ("%.1f (%.3f)"):format(flops / tms / 1e9, tms) or "-"
          for _, r in ipairs(ratios) do cells[#cells + 1] = r end
          cells[#cells + 1] = host
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
variant_table()
head("forward + backward, TFLOP/s of 14 B H N^2 d (ms) and the path that ran", cols())
table_of(HALVES, true)
print(("ceilings (torch): copy %s GB/s, bf16 GEMM 8192^3 %s TFLOP/s"):format(
  ceiling.copy_gbs or "-", ceiling.bf16_gemm_tflops or "-"))
