-- test_state_dict_torch.lua: state_dicts that PyTorch saved as safetensors
-- (tests/fixtures/nn/state_dicts/, written by
-- tests/fixtures/nn/torch_state_dicts.py) load into the same architecture
-- built in qkv with m:load_state_dict and give PyTorch's outputs: Linear,
-- LayerNorm, Embedding, MultiheadAttention (its packed in_proj) and
-- TransformerEncoderLayer; and load_state_dict's strict and non-strict
-- answers and errors, as PyTorch's.
local lu = require "luaunit"
local fails = dofile("tests/helpers/attn_ref.lua").fails
local nn = qkv.nn

local DIR = "tests/fixtures/nn/state_dicts/"
local IO = qkv.load_safetensors(DIR .. "io.safetensors")

local function sd(name) return (qkv.load_safetensors(DIR .. name .. ".safetensors")) end

-- max |a - b| over max |b|: float32 on both sides, so within a few ulps
local function close(a, b, what)
  a, b = a:detach():cpu():double(), b:detach():cpu():double()
  lu.assertEquals(a.shape, b.shape, what)
  local err = (a - b):abs():max():item() / math.max(1, b:abs():max():item())
  lu.assertTrue(err < 1e-6, string.format("%s: %.3g off", what, err))
end

TestTorchStateDicts = {}

function TestTorchStateDicts:testLinearLayerNormEmbedding()
  local lin = nn.Linear(5, 3)
  local r = lin:load_state_dict(sd("linear"))
  lu.assertEquals(r, {missing_keys = {}, unexpected_keys = {}})
  close(lin(IO["linear.x"]), IO["linear.y"], "Linear")
  close(lin.weight, sd("linear").weight, "Linear.weight as PyTorch's")
  local ln = nn.LayerNorm(5)
  ln:load_state_dict(sd("layernorm"))
  close(ln(IO["layernorm.x"]), IO["layernorm.y"], "LayerNorm")
  local emb = nn.Embedding(7, 4)
  emb:load_state_dict(sd("embedding"))
  close(emb(IO["embedding.x"] + 1), IO["embedding.y"], "Embedding (ids from 1)")
end

-- PyTorch's packed in_proj_weight (3E, E) becomes W_Q, W_K, W_V
function TestTorchStateDicts:testMultiheadAttention()
  local mha = nn.MultiHeadAttention(8, 2, {bias = true})
  lu.assertEquals(mha:load_state_dict(sd("mha")).missing_keys, {})
  local x = IO["mha.x"]
  close(mha(x, x, x), IO["mha.y"], "MultiheadAttention")
  close(mha.W_K, sd("mha").in_proj_weight:narrow(1, 9, 8):t(), "W_K is in_proj's second block")
end

function TestTorchStateDicts:testTransformerEncoderLayer()
  local tel = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0})
  tel:eval()
  lu.assertEquals(tel:load_state_dict(sd("tel")), {missing_keys = {}, unexpected_keys = {}})
  close(tel(IO["tel.x"]), IO["tel.y"], "TransformerEncoderLayer")
  -- and back: qkv's own state_dict loads into another, outputs equal
  local again = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0}):eval()
  again:load_state_dict(tel:state_dict())
  close(again(IO["tel.x"]), IO["tel.y"], "qkv's state_dict round trip")
end

function TestTorchStateDicts:testStrictAndNot()
  local lin = nn.Linear(5, 3)
  local s = sd("linear")
  s.bias, s.extra = nil, qkv.ones(1)
  fails({"load_state_dict: Linear's state_dict does not fit", 'missing key(s) "bias"',
         'unexpected key(s) "extra"'}, lin.load_state_dict, lin, s)
  local before = lin.weight:clone()
  lu.assertTrue(qkv.allclose(lin.weight, before, 0, 0))     -- nothing copied
  local r = lin:load_state_dict(s, {strict = false})
  lu.assertEquals(r, {missing_keys = {"bias"}, unexpected_keys = {"extra"}})
  close(lin.weight, s.weight, "the weight it had")
  -- a shape that differs is an error even when not strict, as PyTorch's
  s.weight = qkv.ones(5, 3)
  fails("weight is (3, 5) here but (5, 3) in the source", lin.load_state_dict, lin, s, {strict = false})
  fails("load_state_dict: unknown option 'stric'", lin.load_state_dict, lin, s, {stric = false})
  local mha = nn.MultiHeadAttention(8, 2)
  fails("in_proj_weight must be a (24, 8) tensor", mha.load_state_dict, mha,
        {in_proj_weight = qkv.ones(8, 8)})
end
