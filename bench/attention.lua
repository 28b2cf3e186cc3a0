-- attention.lua -- times the fused attention kernel (qkv.attention with
-- weights = false) at B = 1, H = 8, d = 64, float32, N = 512 .. 16384,
-- causal and not, against the sgemm ceiling and, when the peer python (bench/lib/timing.lua's peer_python:
-- PyTorch 2.x from `make bench-deps`, else /usr/bin/python3) has
-- torch, against PyTorch (bench/attention_torch.py) on the same shapes.
--
--   build/qkv bench/attention.lua          the table (run by `make bench`)
--   build/qkv bench/attention.lua case N causal | sgemm
--
-- Every case runs in a fresh process, so that the peak resident memory
-- (VmHWM) it reports belongs to that case alone.

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local hwm_mb, best_time, result = U.hwm_mb, U.best_time, U.result
local shell_quote = U.quote

local H, D = 8, 64
local SIZES = {512, 1024, 2048, 4096, 16384}
local GEMM_N = 2048
local TORCH = (dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua").peer_python()) or "/usr/bin/python3"

local function flops(n, causal)
  local f = 4 * n * n * D * H
  return causal and f / 2 or f
end

-- child: one case, printed as "RESULT seconds gflops hwm_mb"
local function run_case(n, causal)
  qkv.seed(1)
  local Q, K, V = qkv.randn(1, H, n, D), qkv.randn(1, H, n, D), qkv.randn(1, H, n, D)
  local opts = {causal = causal, weights = false}
  local t = best_time(function() return qkv.attention(Q, K, V, opts) end, 1.0)
  print(string.format("RESULT %.6f %.2f %.1f", t, flops(n, causal) / t / 1e9, hwm_mb()))
end

local function run_sgemm()
  qkv.seed(1)
  local a, b = qkv.randn(GEMM_N, GEMM_N), qkv.randn(GEMM_N, GEMM_N)
  local t = best_time(function() return a:matmul(b) end, 1.0)
  print(string.format("RESULT %.6f %.2f %.1f", t, 2 * GEMM_N ^ 3 / t / 1e9, hwm_mb()))
end

if arg[1] == "case" then return run_case(tonumber(arg[2]), arg[3] == "true") end
if arg[1] == "sgemm" then return run_sgemm() end

---------------------------------------------------------------- the table

local self = shell_quote(arg[-1]) .. " " .. shell_quote(arg[0])
local torch_py = arg[0]:gsub("attention%.lua$", "attention_torch.py")
local have_torch = os.execute(TORCH .. " -c 'import torch' >/dev/null 2>&1") == true

local function torch_case(n, causal, kind)
  if not have_torch then return nil end
  return result(string.format("%s %s %d %s %s", TORCH, shell_quote(torch_py), n,
                              tostring(causal), kind))
end

local function fmt(r, what)
  if not r then return "-" end
  return string.format(what, r.gflops)
end

local gemm = assert(result(self .. " sgemm"))
print(string.format("attention: B=1 H=%d d=%d float32%s", H, D,
                    os.getenv("OMP_NUM_THREADS") and
                    ", OMP_NUM_THREADS=" .. os.getenv("OMP_NUM_THREADS") or ""))
print(string.format("sgemm %dx%d ceiling: %.1f GFLOP/s", GEMM_N, GEMM_N, gemm.gflops))
if have_torch then
  print("torch: GFLOP/s of softmax(QK^T/sqrt(d))V (manual) and of")
  print("  scaled_dot_product_attention (sdpa, torch >= 2.0); qkv/torch: speed ratio")
else
  print("torch: not found by " .. TORCH .. ", skipped")
end
print(string.format("%6s %-6s %9s %8s %6s %8s %9s %9s %9s", "N", "causal",
                    "time s", "GFLOP/s", "%gemm", "peak MB", "torch", "sdpa", "qkv/torch"))
for _, n in ipairs(SIZES) do
  for _, causal in ipairs{false, true} do
    local r, err = result(string.format("%s case %d %s", self, n, tostring(causal)))
    if not r then error("case " .. n .. " failed:\n" .. err) end
    local tm, ts = torch_case(n, causal, "manual"), torch_case(n, causal, "sdpa")
    local best = tm
    if ts and (not best or ts.time < best.time) then best = ts end
    print(string.format("%6d %-6s %9.4f %8.1f %5.0f%% %8.0f %9s %9s %9s", n,
                        tostring(causal), r.time, r.gflops,
                        100 * r.gflops / gemm.gflops, r.mb, fmt(tm, "%.1f"),
                        fmt(ts, "%.1f"), best and string.format("%.2f", best.time / r.time) or "-"))
  end
end
