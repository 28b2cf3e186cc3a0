-- test_variants_nn.lua: attention's variants through qkv.nn: the options
-- score_mod, mask_mod and block_mask of F.scaled_dot_product_attention,
-- MultiHeadAttention's forward and TransformerEncoderLayer's forward give
-- what qkv.attention gives with them (whose values test_variants*.lua
-- check against float64 references)
local lu = require "luaunit"
local nn, F = qkv.nn, qkv.nn.functional

local function close(a, b, tol)
  lu.assertEquals(a.shape, b.shape)
  lu.assertTrue((a - b):abs():max():item() <= tol, "differ by " .. (a - b):abs():max():item())
end

TestVariantsNN = {}

function TestVariantsNN:testSdpaTakesTheVariants()
  qkv.manual_seed(3)
  local q, k, v = qkv.randn(2, 4, 70, 8), qkv.randn(2, 4, 70, 8), qkv.randn(2, 4, 70, 8)
  local w = qkv.variants.sliding_window(9)
  local sc = qkv.variants.softcap(2.5)
  local want = qkv.attention(q, k, v, {mask_mod = w, score_mod = sc, weights = false})
  close(F.scaled_dot_product_attention(q, k, v, {mask_mod = w, score_mod = sc}), want, 1e-6)
  local bm = qkv.block_mask(w, nil, nil, 70, 70, {block = 16})
  close(F.scaled_dot_product_attention(q, k, v, {block_mask = bm, score_mod = sc}), want, 1e-6)
  -- is_causal (top-left) with a mask_mod: both apply
  local both = qkv.attention(q, k, v, {mask_mod = qkv.and_masks(w, qkv.variants.causal()), weights = false})
  close(F.scaled_dot_product_attention(q, k, v, {mask_mod = w, is_causal = true}), both, 1e-6)
  -- a float mask beside a mod: refused, with what to do instead
  local ok, err = pcall(F.scaled_dot_product_attention, q, k, v, {attn_mask = qkv.zeros(70, 70), mask_mod = w})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "scaled_dot_product_attention: a float mask")
  ok, err = pcall(F.scaled_dot_product_attention, q, k, v, {score_mod = 1})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "option 'score_mod' must be a function")
end

function TestVariantsNN:testMultiHeadAttentionTakesTheVariants()
  qkv.manual_seed(4)
  local mha = nn.MultiHeadAttention(16, 4)
  local x = qkv.randn(3, 50, 16)
  local g = qkv.variants.document_lengths({20, 30})
  local out, wts = mha(x, {mask_mod = g, score_mod = qkv.variants.alibi(4)})
  -- the same by hand, from the module's weights
  local Q = qkv.heads(qkv.project(x, mha.W_Q, mha.b_Q), 4)
  local K = qkv.heads(qkv.project(x, mha.W_K, mha.b_K), 4)
  local V = qkv.heads(qkv.project(x, mha.W_V, mha.b_V), 4)
  local o, w = qkv.attention(Q, K, V, {mask_mod = g, score_mod = qkv.variants.alibi(4)})
  close(out, qkv.project(qkv.merge(o), mha.W_O, mha.b_O), 1e-5)
  close(wts, w, 1e-6)
  -- no weight crosses a document
  lu.assertEquals(wts:narrow(3, 1, 20):narrow(4, 21, 30):abs():max():item(), 0)
end

function TestVariantsNN:testTransformerEncoderLayerTakesTheVariants()
  qkv.manual_seed(5)
  local layer = nn.TransformerEncoderLayer(16, 2, {dim_feedforward = 32, dropout = 0})
  layer:eval()
  local x = qkv.randn(2, 40, 16)
  local w = qkv.variants.sliding_window(5)
  local y = layer(x, {mask_mod = w})
  -- the window as a bool src_mask (true = masked, PyTorch's) gives the same
  local i = qkv.arange(1, 41):reshape(40, 1)
  local j = qkv.arange(1, 41):reshape(1, 40)
  local keep = j:le(i):logical_and(j:gt(i - 5))
  close(y, layer(x, {src_mask = keep:logical_not()}), 1e-5)
  local ok, err = pcall(layer, x, {mask_mod = 3})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "option 'mask_mod' must be a function")
end
