-- test_transformer.lua: qkv.nn.TransformerEncoderLayer against
-- torch.nn.TransformerEncoderLayer on the same weights
-- (tests/fixtures/nn/torch_transformer.lua, written by torch_transformer.py):
-- post-norm and norm_first, relu and gelu, bool and float src_mask,
-- src_key_padding_mask, a (N * nhead, L, L) mask, is_causal, no bias,
-- batch_first false, unbatched input, float32 and float64, and torch's
-- gradients; then gradcheck, dropout in training, the weights' names,
-- the initialisation, printing and the errors.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local T = dofile("tests/fixtures/nn/torch_transformer.lua")
local nn = qkv.nn
local fails = R.fails

local TOL = {float32 = 1e-5, float64 = 1e-10}

-- the first number or boolean of a nested list
local function leaf(v)
  while type(v) == "table" do v = v[1] end
  return v
end

-- a nested list as a tensor: bool for booleans, else dtype
local function t(v, dtype)
  return qkv.tensor(v, type(leaf(v)) == "boolean" and "bool" or dtype)
end

-- |got - want| <= tol * max(1, |want|) everywhere, with -inf matching -inf
local function near(got, want, tol, what)
  lu.assertEquals(tostring(got.shape), tostring(want.shape), what .. ": shape")
  local g, w = got:contiguous():view(-1):tolist(), want:contiguous():view(-1):tolist()
  local worst = 0
  for i = 1, #w do
    local e = g[i] == w[i] and 0 or math.abs(g[i] - w[i]) / math.max(1, math.abs(w[i]))
    if not (e <= worst) then worst = e end
  end
  lu.assertTrue(worst <= tol, string.format("%s: error %.3g > %g", what, worst, tol))
end

-- a fixture's name and tensor as the layer holds them: the fixture keeps
-- the old layout (Linear's W (d_in, d_out) and b, LayerNorm's w and b);
-- Linear and LayerNorm now hold PyTorch's weight (d_out, d_in) and bias,
-- while self_attn keeps W_Q..W_O (d_in, d_out) and b_Q..b_O
local function held(k, v)
  local mod, p = k:match("^(linear%d)%.([Wb])$")
  if mod then
    if p == "W" then return mod .. ".weight", v:t():contiguous() end
    return mod .. ".bias", v
  end
  mod, p = k:match("^(norm%d)%.([wb])$")
  if mod then return mod .. (p == "w" and ".weight" or ".bias"), v end
  return k, v
end

-- the case's layer with its weights loaded, in eval mode
local function layer(c)
  local opts = {}
  for k, v in pairs(c.opts) do opts[k] = v end
  local m = nn.TransformerEncoderLayer(c.d_model, c.nhead, opts):to(c.dtype)
  local sd = {}
  for k, v in pairs(T.weights[c.weights]) do
    local name, w = held(k, qkv.tensor(v, "float64"))
    sd[name] = w
  end
  return m:load(sd):eval()
end

local function case(name)
  for _, c in ipairs(T.cases) do if c.name == name then return c end end
  error("no case " .. name)
end

-- the case's forward options, as torch took them
local function masks(c)
  local o = {is_causal = c.is_causal}
  if c.src_mask then o.src_mask = t(c.src_mask, c.dtype) end
  if c.src_key_padding_mask then o.src_key_padding_mask = t(c.src_key_padding_mask, c.dtype) end
  return o
end

TestTorch = {}

function TestTorch:testEveryCase()
  lu.assertTrue(#T.cases >= 18)
  for _, c in ipairs(T.cases) do
    local m = layer(c)
    local o = masks(c)
    if c.is_causal then o.src_mask = nil end      -- qkv needs no mask beside the flag
    near(m(t(c.src, c.dtype), o), t(c.out, c.dtype), TOL[c.dtype], c.name)
  end
end

-- the cases cover what they say
function TestTorch:testCasesCover()
  local seen = {}
  for _, c in ipairs(T.cases) do
    local o = c.opts
    seen[o.activation .. (o.norm_first and " pre" or " post")] = true
    if c.src_mask then seen[type(leaf(c.src_mask)) .. " mask " .. #t(c.src_mask, c.dtype).shape] = true end
    if c.src_key_padding_mask then seen[type(leaf(c.src_key_padding_mask)) .. " kpm"] = true end
    if not o.bias then seen.nobias = true end
    if not o.batch_first then seen.seqfirst = true end
    if #t(c.src, c.dtype).shape == 2 then seen.unbatched = true end
    seen[c.dtype] = true
  end
  for _, k in ipairs{"relu pre", "relu post", "gelu pre", "gelu post", "boolean mask 2",
                     "boolean mask 3", "number mask 2", "boolean kpm", "number kpm", "nobias",
                     "seqfirst", "unbatched", "float32", "float64"} do
    lu.assertTrue(seen[k], k)
  end
end

-- is_causal applies the causal mask: alone, beside the causal mask torch
-- needs with it, and as that mask alone, bool or float
function TestTorch:testIsCausal()
  local c = case("is_causal")
  local m, x, want = layer(c), t(c.src, c.dtype), t(c.out, c.dtype)
  local L = x:size(2)
  local float = qkv.where(qkv.causal(L), 0.0, -math.huge):double()
  near(m(x, {is_causal = true}), want, TOL.float64, "is_causal")
  near(m(x, {is_causal = true, src_mask = float}), want, TOL.float64, "is_causal and float mask")
  near(m(x, {src_mask = float}), want, TOL.float64, "float causal mask")
  near(m(x, {src_mask = qkv.causal(L):logical_not()}), want, TOL.float64, "bool causal mask")
  near(m(x, {is_causal = true, src_key_padding_mask = qkv.zeros(2, L, "bool")}), want,
       TOL.float64, "is_causal and a padding mask of false")
  -- without it the result differs
  lu.assertTrue((m(x) - want):abs():max():item() > 1e-3)
end

-- a bool mask and its float form (-inf where true) give one result
function TestTorch:testBoolAndFloatMasksAgree()
  local c = case("bool src_mask and padding")
  local m, x, o = layer(c), t(c.src, c.dtype), masks(c)
  local want = t(c.out, c.dtype)
  local function float(b) return qkv.where(b, -math.huge, 0.0):double() end
  near(m(x, {src_mask = float(o.src_mask), src_key_padding_mask = o.src_key_padding_mask}),
       want, TOL.float64, "float src_mask, bool padding")
  near(m(x, {src_mask = o.src_mask, src_key_padding_mask = float(o.src_key_padding_mask)}),
       want, TOL.float64, "bool src_mask, float padding")
  near(m(x, {src_mask = float(o.src_mask):float(),
             src_key_padding_mask = float(o.src_key_padding_mask)}),
       want, TOL.float64, "a float32 mask on a float64 layer")
end

-- the gradients of sum(out * R) for every weight and for src, as torch's
function TestTorch:testGradients()
  local c = case("gradients")
  local m = layer(c)
  local x = t(c.src, c.dtype):requires_grad_()
  ;(m(x, masks(c)) * t(c.R, c.dtype)):sum():backward()
  local grads = {}
  for k, v in pairs(c.grads) do
    local name, g = held(k, t(v, c.dtype))
    grads[name] = g
  end
  local n = 0
  for name, p in m:named_parameters() do
    lu.assertNotNil(grads[name], name)
    near(p.grad, grads[name], TOL.float64, "grad of " .. name)
    n = n + 1
  end
  local want = 0
  for _ in pairs(grads) do want = want + 1 end
  lu.assertEquals(n, want)
  near(x.grad, t(c.grad_src, c.dtype), TOL.float64, "grad of src")
end

TestLayer = {}

-- qkv's gradients against finite differences, in src and in the weights,
-- post-norm and norm_first, with a mask and with a float mask
function TestLayer:testGradcheck()
  qkv.seed(5)
  for _, norm_first in ipairs{false, true} do
    local m = nn.TransformerEncoderLayer(4, 2, {dim_feedforward = 6, dropout = 0,
                                                activation = norm_first and "gelu" or "relu",
                                                norm_first = norm_first}):double()
    local mask = qkv.tensor({{false, true, false}, {false, false, true}, {false, false, false}})
    local fmask = qkv.randn(3, 3, "float64")
    local x = qkv.randn(2, 3, 4, "float64")
    lu.assertTrue(qkv.test.gradcheck(function(src) return m(src, {src_mask = mask}) end, {x}))
    lu.assertTrue(qkv.test.gradcheck(function(src) return m(src, {src_mask = fmask}) end, {x}))
    local a = m.self_attn
    lu.assertTrue(qkv.test.gradcheck(function(wq, w1, nw, src)
      a.W_Q, m.linear1.weight, m.norm2.weight = wq, w1, nw
      return m(src, {is_causal = true})
    end, {a.W_Q:detach(), m.linear1.weight:detach(), m.norm2.weight:detach(), x}))
  end
end

-- PyTorch's weights in PyTorch's order: the Linears' and LayerNorms'
-- under PyTorch's names, self_attn's under the documents' W_Q..b_O
function TestLayer:testParameters()
  local m = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16})
  local names = {}
  for name in m:named_parameters() do names[#names + 1] = name end
  lu.assertEquals(names, {"self_attn.W_Q", "self_attn.b_Q", "self_attn.W_K", "self_attn.b_K",
                          "self_attn.W_V", "self_attn.b_V", "self_attn.W_O", "self_attn.b_O",
                          "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                          "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"})
  -- torch's count: 4 (8 * 8 + 8) + 2 (8 * 16) + 16 + 8 + 4 * 8
  lu.assertEquals(m:nparams(), 4 * 72 + 256 + 24 + 32)
  lu.assertEquals(tostring(m.linear1.weight.shape), "(16, 8)")
  local nb = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, bias = false})
  lu.assertEquals(nb:nparams(), 4 * 64 + 256 + 16)
  lu.assertNil(nb.norm1.bias)
end

-- PyTorch's init: xavier-uniform in_proj, zero biases in the attention;
-- the default dim_feedforward and dropout are PyTorch's
function TestLayer:testInit()
  qkv.seed(1)
  local m = nn.TransformerEncoderLayer(64, 4)
  local bound = math.sqrt(6 / (64 + 3 * 64))
  for _, n in ipairs{"Q", "K", "V"} do
    local w = m.self_attn["W_" .. n]
    lu.assertTrue(w:abs():max():item() <= bound)
    lu.assertTrue(w:abs():max():item() > 0.95 * bound)
    lu.assertEquals(m.self_attn["b_" .. n]:abs():max():item(), 0)
  end
  lu.assertEquals(m.self_attn.b_O:abs():max():item(), 0)
  lu.assertEquals(m.dim_feedforward, 2048)
  lu.assertEquals(m.dropout.p, 0.1)
  lu.assertEquals(m.attn_dropout, 0.1)
  lu.assertTrue(m.self_attn.W_Q.requires_grad)
end

-- dropout while training (on the weights and the three Dropouts), none in
-- eval(); dropout 0 trains as it evaluates
function TestLayer:testDropout()
  qkv.seed(2)
  local m = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0.5}):double()
  local x = qkv.randn(2, 5, 8, "float64")
  local a, b = m(x), m(x)
  lu.assertTrue((a - b):abs():max():item() > 1e-3)
  m:eval()
  lu.assertFalse(m.dropout1.training)
  lu.assertEquals((m(x) - m(x)):abs():max():item(), 0)
  local m0 = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0}):double()
  near(m0(x, {is_causal = true}), m0:eval()(x, {is_causal = true}), 0, "dropout 0")
  -- the attention's own dropout: the three Dropouts at 0, attn_dropout 1
  -- drops every weight, so the attention adds only W_O's bias
  m0:train()
  m0.attn_dropout = 1
  local ln = m0.norm1
  local want = ln(x + m0.self_attn.b_O)
  want = m0.norm2(want + m0.linear2(qkv.relu(m0.linear1(want))))
  near(m0(x), want, 1e-12, "attention dropout 1")
end

-- an activation given as a function, and the layer as PyTorch prints it
function TestLayer:testActivationFunctionAndPrint()
  local c = case("gelu post-norm")
  local m = layer(c)
  m.activation = qkv.gelu
  near(m(t(c.src, c.dtype)), t(c.out, c.dtype), TOL.float64, "activation = qkv.gelu")
  local opts = {}
  for k, v in pairs(c.opts) do opts[k] = v end
  opts.activation = nn.GELU()
  local g = nn.TransformerEncoderLayer(c.d_model, c.nhead, opts):double():load(m):eval()
  near(g(t(c.src, c.dtype)), t(c.out, c.dtype), TOL.float64, "activation = nn.GELU()")
  lu.assertStrContains(tostring(g), "activation=GELU(), ")
  local p = tostring(nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16}))
  lu.assertStrContains(p, "TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, "
                          .. "activation=relu, norm_first=false, batch_first=true\n")
  lu.assertStrContains(p, "  (self_attn): MultiHeadAttention(d_model=8, h=2, bias=true)\n")
  lu.assertStrContains(p, "  (dropout2): Dropout(p=0.1)\n)")
end

function TestLayer:testErrors()
  local TEL = nn.TransformerEncoderLayer
  fails("TransformerEncoderLayer: d_model = 6 is not divisible by nhead = 4", TEL, 6, 4)
  fails("TransformerEncoderLayer: nhead must be a positive integer, got 0", TEL, 8, 0)
  fails("TransformerEncoderLayer: unknown option 'norm_frist' (did you mean 'norm_first'?)",
        TEL, 8, 2, {norm_frist = true})
  fails("TransformerEncoderLayer: activation must be \"relu\", \"gelu\", a function or a module, "
        .. "got \"tanh\"", TEL, 8, 2, {activation = "tanh"})
  fails("TransformerEncoderLayer: activation must be \"relu\", \"gelu\", a function or a module, "
        .. "got table", TEL, 8, 2, {activation = {}})
  fails("TransformerEncoderLayer: dropout must be a number in [0, 1], got 2", TEL, 8, 2, {dropout = 2})
  fails("TransformerEncoderLayer: option 'batch_first' must be a boolean", TEL, 8, 2, {batch_first = 1})
  local m = TEL(8, 2, {dim_feedforward = 16})
  local x = qkv.randn(2, 5, 8)
  fails("TransformerEncoderLayer: src is (2, 5, 6): expected (N, L, 8) or (L, 8)", m, qkv.randn(2, 5, 6))
  fails("TransformerEncoderLayer: src is (2, 5, 6): expected (L, N, 8) or (L, 8)",
        TEL(8, 2, {batch_first = false}), qkv.randn(2, 5, 6))
  fails("TransformerEncoderLayer: masks come as options: m(src, {src_mask = m, "
        .. "src_key_padding_mask = pad})", m, x, qkv.causal(5))
  fails("TransformerEncoderLayer: unknown option 'mask'", m, x, {mask = qkv.causal(5)})
  fails("TransformerEncoderLayer: src_mask is (4, 4) but src has L = 5: expected (5, 5) or "
        .. "(N * nhead, 5, 5) = (4, 5, 5)", m, x, {src_mask = qkv.causal(4)})
  fails("TransformerEncoderLayer: src_key_padding_mask is (5, 2) but src is (2, 5, 8): expected "
        .. "(N, L) = (2, 5)", m, x, {src_key_padding_mask = qkv.zeros(5, 2, "bool")})
  fails("TransformerEncoderLayer: src_mask must be bool (true = not allowed) or float (added to "
        .. "the scores), got int64", m, x, {src_mask = qkv.zeros(5, 5, "int64")})
  fails("TransformerEncoderLayer: option 'is_causal' must be a boolean", m, x, {is_causal = 1})
  fails("TransformerEncoderLayer: src must be a tensor, got nil", m)
end
