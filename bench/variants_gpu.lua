-- variants_gpu.lua -- attention variants (issue 48) on the GPU: qkv.attention
-- with a block mask or a score_mod (weights = false: the program compiled
-- into the tiled float32 kernel, vm/cuda/mods.cu) against PyTorch's compiled
-- flex_attention on the same GPU (bench/variants_gpu_torch.py, the python3
-- on PATH), and qkv's and SDPA's dense attention. B 1, H 8, d 64, float32;
-- the cases of bench/variants.lua (the CPU's): sliding (window 256, causal),
-- document (4 equal documents), alibi, softcap 20. ms: medians of 20 calls
-- between CUDA events after 3 warm-ups; first: the first call from nothing
-- built (block mask, NVRTC's or inductor's compile, run), in s. bfloat16 or
-- float16: q, k, v of that dtype on both sides (qkv's forward then the
-- program compiled into the tensor-core kernel, vm/cuda/attention_mma_kernel.cuh;
-- QKV_CUDA_MMA_VARIANT picks its tiles). On a GPU machine:
--
--   build/qkv bench/variants_gpu.lua [fwdbwd] [bfloat16|float16]
--       (VARIANTS_GPU_TINY=1: N 256 alone, a dry run)
io.stdout:setvbuf("line")
local ok, why = qkv.cuda_available()
if not ok then print("variants_gpu: no GPU (" .. tostring(why) .. "); skipped") return end
local H, D, WINDOW, DOCS, CAP = 8, 64, 256, 4, 20
local mode, DT = "fwd", "float32"
for _, a in ipairs(arg) do
  if a == "fwdbwd" then mode = a
  elseif a == "bfloat16" or a == "float16" then DT = a
  else error("variants_gpu: unknown argument '" .. a .. "' (fwdbwd, bfloat16, float16)", 0) end
end
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local V = qkv.variants
local said                                       -- the peer's skip, said once

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")   -- its GPU medians
local function median(f) return (U.gpu_median_ms(f, 3, 20)) end

local function options(variant, n)
  if variant == "sliding" then
    return {block_mask = qkv.block_mask(V.sliding_window(WINDOW, {causal = true}), nil, nil, n, n)}
  elseif variant == "document" then
    local len = {}
    for d = 1, DOCS do len[d] = n // DOCS end
    return {block_mask = qkv.block_mask(V.document_lengths(len), nil, nil, n, n)}
  elseif variant == "alibi" then
    return {score_mod = V.alibi(qkv.alibi_slopes(H):cuda())}
  elseif variant == "softcap" then
    return {score_mod = V.softcap(CAP)}
  end
  return {}
end

local function peer(n, variant)
  local p = io.popen(("python3 %s/variants_gpu_torch.py %d %s %s %s 2>&1"):format(here, n, variant,
                                                                               mode, DT))
  local out = p:read("a")
  p:close()
  local ms, first = out:match("RESULT (%S+) (%S+)")
  return tonumber(ms), tonumber(first), out:match("SKIP [^\n]*")
end

print(("variants_gpu: B 1, H %d, d %d, %s, %s; ms (medians of 20 between CUDA events), first call in s")
      :format(H, D, DT, mode))
print(("%-9s %6s %9s %9s %8s %8s %8s %9s %9s  %s"):format("case", "N", "qkv", "flex", "flex/x",
      "x/dense", "first", "flex 1st", "sdpa", "path"))
for _, n in ipairs(os.getenv("VARIANTS_GPU_TINY") and {256} or {1024, 4096, 16384}) do
  qkv.seed(1)
  local q, k, v = qkv.randn(1, H, n, D):cuda():to(DT), qkv.randn(1, H, n, D):cuda():to(DT),
                  qkv.randn(1, H, n, D):cuda():to(DT)
  local g = qkv.randn(1, H, n, D):cuda():to(DT)
  if mode == "fwdbwd" then q:requires_grad_(); k:requires_grad_(); v:requires_grad_() end
  local dense
  for _, variant in ipairs{"dense", "sliding", "document", "alibi", "softcap"} do
    local t0 = qkv.clock()
    local opts = options(variant, n)
    opts.weights = false
    local function once()
      local out = qkv.attention(q, k, v, opts)
      if mode == "fwdbwd" then
        out:backward(g)
        q.grad, k.grad, v.grad = nil, nil, nil
      end
      return out
    end
    once()
    qkv.cuda.synchronize()
    local first = qkv.clock() - t0
    local path = qkv.cuda.attention_backend()
    local t = median(once)
    dense = dense or t
    local fm, ff, skip = peer(n, variant)
    local sdpa = variant == "dense" and fm
    print(("%-9s %6d %9.3f %9s %8s %8.2f %8.3f %9s %9s  %s"):format(variant, n, t,
          (variant ~= "dense" and fm) and ("%.3f"):format(fm) or "-",
          (variant ~= "dense" and fm) and ("%.2f"):format(fm / t) or "-", t / dense, first,
          (variant ~= "dense" and ff) and ("%.2f"):format(ff) or "-",
          sdpa and ("%.3f"):format(sdpa) or "-", path))
    if skip and not said then print("  (the peer: " .. skip .. ")") said = true end
  end
end
