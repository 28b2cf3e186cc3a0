-- amp/init.lua: qkv.amp, mixed precision with PyTorch's names (issue 51):
-- qkv.amp.GradScaler (amp/grad_scaler.lua), loaded on first use.
local M = {}

return setmetatable(M, {__index = function(_, k)
  if k == "GradScaler" then
    M.GradScaler = require("qkv.amp.grad_scaler").GradScaler
    return M.GradScaler
  end
end})
