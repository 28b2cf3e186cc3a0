-- seed004.lua: the toy encoder/decoder examples of seed 004 (random inputs):
-- shapes, softmax rows, the result recomputed in float64 by util.lua's loops
-- from the returned inputs and weights, and the nn modules agreeing with it.
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")

local run = U.cached

-- the titles are printed in this order, each followed by a tensor whose
-- 4-decimal numbers are those of t (a returned tensor), if given
local function assertPrinted(stdout, list)
  local at = 1
  for _, item in ipairs(list) do
    local title, t = item[1], item[2]
    at = U.assertPrinted(stdout, title, t and U.values(t), at)
  end
end

---------------------------------------------------------------- self-attention

local SELF = "scripts/004_self_attention.lua"
local TestSeed004SelfAttention = {}

function TestSeed004SelfAttention:test_shapes()
  local r = run(SELF).results
  lu.assertEquals(r.x.shape, {5, 4})
  for _, n in ipairs{"Q", "K", "V", "output", "module_output"} do lu.assertEquals(r[n].shape, {5, 4}, n) end
  for _, n in ipairs{"W_q", "W_k", "W_v"} do lu.assertEquals(r[n].shape, {4, 4}, n) end
  lu.assertEquals(r.attn_weights.shape, {5, 5})
  lu.assertEquals(r.module_weights.shape, {5, 5})
end

function TestSeed004SelfAttention:test_seeded_input()
  -- x is randn(5, 4) right after qkv.seed(42)
  qkv.seed(42)
  U.assertClose(run(SELF).results.x, qkv.randn(5, 4):to("float64"):tolist(), 0, "x")
end

function TestSeed004SelfAttention:test_weights_are_distributions()
  U.assertRowsSumToOne(run(SELF).results.attn_weights)
end

function TestSeed004SelfAttention:test_against_loops()
  local r = run(SELF).results
  local ref = U.attention(U.values(r.x), U.values(r.x), U.values(r.W_q), U.values(r.W_k), U.values(r.W_v))
  U.assertClose(r.Q, ref.Q, 1e-5, "Q")
  U.assertClose(r.K, ref.K, 1e-5, "K")
  U.assertClose(r.V, ref.V, 1e-5, "V")
  U.assertClose(r.attn_weights, ref.weights, 1e-5, "attn_weights")
  U.assertClose(r.output, ref.out, 1e-5, "output")
end

function TestSeed004SelfAttention:test_module_agrees()
  -- qkv.nn.SelfAttention with the three weights loaded: the same layer
  local r = run(SELF).results
  local ref = U.attention(U.values(r.x), U.values(r.x), U.values(r.W_q), U.values(r.W_k), U.values(r.W_v))
  U.assertClose(r.module_output, ref.out, 1e-5, "module output")
  U.assertClose(r.module_weights, ref.weights, 1e-5, "module weights")
  U.assertClose(r.module_output, U.values(r.output), 1e-6, "module vs by hand")
end

function TestSeed004SelfAttention:test_printed()
  local r = run(SELF)
  assertPrinted(r.stdout, {
    {"Input embeddings:", r.results.x},
    {"Self-Attention weights:", r.results.attn_weights},
    {"Contextualized representations:", r.results.output},
    {"SelfAttention(d_model=4, d_k=4)"},
    {"max |output - attn(x)| = 0, max |weights - attn weights| = 0"},
  })
  -- the terminal heatmap, plain numbers under NO_COLOR, with its labels
  local tail = r.stdout:sub((r.stdout:find("rows: queries", 1, true)))
  lu.assertStrContains(tail, "q5")
  lu.assertStrContains(tail, "k5")
  lu.assertStrContains(tail, string.format("%.2f", U.values(r.results.attn_weights)[5][5]))
  lu.assertEquals(#r.pngs, 0)
end

---------------------------------------------------------------- cross-attention

local CROSS = "scripts/004_cross_attention.lua"
local TestSeed004CrossAttention = {}

function TestSeed004CrossAttention:test_shapes()
  local r = run(CROSS).results
  lu.assertEquals(r.encoder_out.shape, {5, 4})
  lu.assertEquals(r.decoder_in.shape, {3, 4})
  lu.assertEquals(r.Q.shape, {3, 4})   -- one query per decoder token
  lu.assertEquals(r.K.shape, {5, 4})   -- one key per source token
  lu.assertEquals(r.V.shape, {5, 4})
  lu.assertEquals(r.attn_weights.shape, {3, 5})
  lu.assertEquals(r.context.shape, {3, 4})
end

function TestSeed004CrossAttention:test_seeded_inputs()
  qkv.seed(42)
  local enc, dec = qkv.randn(5, 4), qkv.randn(3, 4)
  local r = run(CROSS).results
  U.assertClose(r.encoder_out, enc:to("float64"):tolist(), 0, "encoder_out")
  U.assertClose(r.decoder_in, dec:to("float64"):tolist(), 0, "decoder_in")
end

function TestSeed004CrossAttention:test_weights_are_distributions()
  U.assertRowsSumToOne(run(CROSS).results.attn_weights)
end

function TestSeed004CrossAttention:test_against_loops()
  -- Q from the decoder, K and V from the encoder
  local r = run(CROSS).results
  local ref = U.attention(U.values(r.decoder_in), U.values(r.encoder_out),
                          U.values(r.W_q), U.values(r.W_k), U.values(r.W_v))
  U.assertClose(r.Q, ref.Q, 1e-5, "Q")
  U.assertClose(r.K, ref.K, 1e-5, "K")
  U.assertClose(r.V, ref.V, 1e-5, "V")
  U.assertClose(r.attn_weights, ref.weights, 1e-5, "attn_weights")
  U.assertClose(r.context, ref.out, 1e-5, "context")
end

function TestSeed004CrossAttention:test_module_agrees()
  local r = run(CROSS).results
  local ref = U.attention(U.values(r.decoder_in), U.values(r.encoder_out),
                          U.values(r.W_q), U.values(r.W_k), U.values(r.W_v))
  U.assertClose(r.module_context, ref.out, 1e-5, "CrossAttention")
  U.assertClose(r.module_context, U.values(r.context), 1e-6, "module vs by hand")
end

function TestSeed004CrossAttention:test_printed()
  local r = run(CROSS)
  assertPrinted(r.stdout, {
    {"Decoder Q:", r.results.Q},
    {"Encoder K:", r.results.K},
    {"Cross-attention weights:", r.results.attn_weights},
    {"Cross-attention context vectors:", r.results.context},
    {"max |context - CrossAttention(decoder_in, encoder_out)| = 0"},
  })
end

function TestSeed004CrossAttention:test_png()
  local r = run(CROSS)
  U.assertPng(r, "004_cross_attention.png")
  lu.assertEquals(#r.pngs, 1)
end

return {TestSeed004SelfAttention = TestSeed004SelfAttention,
        TestSeed004CrossAttention = TestSeed004CrossAttention}
