-- variants_gpu.lua -- attention variants (issue 48) on the GPU: qkv.attention
-- with a block mask or a score_mod (weights = false: the program compiled
-- into the tiled float32 kernel, vm/cuda/mods.cu) against PyTorch's compiled
-- flex_attention on the same GPU (bench/variants_gpu_torch.py, the python3
-- on PATH), and qkv's and SDPA's dense attention. B 1, H 8, d 64, float32;
-- the cases of bench/variants.lua (the CPU's): sliding (window 256, causal),
-- document (4 equal documents), alibi, softcap 20. ms: medians of 20 calls
-- between CUDA events after 3 warm-ups; first: the first call from nothing
-- built (block mask, NVRTC's or inductor's compile, run), in s. On a GPU
-- machine:
--
--   build/qkv bench/variants_gpu.lua [fwdbwd]    (VARIANTS_GPU_TINY=1: N 256 alone, a dry run)
io.stdout:setvbuf("line")
local ok, why = qkv.cuda_available()
if not ok then print("variants_gpu: no GPU (" .. tostring(why) .. "); skipped") return end
local H, D, WINDOW, DOCS, CAP = 8, 64, 256, 4, 20
local mode = arg[1] == "fwdbwd" and "fwdbwd" or "fwd"
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
  local p = io.popen(("python3 %s/variants_gpu_torch.py %d %s %s 2>&1"):format(here, n, variant, mode))
  local out = p:read("a")
  p:close()
  local ms, first = out:match("RESULT (%S+) (%S+)")
  return tonumber(ms), tonumber(first), out:match("SKIP [^\n]*")
end

print(("variants_gpu: B 1, H %d, d %d, float32, %s; ms (medians of 20 between CUDA events), first call in s")
      :format(H, D, mode))
print(("%-9s %6s %9s %9s %8s %8s %8s %9s %9s  %s"):format("case", "N", "qkv", "flex", "flex/x",
      "x/dense", "first", "flex 1st", "sdpa", "path"))
for _, n in ipairs(os.getenv("VARIANTS_GPU_TINY") and {256} or {1024, 4096, 16384}) do
  qkv.seed(1)
  local q, k, v = qkv.randn(1, H, n, D):cuda(), qkv.randn(1, H, n, D):cuda(), qkv.randn(1, H, n, D):cuda()
  local g = qkv.randn(1, H, n, D):cuda()
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
