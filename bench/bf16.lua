-- bf16.lua -- bfloat16 on the CPU against float32, and against PyTorch's
-- (bench/bf16_torch.py) in the same run, GFLOP/s, the best of at least 5
-- runs and 0.25 s: products (float32 sums, one rounding: the tile unit's
-- kernel, vm/cpu/matmul_amx.c, where the CPU has AMX, else oneDNN's
-- bfloat16 gemm where libdnnl2 is installed; 2 M K N per product) and the
-- fused attention (the tile unit's kernel where the CPU has AMX,
-- vm/cpu/attention_amx.c; B 1, H 8, d 64, 4 N^2 d H per call, half that
-- causal) against scaled_dot_product_attention.
--
--   build/qkv bench/bf16.lua          (run by `make bench`)

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local SHAPES = {{384, 384, 1536}, {384, 1536, 384}, {1024, 1024, 1024}, {2048, 2048, 2048}}
local ATTN = {{512, 0}, {512, 1}, {1024, 0}, {1024, 1}, {4096, 0}, {4096, 1}}

local best = U.best_short

local PY, VERSION = U.peer_python()
-- the peer's lines: "TAG a b [c] f32 bf16" as torch["a x b [x c]"] = {f32, bf16}
local torch = {}
local function peer(list, first)
  if not PY then return end
  local args = {first}
  for _, s in ipairs(list) do args[#args + 1] = table.concat(s, " ") end
  local p = io.popen(U.quote(PY) .. " " .. U.quote(arg[0]:gsub("bf16%.lua$", "bf16_torch.py")) .. " " ..
                     table.concat(args, " ") .. " 2>&1")
  for line in p:lines() do
    local w = {}
    for x in line:gmatch("%S+") do w[#w + 1] = x end
    if w[1] == "RESULT" or w[1] == "ATTN" then
      torch[table.concat(w, "x", 2, #w - 2)] = {tonumber(w[#w - 1]), tonumber(w[#w])}
    end
  end
  p:close()
end
peer(SHAPES, "")
peer(ATTN, "attention")

print("bf16: matmul on the CPU, GFLOP/s, " .. qkv.get_num_threads() .. " threads; " ..
      (PY and ("torch " .. VERSION) or "torch: not found (`make bench-deps`), skipped"))
print(("%-16s %9s %9s %7s %11s %11s %9s"):format("M x K x N", "qkv f32", "qkv bf16", "bf16/f32",
                                                  "torch f32", "torch bf16", "qkv/torch"))
for _, s in ipairs(SHAPES) do
  local m, k, n = s[1], s[2], s[3]
  qkv.seed(1)
  local a, b = qkv.randn(m, k), qkv.randn(k, n)
  local ah, bh = a:bfloat16(), b:bfloat16()
  local tf, tb = best(function() return a:matmul(b) end), best(function() return ah:matmul(bh) end)
  local key = m .. "x" .. k .. "x" .. n
  local t = torch[key]
  local g = 2 * m * k * n / 1e9
  print(("%-16s %9.0f %9.0f %7.2f %11s %11s %9s"):format(key, g / tf, g / tb, tf / tb,
    t and ("%.0f"):format(g / t[1]) or "-", t and ("%.0f"):format(g / t[2]) or "-",
    t and ("%.2f"):format(t[2] / tb) or "-"))
end

print()
print("attention: fused, B 1 H 8 d 64, GFLOP/s of 4 N^2 d H (causal: half), " ..
      qkv.get_num_threads() .. " threads; torch: scaled_dot_product_attention")
print(("%-12s %9s %9s %7s %11s %11s %9s"):format("N causal", "qkv f32", "qkv bf16", "bf16/f32",
                                                  "torch f32", "torch bf16", "qkv/torch"))
for _, s in ipairs(ATTN) do
  local n, c = s[1], s[2] == 1
  qkv.seed(1)
  local q, k, v = qkv.randn(1, 8, n, 64), qkv.randn(1, 8, n, 64), qkv.randn(1, 8, n, 64)
  local qh, kh, vh = q:bfloat16(), k:bfloat16(), v:bfloat16()
  local o = {weights = false, causal = c}
  local tf = best(function() return qkv.attention(q, k, v, o) end)
  local tb = best(function() return qkv.attention(qh, kh, vh, o) end)
  local t = torch[n .. "x" .. s[2]]
  local g = 4 * n * n * 64 * 8 * (c and 0.5 or 1) / 1e9
  print(("%-12s %9.0f %9.0f %7.2f %11s %11s %9s"):format(n .. " " .. tostring(c), g / tf, g / tb,
    tf / tb, t and ("%.0f"):format(g / t[1]) or "-", t and ("%.0f"):format(g / t[2]) or "-",
    t and ("%.2f"):format(t[2] / tb) or "-"))
end
