-- bf16.lua -- bfloat16 products on the CPU (float32 sums, one rounding:
-- oneDNN's bfloat16 gemm where libdnnl2 is installed) against float32,
-- and against PyTorch's (bench/bf16_torch.py) in the same run, GFLOP/s
-- (2 M K N per product), best of 5.
--
--   build/qkv bench/bf16.lua          (run by `make bench`)

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local SHAPES = {{384, 384, 1536}, {384, 1536, 384}, {1024, 1024, 1024}, {2048, 2048, 2048}}

local function best(f)
  f()
  local b = math.huge
  for _ = 1, 5 do
    local t = qkv.clock()
    f()
    b = math.min(b, qkv.clock() - t)
  end
  return b
end

local PY, VERSION = U.peer_python()
local torch = {}
if PY then
  local args = {}
  for _, s in ipairs(SHAPES) do args[#args + 1] = table.concat(s, " ") end
  local p = io.popen(U.quote(PY) .. " " .. U.quote(arg[0]:gsub("bf16%.lua$", "bf16_torch.py")) .. " " ..
                     table.concat(args, " ") .. " 2>&1")
  for line in p:lines() do
    local m, k, n, f, b = line:match("^RESULT (%d+) (%d+) (%d+) (%S+) (%S+)")
    if m then torch[m .. "x" .. k .. "x" .. n] = {tonumber(f), tonumber(b)} end
  end
  p:close()
end

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
