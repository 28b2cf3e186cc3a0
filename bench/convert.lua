-- convert.lua -- times float -> integer conversions (x:to("int64") and the
-- rest) of 16M elements, which check every value (NaN, ±inf and values out
-- of the target's range are errors, issue 28) in the same pass as they
-- convert. Memory-bound: the floor is the bytes read and written, printed
-- as GB/s achieved. bench/NOTES.md keeps what the check cost.
--
--   build/qkv bench/convert.lua            the table (run by `make bench`)

local N = 1 << 24

local median_time = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua").median_time

local SIZE = {float32 = 4, float64 = 8, bfloat16 = 2, int64 = 8, int32 = 4}

print(string.format("%-26s %10s %10s", "16M elements", "ms", "GB/s"))
for _, c in ipairs{{"float32", "int64"}, {"float32", "int32"}, {"float64", "int64"},
                   {"float64", "int32"}, {"bfloat16", "int64"}, {"float32", "float64"}} do
  local x = (qkv.rand(N) * 2e6 - 1e6):to(c[1])
  local t = median_time(function() return x:to(c[2]) end, 0.5)
  local bytes = N * (SIZE[c[1]] + SIZE[c[2]])
  print(string.format("%-26s %10.1f %10.1f", c[1] .. " -> " .. c[2], t * 1e3, bytes / t / 1e9))
end
