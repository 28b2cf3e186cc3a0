-- nn.lua: qkv.nn, attention modules in plain Lua on the primitives, as
-- PyTorch's torch.nn. The machinery (Module, its methods, class()) is in
-- nn_module.lua; the classes and functions are in nn_layers.lua (Linear,
-- activations, LayerNorm, containers), nn_attention.lua (the attention
-- and alignment modules) and nn_functional.lua (losses, clipping,
-- cosine_similarity); each registers its names in the table built here.

local qkv = require "qkv"
local M = require "qkv.nn_module"

require "qkv.nn_layers"
require "qkv.nn_attention"
require "qkv.nn_functional"

return qkv._strict(M.nn, "qkv.nn", "class or function")
