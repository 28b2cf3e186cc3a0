-- variants.lua -- attention variants (issue 48): qkv.attention with
-- mask_mod, score_mod and a block mask (weights = false: the fused kernel)
-- against PyTorch's compiled flex_attention and SDPA (bench/variants_torch.py,
-- run by the peer python of bench/lib/timing.lua) in the same run.
-- B = 1, H = 8, d = 64, float32, 2 threads on both sides.
--
-- Cases (the same on both sides; i, j the query and key from 1):
--   dense     plain attention (qkv: no mod; torch: SDPA, and flex with no mod)
--   sliding   window 256, causal: keeps i - 256 < j <= i
--   document  4 equal documents (packed sequences), not causal
--   alibi     score + slope[h] (j - i), slopes 2^(-8h/H), not causal
--   softcap   20 tanh(score / 20)
-- torch's columns: flex (torch.compile(flex_attention), BlockMask from
-- create_block_mask; warm calls, and the first call with its compile as a
-- column of its own), sdpa_mask (SDPA with the mask as a bool tensor, ALiBi
-- as a float bias; softcap has no such form), sdpa (dense SDPA, no mask: the
-- baseline).  Rates count the useful (query, key) pairs only: 4 d H FLOPs a
-- pair forward, 14 d H forward and backward (bench/attention_backward.lua's
-- five products on top).  Every case runs in a fresh process, so that its
-- first call and its peak resident memory (VmHWM) are its own.
--
--   build/qkv bench/variants.lua [N ...] [idle|busy|both] [quick] [warm-cache] [notorch]
--       N: 4096 16384 unless given; idle (default) or with `yes > /dev/null`
--       beside both sides (busy), as bench/train.lua; quick: N 1024, short
--       timing, the memory case at N 4096, torch's inductor cache as found;
--       warm-cache: flex's first call may use an inductor cache left by an
--       earlier run (a few s) instead of compiling into a fresh one (20-80 s)
--   build/qkv bench/variants.lua case N VARIANT fwd|fwdbwd [mem]
--       one qkv case: "RESULT seconds gflops peak_mb first_s"
-- The peer: $QKV_BENCH_PYTHON, else build/torch from `make bench-deps`
-- (e.g. QKV_BENCH_PYTHON=/path/to/venv/bin/python build/qkv bench/variants.lua).

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local hwm_mb, best_time = U.hwm_mb, U.best_time

local H, D, THREADS = 8, 64, 2
local WINDOW, DOCS, CAP = 256, 4, 20
local VARIANTS = {"dense", "sliding", "document", "alibi", "softcap"}

-- the (query, key) pairs that take part, per head
local function pairs_of(variant, n)
  if variant == "sliding" then
    local w = math.min(WINDOW, n)
    return w * n - w * (w - 1) // 2          -- row i keeps min(i, w) keys
  elseif variant == "document" then
    return DOCS * (n // DOCS) ^ 2
  end
  return n * n
end

local function flops(variant, n, mode)
  return (mode == "fwdbwd" and 14 or 4) * D * H * pairs_of(variant, n)
end

-- the options of qkv.attention for a variant, block mask built here (so
-- that a case's first call counts it)
local function options(variant, n)
  local V = qkv.variants
  local g
  if variant == "sliding" then
    g = V.sliding_window(WINDOW, {causal = true})
  elseif variant == "document" then
    local len = {}
    for d = 1, DOCS do len[d] = n // DOCS end
    g = V.document_lengths(len)
  elseif variant == "alibi" then
    -- the torch side adds 2^(-8h/H): check that both sides compute the same thing
    local slopes = qkv.alibi_slopes(H)
    for h = 1, H do assert(math.abs(slopes[h] - 2 ^ (-8 * h / H)) < 1e-7, "alibi_slopes") end
    return {score_mod = V.alibi(H), weights = false}
  elseif variant == "softcap" then
    return {score_mod = V.softcap(CAP), weights = false}
  else
    return {weights = false}
  end
  return {block_mask = qkv.block_mask(g, nil, nil, n, n), weights = false}
end

-- child: one qkv case, "RESULT seconds gflops peak_mb first_s"; mem: one
-- call only, for the peak resident memory
local function run_case(n, variant, mode, mem, budget)
  qkv.set_num_threads(THREADS)
  qkv.seed(1)
  local Q, K, V = qkv.randn(1, H, n, D), qkv.randn(1, H, n, D), qkv.randn(1, H, n, D)
  local grad = mode == "fwdbwd"
  local G = grad and qkv.randn(1, H, n, D)
  if grad then Q:requires_grad_(); K:requires_grad_(); V:requires_grad_() end
  local t0 = qkv.clock()
  local opts = options(variant, n)
  local function once()
    local out = qkv.attention(Q, K, V, opts)
    if grad then
      out:backward(G)
      Q.grad, K.grad, V.grad = nil, nil, nil
    end
  end
  once()
  local first = qkv.clock() - t0
  local t = first
  if not mem then
    collectgarbage()
    t = best_time(once, budget)
  end
  print(string.format("RESULT %.6f %.2f %.1f %.4f", t, flops(variant, n, mode) / t / 1e9,
                      hwm_mb(), first))
end

if arg[1] == "case" then
  local n, variant, mode = tonumber(arg[2]), arg[3], arg[4] or "fwd"
  return run_case(n, variant, mode, arg[5] == "mem", tonumber(os.getenv("QKV_BENCH_BUDGET")) or 1.0)
end

---------------------------------------------------------------- the table

local SIZES, LOADS, quick, warm_cache, use_torch = {}, {"idle"}, false, false, true
for _, a in ipairs(arg) do
  if tonumber(a) then SIZES[#SIZES + 1] = math.tointeger(tonumber(a))
  elseif a == "idle" or a == "busy" then LOADS = {a}
  elseif a == "both" then LOADS = {"idle", "busy"}
  elseif a == "quick" then quick = true
  elseif a == "warm-cache" then warm_cache = true
  elseif a == "notorch" then use_torch = false
  else error("bench/variants.lua: unknown argument '" .. a .. "' (see the head of the file)", 0) end
end
if #SIZES == 0 then SIZES = quick and {1024} or {4096, 16384} end
local MEM_N = quick and 4096 or 65536
local BUDGET = quick and 0.2 or 1.0

local ok = pcall(function() return qkv.block_mask and qkv.variants.sliding_window end)
if not ok or not qkv.block_mask then
  error("bench/variants.lua: this qkv has no qkv.block_mask / qkv.variants (issue 48's API)", 0)
end

local self = U.quote(arg[-1]) .. " " .. U.quote(arg[0])
local PY, VERSION
if use_torch then PY, VERSION = U.peer_python() end
local TORCH_PY = arg[0]:gsub("variants%.lua$", "variants_torch.py")

-- a fresh process's output: the numbers of its RESULT line, or nil and why
local function parse(out)
  local f = {}
  for x in (out:match("RESULT ([^\n]*)") or ""):gmatch("%S+") do f[#f + 1] = tonumber(x) end
  if #f >= 4 then return {time = f[1], gflops = f[2], mb = f[3], first = f[4], mask = f[5]} end
  local skip = out:match("SKIP ([^\n]*)")
  return nil, skip or ("failed: " .. out:sub(-400))
end

local function run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  p:close()
  return out
end

local function qkv_case(n, variant, mode, mem)
  local r, why = parse(run(string.format("QKV_BENCH_BUDGET=%s %s case %d %s %s%s", BUDGET, self,
                                         n, variant, mode, mem and " mem" or "")))
  if not r then error(string.format("qkv case %d %s %s: %s", n, variant, mode, why), 0) end
  return r
end

local function torch_case(n, variant, impl, mode)
  if not PY then return nil end
  local extra = impl == "flex" and not warm_cache and not quick and " --cold" or ""
  return parse(run(string.format("%s %s %d %s %s %s%s", U.quote(PY), U.quote(TORCH_PY), n,
                                 variant, impl, mode, extra)))
end

local with_load = U.with_load

local function ms(r) return r and string.format("%.2f", r.time * 1e3) or "-" end
local function ratio(a, b) return (a and b) and string.format("%.2f", a.time / b.time) or "-" end

print(string.format("variants: B=1 H=%d d=%d float32, %d threads; qkv.attention(weights = false) " ..
                    "with the variant's mods and block mask", H, D, THREADS))
print(PY and string.format("torch %s (%s); flex's first call %s", VERSION, PY,
                           (warm_cache or quick) and "may use an earlier run's inductor cache"
                           or "compiles into a fresh inductor cache")
         or "torch: not found (`make bench-deps`, or QKV_BENCH_PYTHON), skipped")
print("x/qkv: how many times qkv is faster; qkv/dn: qkv's time over its dense time; rate: useful" ..
      " pairs a second over qkv's dense rate; 1st: the first call (qkv: trace, block mask, run)")

local HEAD = "%-5s %-9s %6s %8s %8s %8s %8s %8s %7s %7s %6s %6s %8s %7s"
local ROW = "%-5s %-9s %6d %8s %8s %8s %8s %8s %7s %7s %6s %6s %8.1f %7.0f"
local results = {}   -- results[load][n][variant] = {qkv, flex, mask, sdpa, ...}
for _, load in ipairs(LOADS) do
  results[load] = {}
  print()
  print(string.format(HEAD, "load", "case", "N", "qkv ms", "flex ms", "flex 1st", "mask ms",
                      "sdpa ms", "flex/x", "mask/x", "qkv/dn", "rate", "1st ms", "qkv MB"))
  with_load(load == "busy", function()
    for _, n in ipairs(SIZES) do
      local R = {}
      results[load][n] = R
      local sdpa = torch_case(n, "dense", "sdpa", "fwd")
      for _, v in ipairs(VARIANTS) do
        local r = {qkv = qkv_case(n, v, "fwd"), sdpa = sdpa}
        r.flex, r.flex_why = torch_case(n, v, "flex", "fwd")
        r.mask, r.mask_why = torch_case(n, v, "sdpa_mask", "fwd")
        R[v] = r
        local dense = R.dense.qkv
        local rate = (pairs_of(v, n) / r.qkv.time) / (pairs_of("dense", n) / dense.time)
        print(string.format(ROW, load, v, n, ms(r.qkv), ms(r.flex),
                            r.flex and string.format("%.1f s", r.flex.first) or "-", ms(r.mask),
                            ms(sdpa), ratio(r.flex, r.qkv), ratio(r.mask, r.qkv),
                            string.format("%.0f%%", 100 * r.qkv.time / dense.time),
                            string.format("%.0f%%", 100 * rate), r.qkv.first * 1e3, r.qkv.mb))
      end
      for _, v in ipairs(VARIANTS) do
        local r = R[v]
        if r.flex_why then print(string.format("      %s N %d flex: %s", v, n, r.flex_why)) end
        if r.mask_why then print(string.format("      %s N %d sdpa_mask: %s", v, n, r.mask_why)) end
      end
      -- forward and backward of the sliding window
      local fb = {qkv = qkv_case(n, "sliding", "fwdbwd")}
      fb.mask, fb.mask_why = torch_case(n, "sliding", "sdpa_mask", "fwdbwd")
      fb.sdpa, fb.sdpa_why = torch_case(n, "dense", "sdpa", "fwdbwd")
      fb.flex, fb.flex_why = torch_case(n, "sliding", "flex", "fwdbwd")
      R.fwdbwd = fb
    end
  end)

  print()
  print("forward + backward, sliding window (GFLOP/s: 14 d H a useful pair; pair rate: useful pairs" ..
        " a second over the forward's)")
  print(string.format("%-5s %6s %9s %8s %9s %9s %9s %9s %8s %8s", "load", "N", "qkv ms", "GFLOP/s",
                      "pair rate", "flop rate", "mask ms", "sdpa ms", "mask/x", "sdpa/x"))
  for _, n in ipairs(SIZES) do
    local fb, fwd = results[load][n].fwdbwd, results[load][n].sliding.qkv
    print(string.format("%-5s %6d %9s %8.1f %8.0f%% %8.0f%% %9s %9s %8s %8s", load, n, ms(fb.qkv),
                        fb.qkv.gflops, 100 * fwd.time / fb.qkv.time,
                        100 * fb.qkv.gflops / fwd.gflops, ms(fb.mask), ms(fb.sdpa),
                        ratio(fb.mask, fb.qkv), ratio(fb.sdpa, fb.qkv)))
    if fb.flex_why then print(string.format("      N %d flex: %s", n, fb.flex_why)) end
    if fb.mask_why then print(string.format("      N %d sdpa_mask: %s", n, fb.mask_why)) end
  end
end

-- peak memory of the sliding window's forward and backward at MEM_N,
-- against q, k, v, out and their four gradients (idle: the load changes no
-- memory)
local mem = qkv_case(MEM_N, "sliding", "fwdbwd", true)
local tensors = 8 * H * MEM_N * D * 4 / 2^20
print()
print(string.format("memory: sliding fwd+bwd at N %d, one call: peak %.0f MB, q k v out and their" ..
                    " gradients %.0f MB: %.2fx (first call %.2f s)", MEM_N, mem.mb, tensors,
                    mem.mb / tensors, mem.first))

---------------------------------------------------------------- the targets

-- issue 48's targets, on the first load's numbers (idle unless told)
local load = LOADS[1]
print()
print(string.format("issue 48's targets (%s):", load))
local function target(what, value, fmt, good)
  if value then
    print(string.format("  %-52s %10s  %s", what, string.format(fmt, value), good(value) and "ok" or "MISS"))
  end
end
local function times(a, b) return (a and b) and b.time / a.time or nil end
for _, n in ipairs(SIZES) do
  local R = results[load][n]
  local s, d = R.sliding, R.dense.qkv
  target("sliding N " .. n .. ": flex / qkv >= 5", times(s.qkv, s.flex), "%.2fx", function(x) return x >= 5 end)
  target("sliding N " .. n .. ": sdpa_mask / qkv >= 20", times(s.qkv, s.mask), "%.2fx",
         function(x) return x >= 20 end)
  target("sliding N " .. n .. ": useful-pair rate >= 75% of dense",
         100 * (pairs_of("sliding", n) / s.qkv.time) / (pairs_of("dense", n) / d.time), "%.0f%%",
         function(x) return x >= 75 end)
  if n >= 16384 then
    target("sliding N " .. n .. ": time <= 8% of dense", 100 * s.qkv.time / d.time, "%.1f%%",
           function(x) return x <= 8 end)
  end
  target("document N " .. n .. ": time <= 35% of dense", 100 * R.document.qkv.time / d.time, "%.1f%%",
         function(x) return x <= 35 end)
  target("document N " .. n .. ": flex / qkv >= 2.5", times(R.document.qkv, R.document.flex), "%.2fx",
         function(x) return x >= 2.5 end)
  target("alibi N " .. n .. ": time <= 1.25x dense", R.alibi.qkv.time / d.time, "%.2fx",
         function(x) return x <= 1.25 end)
  target("alibi N " .. n .. ": flex / qkv >= 3", times(R.alibi.qkv, R.alibi.flex), "%.2fx",
         function(x) return x >= 3 end)
  if n == 4096 then
    for _, v in ipairs(VARIANTS) do
      -- what the first call adds to a warm one: the trace, the block mask
      -- (PyTorch's: its compile), the first touch of memory
      target(v .. " N 4096: first call's extra <= 50 ms", (R[v].qkv.first - R[v].qkv.time) * 1e3,
             "%.1f ms", function(x) return x <= 50 end)
    end
  end
  target("sliding N " .. n .. ": fwd+bwd pair rate >= 40% of fwd",
         100 * s.qkv.time / R.fwdbwd.qkv.time, "%.0f%%", function(x) return x >= 40 end)
end
target("sliding fwd+bwd N " .. MEM_N .. ": peak <= 1.5x tensors", mem.mb / tensors, "%.2fx",
       function(x) return x <= 1.5 end)
