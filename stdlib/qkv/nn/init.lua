-- nn/init.lua: qkv.nn, attention modules in plain Lua on the primitives,
-- as PyTorch's torch.nn. The machinery (Module, its methods, class()) is
-- in nn/module.lua; the classes and functions are in nn/layers.lua
-- (Linear, activations, LayerNorm, containers), nn/attention.lua (the
-- attention and alignment modules), nn/loss.lua (cross_entropy, nll_loss
-- and the loss modules), nn/functional.lua (mse_loss, clipping,
-- cosine_similarity) and nn/decoder.lua (SwiGLU, KVCache);
-- each registers its names in the table built here.

local qkv = require "qkv"
local M = require "qkv.nn.module"

require "qkv.nn.state"
require "qkv.nn.layers"
require "qkv.nn.attention"
require "qkv.nn.loss"          -- before functional.lua, which names its functions in F
require "qkv.nn.functional"
require "qkv.nn.decoder"

return qkv._strict(M.nn, "qkv.nn", "class or function")
