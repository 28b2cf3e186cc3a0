-- decode.lua -- grouped-query attention (issue 49): one new query against a
-- cache of keys and values (decoding), and the whole prompt at once
-- (prefill), against a plain read of the cache's bytes and PyTorch's
-- scaled_dot_product_attention(..., enable_gqa=True) (bench/decode_torch.py,
-- by the peer python of bench/lib/timing.lua) in the same run.
-- B = 1, H = 32, H_kv = 8, d = 128 (LLaMA 3 8B's attention), float32,
-- 2 threads on both sides.
--
--   build/qkv bench/decode.lua [quick] [busy]
--       decode at n_k 4096, 32768 and 131072 (quick: 4096) with float32
--       and bfloat16 (decode16) caches, prefill at N 2048 (quick: 512),
--       its forward and its forward and backward (prefillbwd), against the
--       same calls with K and V repeated per head (mha, mhabwd); busy: the
--       decode rows again with one busy process beside both sides
--   build/qkv bench/decode.lua case decode|read|decode16|read16|prefill|mha|prefillbwd|mhabwd N
--       one qkv case: "RESULT seconds gflops peak_mb"
--
-- Decoding reads the cache once: its floor is the cache's bytes over the
-- memory bandwidth, which the "read" case measures (K and V summed, the
-- same bytes). Every case runs in a fresh process (its own peak memory).

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local hwm_mb, best_time, result, quote = U.hwm_mb, U.best_time, U.result, U.quote

local H, HKV, D, THREADS = 32, 8, 128, 2

local function run_case(kind, n)
  qkv.set_num_threads(THREADS)
  qkv.seed(1)
  -- decode16, read16: the same in bfloat16 (a bfloat16 cache, half the bytes)
  local dt = kind:match("16$") and "bfloat16" or "float32"
  kind = kind:gsub("16$", "")
  local nq = (kind == "decode" or kind == "read") and 1 or n
  local q = qkv.randn(1, H, nq, D):to(dt)
  local k, v = qkv.randn(1, HKV, n, D):to(dt), qkv.randn(1, HKV, n, D):to(dt)
  local f, flops
  if kind == "read" then                   -- the same bytes as float32 (a bfloat16 sum is no read)
    if dt == "bfloat16" then k, v = qkv.randn(1, HKV, n // 2, D), qkv.randn(1, HKV, n // 2, D) end
    f = function() return k:sum() + v:sum() end
    flops = 0
  elseif kind == "mha" or kind == "mhabwd" then   -- the same-sized multi-head call
    k, v = k:repeat_interleave(H // HKV, 2), v:repeat_interleave(H // HKV, 2)
    f = function() return qkv.attention(q, k, v, {causal = true, weights = false}) end
    flops = 2 * D * H * n * n
  else
    f = function() return qkv.attention(q, k, v, {causal = true, weights = false, enable_gqa = true}) end
    flops = kind == "decode" and 4 * D * H * n or 2 * D * H * n * n   -- prefill, prefillbwd
  end
  if kind:match("bwd$") then                -- forward and backward: 3.5 forwards' products
    require "qkv.autograd"
    local fwd, g = f, qkv.randn(1, H, nq, D):to(dt)
    q:requires_grad_(); k:requires_grad_(); v:requires_grad_()
    f = function()
      q.grad, k.grad, v.grad = nil, nil, nil
      fwd():backward(g)
    end
    flops = flops * 3.5
  end
  local t = best_time(f, 1.0)
  print(string.format("RESULT %.6f %.2f %.1f", t, flops / t / 1e9, hwm_mb()))
end

if arg[1] == "case" then return run_case(arg[2], tonumber(arg[3])) end

local quick, busy = false, false
for _, a in ipairs(arg) do
  if a == "quick" then quick = true elseif a == "busy" then busy = true end
end
local self = quote(arg[-1]) .. " " .. quote(arg[0])
local PY = U.peer_python() or "/usr/bin/python3"
local torch_py = arg[0]:gsub("decode%.lua$", "decode_torch.py")
local have_torch = os.execute(PY .. " -c 'import torch' >/dev/null 2>&1") == true

local function case(kind, n)
  local r, err = result(string.format("%s case %s %d", self, kind, n))
  if not r then error(kind .. " " .. n .. " failed:\n" .. err) end
  return r
end
local function torch(kind, n)
  if not have_torch then return nil end
  return result(string.format("%s %s %s %d %d", PY, quote(torch_py), kind, n, THREADS))
end
local function ms(r) return r and string.format("%.3f", r.time * 1e3) or "-" end

print(string.format("decode: B=1 H=%d H_kv=%d d=%d float32, %d threads; qkv.attention(enable_gqa = true)",
                    H, HKV, D, THREADS))
print(have_torch and ("torch: " .. PY .. ", SDPA with enable_gqa=True") or
      ("torch: not found by " .. PY .. ", skipped"))
print("read: K and V summed once (the cache's bytes); x/read: decode's time over it; sdpa/x: how many times qkv is faster")
print(string.format("%-5s %-8s %7s %10s %10s %10s %8s %8s %9s", "load", "case", "N", "qkv ms", "read ms",
                    "sdpa ms", "x/read", "sdpa/x", "GB/s"))
for _, load in ipairs(busy and {"idle", "busy"} or {"idle"}) do
  for _, kind in ipairs{"decode", "decode16"} do
    for _, n in ipairs(quick and {4096} or {4096, 32768, 131072}) do
      local read = kind:gsub("decode", "read")
      local r, rd, t = U.with_load(load == "busy", function()
        return case(kind, n), case(read, n), torch(kind, n)
      end)
      local bytes = 2 * HKV * n * D * (kind == "decode" and 4 or 2)
      print(string.format("%-5s %-8s %7d %10s %10s %10s %8.2f %8s %9.1f", load, kind, n, ms(r), ms(rd),
                          ms(t), r.time / rd.time, t and string.format("%.2f", t.time / r.time) or "-",
                          bytes / rd.time / 1e9))
    end
  end
end
local n = quick and 512 or 2048
local g, m, t = case("prefill", n), case("mha", n), torch("prefill", n)
print(string.format("%-8s %7d %10s %10s %10s %8s %8s", "prefill", n, ms(g), "-", ms(t), "-",
                    t and string.format("%.2f", t.time / g.time) or "-"))
print(string.format("prefill N %d: GQA %.1f GFLOP/s against the multi-head call's %.1f (%.0f%%); peak %.0f MB against %.0f MB",
                    n, g.gflops, m.gflops, 100 * g.gflops / m.gflops, g.mb, m.mb))
g, m = case("prefillbwd", n), case("mhabwd", n)
print(string.format("prefill+backward N %d: GQA %.3f s, %.1f GFLOP/s against the multi-head call's %.3f s, %.1f (%.0f%%); peak %.0f MB against %.0f MB",
                    n, g.time, g.gflops, m.time, m.gflops, 100 * g.gflops / m.gflops, g.mb, m.mb))
