-- layers.lua -- times qkv.layer_norm and x:log_softmax at a seed size and a
-- model size (BERT-base: B = 8, n = 128, d = 768; scores 8 x 12 x 128 x 128),
-- float32, against PyTorch (bench/layers_torch.py) in the same run when
-- /usr/bin/python3 has torch. Both are memory-bound: the floor is the bytes
-- read and written (x once, out once), printed as GB/s achieved.
--
--   build/qkv bench/layers.lua            the table (run by `make bench`)

local TORCH = (dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua").peer_python()) or "/usr/bin/python3"

-- name, the shape, what to time (x and, for layer_norm, w and b)
local CASES = {
  {"layer_norm seed", {3, 4}},
  {"layer_norm model", {8, 128, 768}},
  {"log_softmax seed", {3, 4}},
  {"log_softmax model", {8, 12, 128, 128}},
}

local function numel(s) local n = 1 for _, v in ipairs(s) do n = n * v end return n end

local median_time = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua").median_time

local function run(name, shape)
  qkv.seed(1)
  local x = qkv.randn(shape)
  local d = shape[#shape]
  if name:match("^layer_norm") then
    local w, b = qkv.randn(d), qkv.randn(d)
    return median_time(function() return qkv.layer_norm(x, d, w, b) end, 0.3)
  end
  return median_time(function() return x:log_softmax() end, 0.3)
end

local have_torch = os.execute(TORCH .. " -c 'import torch' >/dev/null 2>&1") == true
local torch = {}
if have_torch then
  local py = arg[0]:gsub("layers%.lua$", "layers_torch.py")
  local p = io.popen(TORCH .. " '" .. py .. "' 2>&1")
  for line in p:lines() do
    local n, t = line:match("^RESULT (.-) (%S+)$")
    if n then torch[n] = tonumber(t) end
  end
  p:close()
end

print("layers: float32, median time; GB/s = (read x + write out) / time")
print(have_torch and "" or "torch: not found by " .. TORCH .. ", skipped")
print(string.format("%-18s %-16s %10s %8s %10s %10s", "case", "shape", "qkv µs", "GB/s",
                    "torch µs", "torch/qkv"))
for _, c in ipairs(CASES) do
  local t = run(c[1], c[2])
  local tt = torch[c[1]]
  print(string.format("%-18s %-16s %10.1f %8.1f %10s %10s", c[1], "(" .. table.concat(c[2], ",") .. ")",
                      t * 1e6, 8 * numel(c[2]) / t / 1e9, tt and string.format("%.1f", tt * 1e6) or "-",
                      tt and string.format("%.2f", tt / t) or "-"))
end
