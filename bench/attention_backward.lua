-- attention_backward.lua -- the fused attention's backward (weights =
-- false, vm/cpu/attention_bwd.c) at B = 1, H = 8, d = 64, float32, N = 1024
-- and 4096, against PyTorch's autograd of softmax(Q K^T / sqrt(d)) V in the
-- same run (bench/attention_backward_torch.py) when the peer python (bench/lib/timing.lua's peer_python:
-- PyTorch 2.x from `make bench-deps`, else /usr/bin/python3) has
-- torch. FLOPs counted as 10 N² d H (the five products of a backward);
-- each case in a fresh process, whose peak resident memory it reports.
--
--   build/qkv bench/attention_backward.lua       the table (run by `make bench`)
--   build/qkv bench/attention_backward.lua case N

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local hwm_mb, best_time, result = U.hwm_mb, U.best_time, U.result
local q = U.quote

local H, D = 8, 64
local SIZES = {1024, 4096}
local TORCH = (dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua").peer_python()) or "/usr/bin/python3"

if arg[1] == "case" then
  local n = tonumber(arg[2])
  qkv.seed(1)
  local Q, K, V = qkv.randn(1, H, n, D), qkv.randn(1, H, n, D), qkv.randn(1, H, n, D)
  -- as autograd runs it: the forward's log-sum-exps handed to the backward
  local out, lse = qkv._attention_lse(Q, K, V, nil, false, 1 / math.sqrt(D))
  local g = qkv.randn(1, H, n, D)
  local t = best_time(function()
    return qkv._attention_backward(Q, K, V, out, g, nil, false, 1 / math.sqrt(D), lse)
  end, 1.0)
  print(string.format("RESULT %.6f %.2f %.1f", t, 10 * n * n * D * H / t / 1e9, hwm_mb()))
  return
end

local self = q(arg[-1]) .. " " .. q(arg[0])
local py = arg[0]:gsub("attention_backward%.lua$", "attention_backward_torch.py")
local have_torch = os.execute(TORCH .. " -c 'import torch' >/dev/null 2>&1") == true
print(string.format("attention backward: B=1 H=%d d=%d float32; GFLOP/s of 10 N^2 d H", H, D))
print(have_torch and "torch: autograd of softmax(QK^T/sqrt(d))V, and of scaled_dot_product_attention" ..
                    " (sdpa), backward only; x/qkv = how many times qkv is faster"
                 or "torch: not found by " .. TORCH .. ", skipped")
print(string.format("%6s %9s %8s %8s %9s %9s %9s %9s %9s", "N", "time s", "GFLOP/s", "peak MB",
                    "torch s", "torch MB", "torch/qkv", "sdpa s", "sdpa/qkv"))
for _, n in ipairs(SIZES) do
  local r, err = result(self .. " case " .. n)
  if not r then error("case " .. n .. " failed:\n" .. err) end
  local t = have_torch and result(TORCH .. " " .. q(py) .. " " .. n) or nil
  local f = have_torch and result(TORCH .. " " .. q(py) .. " " .. n .. " sdpa") or nil
  print(string.format("%6d %9.4f %8.1f %8.0f %9s %9s %9s %9s %9s", n, r.time, r.gflops, r.mb,
                      t and string.format("%.4f", t.time) or "-",
                      t and string.format("%.0f", t.mb) or "-",
                      t and string.format("%.2f", t.time / r.time) or "-",
                      f and string.format("%.4f", f.time) or "-",
                      f and string.format("%.2f", f.time / r.time) or "-"))
end
