-- amp/init.lua: qkv.amp, mixed precision with PyTorch's names (issue 51):
-- qkv.amp.autocast (amp/autocast.lua, also qkv.autocast) and
-- qkv.amp.GradScaler (amp/grad_scaler.lua), each loaded on first use.
local M = {}

return setmetatable(M, {__index = function(_, k)
  if k == "autocast" then
    M.autocast = require("qkv.amp.autocast").autocast
    return M.autocast
  end
  if k == "GradScaler" then
    M.GradScaler = require("qkv.amp.grad_scaler").GradScaler
    return M.GradScaler
  end
end})
