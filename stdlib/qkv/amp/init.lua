-- amp/init.lua: qkv.amp, mixed precision with PyTorch's names (issue 51):
-- qkv.amp.autocast (amp/autocast.lua, also qkv.autocast) and
-- qkv.amp.GradScaler (amp/grad_scaler.lua), each loaded on first use.
local M = {}

-- the names qkv.amp has, so that reading one it lacks is qkv._strict's
-- error naming the nearest (GradScalar: did you mean 'GradScaler'?)
local names = require("qkv")._strict({GradScaler = true, autocast = true}, "qkv.amp",
                                    "class or function")

return setmetatable(M, {__index = function(_, k)
  if k == "autocast" then
    M.autocast = require("qkv.amp.autocast").autocast
    return M.autocast
  end
  if k == "GradScaler" then
    M.GradScaler = require("qkv.amp.grad_scaler").GradScaler
    return M.GradScaler
  end
  local ok, err = pcall(function() return names[k] end)
  -- at the reader's line, not this file's
  if not ok then error((tostring(err):gsub("^.-:%d+: ", "", 1)), 2) end
end})
