-- half_grads.lua: the check cuda/test_attention.lua and test_cudnn.lua make of
-- half-precision attention gradients on the GPU: each of dQ, dK, dV in the
-- inputs' dtype on the GPU, its relative error against float64 within k
-- times the CPU's own on the same inputs.
--   check(gpu, cpu, want, dt, label, k)   gpu, cpu, want: {dQ, dK, dV}
local lu = require "luaunit"

local function rel64(x, want)
  local d = x:cpu():double() - want
  return math.sqrt((d * d):sum():item() / (want * want):sum():item())
end

return function(gpu, cpu, want, dt, label, k)
  for i, name in ipairs{"dQ", "dK", "dV"} do
    local what = label .. " " .. name
    lu.assertEquals({gpu[i].dtype, gpu[i].device}, {dt, "cuda"}, what)
    local ec, eg = rel64(cpu[i], want[i]), rel64(gpu[i], want[i])
    lu.assertTrue(eg <= k * ec, ("%s: error %.3g against float64, the CPU's %.3g"):format(
      what, eg, ec))
  end
end
