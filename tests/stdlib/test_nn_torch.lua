-- test_nn_torch.lua: the qkv.nn pieces PyTorch users reach for first, against
-- PyTorch's values (tests/fixtures/nn/torch_nn.lua, written by torch_nn.py):
-- the modules ReLU, SiLU, Tanh and Softmax(dim) (1-based dims), the
-- container ModuleList (and Sequential's negative positions), and
-- qkv.nn.functional: its aliases, F.linear with PyTorch's (out, in) weight
-- and F.scaled_dot_product_attention with PyTorch's masks (bool: true =
-- takes part; float: added), is_causal aligned to the first key, scale and
-- dropout_p; their gradients and their errors.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local P = dofile("tests/fixtures/nn/torch_nn.lua")
local nn = qkv.nn
local F = qkv.nn.functional
local fails = R.fails

local TOL = {float32 = 1e-5, float64 = 1e-12}

local function leaf(v)
  while type(v) == "table" do v = v[1] end
  return v
end

local function t(v, dtype)
  return qkv.tensor(v, type(leaf(v)) == "boolean" and "bool" or dtype or "float64")
end

-- |got - want| <= tol * max(1, |want|), NaN matching NaN and ±inf itself
local function near(got, want, tol, what)
  lu.assertEquals(tostring(got.shape), tostring(want.shape), what .. ": shape")
  local g, w = got:contiguous():view(-1):tolist(), want:contiguous():view(-1):tolist()
  for i = 1, #w do
    local ok
    if w[i] ~= w[i] then ok = g[i] ~= g[i]
    elseif w[i] == math.huge or w[i] == -math.huge then ok = g[i] == w[i]
    else ok = math.abs(g[i] - w[i]) <= tol * math.max(1, math.abs(w[i])) end
    lu.assertTrue(ok, string.format("%s [%d]: %.17g, PyTorch %.17g", what, i, g[i], w[i]))
  end
end

---------------------------------------------------------------- activations

TestActivations = {}

function TestActivations:testAgainstTorch()
  local x = t(P.x)
  for name, want in pairs(P.modules) do
    near(nn[name]()(x), t(want), TOL.float64, name)
    near(nn[name]()(x:float()), t(want, "float32"), TOL.float32, name .. " float32")
    lu.assertEquals(tostring(nn[name]()), name .. "()")
    lu.assertEquals(nn[name]():nparams(), 0)
  end
  lu.assertEquals(#P.softmax, 5)
  for _, c in ipairs(P.softmax) do
    local m = nn.Softmax(c.dim)
    near(m(x), t(c.out), TOL.float64, "Softmax(" .. c.dim .. ")")
    near(nn.Softmax{dim = c.dim}(x), t(c.out), TOL.float64, "Softmax{dim = " .. c.dim .. "}")
    lu.assertEquals(tostring(m), "Softmax(dim=" .. c.dim .. ")")
  end
end

-- they record gradients, as the functions do
function TestActivations:testGradients()
  local x = qkv.randn(3, 4, "float64")
  for _, m in ipairs{nn.ReLU(), nn.SiLU(), nn.Tanh(), nn.Softmax(1), nn.Softmax(-1)} do
    lu.assertTrue(qkv.test.gradcheck(function(a) return m(a) end, {x}), tostring(m))
  end
end

function TestActivations:testErrors()
  fails("ReLU: expected no arguments, got 1 (table): qkv's activations have no inplace",
        nn.ReLU, {inplace = true})
  fails("SiLU: expected no arguments, got 1 (boolean)", nn.SiLU, true)
  fails("Tanh: x must be a tensor, got number", nn.Tanh(), 1)
  fails("Softmax: dim is required, as in new PyTorch code: Softmax(-1) for the last dim",
        nn.Softmax)
  fails("Softmax: dim must be a nonzero integer (1-based, or negative from the end), got 0",
        nn.Softmax, 0)
  fails("Softmax: dim must be a nonzero integer", nn.Softmax, 1.5)
  fails("Softmax: unknown option 'dims' (did you mean 'dim'?)", nn.Softmax, {dims = 1})
  fails("Softmax: expected Softmax(dim) or Softmax{dim = d}", nn.Softmax, 1, 2)
  fails("Softmax: dim 3 is out of range for x (2, 2) (1 to 2, or -2 to -1)",
        nn.Softmax(3), qkv.ones(2, 2))
  fails("Softmax: dim -3 is out of range", nn.Softmax(-3), qkv.ones(2, 2))
end

---------------------------------------------------------------- ModuleList

TestModuleList = {}

function TestModuleList:testList()
  local a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
  local l = nn.ModuleList{a, b}
  lu.assertEquals(#l, 2)
  lu.assertIs(l:append(c), l)
  lu.assertEquals(#l, 3)
  lu.assertIs(l[1], a)
  lu.assertIs(l[3], c)
  lu.assertIs(l[-1], c)
  lu.assertIs(l[-3], a)
  lu.assertNil(l[4])
  lu.assertNil(l[-4])
  local seen = {}
  for i, m in ipairs(l) do seen[i] = m end
  lu.assertEquals(#seen, 3)
  lu.assertIs(seen[2], b)
  lu.assertEquals(#nn.ModuleList(), 0)
  -- a forward through its modules
  local x = qkv.randn(4, 2)
  local y = x
  for _, m in ipairs(l) do y = m(y) end
  lu.assertEquals((y - c(b(a(x)))):abs():max():item(), 0)
end

-- weights named by 1-based position, as Sequential's, also inside a module
function TestModuleList:testParameters()
  local l = nn.ModuleList{nn.Linear(2, 3), nn.GELU()}
  l:extend{nn.Linear(3, 4)}
  local names = {}
  for name, p in l:named_parameters() do names[#names + 1] = name .. " " .. tostring(p.shape) end
  lu.assertEquals(names, {"1.weight (3, 2)", "1.bias (3,)", "3.weight (4, 3)", "3.bias (4,)"})
  lu.assertEquals(#l:parameters(), 4)
  lu.assertEquals(l:nparams(), 6 + 3 + 12 + 4)
  local holder = nn.Linear(1, 2)
  holder.layers = l                       -- registered, as PyTorch's setattr
  local held = {}
  for name in holder:named_parameters() do held[#held + 1] = name end
  lu.assertEquals(held[3], "layers.1.weight")
  lu.assertIs(holder:parameters()[3], l[1].weight)
  lu.assertIs(holder:state_dict()["layers.3.bias"], l[3].bias)
  -- to, train and load reach its modules
  l:double()
  lu.assertEquals(l[3].weight.dtype, "float64")
  lu.assertFalse(l:eval()[1].training)
  local other = nn.ModuleList{nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 4)}
  l:load(other)
  lu.assertEquals((l[3].weight - other[3].weight:double()):abs():max():item(), 0)
end

function TestModuleList:testInsertAndPrint()
  local l = nn.ModuleList{nn.ReLU(), nn.Tanh()}
  lu.assertIs(l:insert(2, nn.SiLU()), l)
  lu.assertIs(l:insert(-1, nn.GELU()), l)
  l:insert(5, nn.Identity())
  lu.assertEquals(tostring(l), "ModuleList(\n  (1): ReLU()\n  (2): SiLU()\n  (3): GELU()\n"
                               .. "  (4): Tanh()\n  (5): Identity()\n)")
  lu.assertEquals(#l, 5)
end

function TestModuleList:testSequentialNegativePositions()
  local s = nn.Sequential(nn.Linear(2, 2), nn.GELU())
  lu.assertIs(s[-1], s[2])
  lu.assertIs(s[-2], s[1])
  lu.assertNil(s[-3])
  fails("Sequential: index 0: positions count from 1", function() return s[0] end)
end

-- m[i] = module replaces position i (-1 the last), as PyTorch's
-- __setitem__; past the end is an error (PyTorch's IndexError), as is a
-- hole or something not a module; the same for Sequential
function TestModuleList:testAssignment()
  local a, b, c = nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2)
  local l = nn.ModuleList{a, b}
  l[2] = c
  lu.assertIs(l[2], c)
  lu.assertIs(l:parameters()[3], c.weight)
  l[-1] = b
  lu.assertIs(l[2], b)
  l[-2] = c
  lu.assertIs(l[1], c)
  l[1.0] = a
  lu.assertIs(l[1], a)
  local msg = "ModuleList: index %d is out of range: it has 2 modules (1 to 2, or -2 to -1)"
  fails(msg:format(3) .. "; m:append(module) adds one", function() l[3] = c end)
  fails(msg:format(-3), function() l[-3] = c end)
  fails(msg:format(10), function() l[10] = c end)
  fails("ModuleList: index 0: positions count from 1", function() l[0] = c end)
  fails("ModuleList: m[2] = nil would leave a hole: a ModuleList holds modules", function() l[2] = nil end)
  fails("ModuleList: m[1] must be a module, got number", function() l[1] = 5 end)
  fails("ModuleList: index must be an integer, got 1.5", function() l[1.5] = c end)
  fails("ModuleList: m.extra = module: a ModuleList holds its modules at positions 1, 2, ...",
        function() l.extra = c end)
  lu.assertEquals(#l, 2)
  local n = 0
  for _ in ipairs(l) do n = n + 1 end
  lu.assertEquals(n, 2)
  lu.assertEquals(#l:parameters(), 4)
  -- Sequential: its forward runs what was put in
  local s = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
  s[-1] = nn.Tanh()
  local x = qkv.randn(4, 2)
  lu.assertEquals((s(x) - qkv.tanh(s[1](x))):abs():max():item(), 0)
  fails("Sequential: index 3 is out of range: it has 2 modules (1 to 2, or -2 to -1)",
        function() s[3] = nn.ReLU() end)
  lu.assertEquals(#s, 2)
end

function TestModuleList:testErrors()
  local l = nn.ModuleList{nn.ReLU()}
  fails("ModuleList: index 0: positions count from 1 (m[1] is the first module, m[-1] the last)",
        function() return l[0] end)
  fails("ModuleList: a ModuleList has no forward, as PyTorch's: call its modules", l, qkv.ones(2))
  fails("ModuleList: modules must be a list of modules, got a Linear: put it in a list, {m}",
        nn.ModuleList, nn.Linear(2, 2))
  fails("ModuleList: modules[2] is not a module, got number", nn.ModuleList, {nn.ReLU(), 3})
  fails("ModuleList: modules must be a list of modules, got a tensor", nn.ModuleList, qkv.ones(2))
  fails("ModuleList: expected ModuleList([modules]), one list", nn.ModuleList, {}, {})
  fails("append: module is not a module, got a tensor", function() l:append(qkv.ones(2)) end)
  fails("extend: modules[1] is not a module, got string", function() l:extend{"relu"} end)
  lu.assertEquals(#l, 1)                  -- nothing added by a failed extend
  fails("insert: index must be an integer in 1..2 or -1..-1 (positions count from 1), got 0",
        function() l:insert(0, nn.ReLU()) end)
  fails("insert: index must be an integer in 1..2", function() l:insert(3, nn.ReLU()) end)
end

---------------------------------------------------------------- functional

TestFunctional = {}

-- the aliases are qkv's own functions
function TestFunctional:testAliases()
  for _, name in ipairs{"relu", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax",
                        "layer_norm", "dropout", "embedding"} do
    lu.assertIs(F[name], qkv[name], name)
  end
  lu.assertIs(F.cosine_similarity, nn.cosine_similarity)
  lu.assertIs(F.mse_loss, nn.mse_loss)
  lu.assertIs(F.cross_entropy, nn.cross_entropy)
  lu.assertIs(qkv.nn.functional, F)
  fails("qkv.nn.functional has no function 'relux' (did you mean 'relu'?)", function()
    return F.relux
  end)
  fails("qkv.nn.functional has no function 'pad'", function() return F.pad end)
  lu.assertNil(F._private)
  -- PyTorch's keyword for mse_loss
  local a, b = qkv.tensor{1, 2}, qkv.tensor{0, 0}
  lu.assertEquals(F.mse_loss(a, b, {reduction = "sum"}):item(), 5)
  lu.assertEquals(F.mse_loss(a, b, "mean"):item(), 2.5)
  fails("mse_loss: unknown option 'reduce'", F.mse_loss, a, b, {reduce = "sum"})
end

function TestFunctional:testLinearAgainstTorch()
  local c = P.linear
  local x, w, b = t(c.x), t(c.weight), t(c.bias)
  near(F.linear(x, w, b), t(c.out), TOL.float64, "linear")
  near(F.linear(x, w), t(c.out_nobias), TOL.float64, "linear without bias")
  near(F.linear(x:float(), w:float(), b:float()), t(c.out, "float32"), TOL.float32, "linear float32")
  -- an nn.Linear's weight is PyTorch's (out, in), F.linear's own layout
  local m = nn.Linear(5, 4):double()
  near(F.linear(x, m.weight, m.bias), m(x), TOL.float64, "linear and Linear")
  lu.assertTrue(qkv.test.gradcheck(function(a, W, bb) return F.linear(a, W, bb) end,
                                   {x[1], w, b}))
end

function TestFunctional:testLinearErrors()
  local x = qkv.randn(3, 5)
  fails("linear: input is (3, 5) but weight is (5, 4): in_features 5 ≠ 4 (weight is "
        .. "(out_features, in_features), as PyTorch's; qkv.project takes qkv's (in, out))",
        F.linear, x, qkv.randn(5, 4))
  fails("linear: weight must be (out_features, in_features) or (in_features,), got (2, 2, 5)",
        F.linear, x, qkv.randn(2, 2, 5))                     -- a 1-D weight is PyTorch's too
  fails("linear: bias is (5,) but weight is (4, 5): expected (out_features,) = (4,)",
        F.linear, x, qkv.randn(4, 5), qkv.randn(5))
  fails("linear: input must be a tensor, got table", F.linear, {1}, qkv.randn(4, 5))
end

---------------------------------------------------------------- SDPA

local SDPA = F.scaled_dot_product_attention

local function sdpa_opts(c)
  local o = {}
  if c.attn_mask then o.attn_mask = t(c.attn_mask, c.dtype) end
  o.is_causal, o.scale = c.is_causal, c.scale
  return o
end

function TestFunctional:testSdpaAgainstTorch()
  lu.assertEquals(#P.sdpa, 10)
  for _, c in ipairs(P.sdpa) do
    local q, k, v = t(c.q, c.dtype), t(c.k, c.dtype), t(c.v, c.dtype)
    near(SDPA(q, k, v, sdpa_opts(c)), t(c.out, c.dtype), TOL[c.dtype], c.name)
  end
end

-- a bool mask takes part where true; the float form of it (0 and -inf)
-- gives the same; its negation is another result
function TestFunctional:testSdpaMaskPolarity()
  local c = P.sdpa[1]
  lu.assertEquals(c.name, "bool mask")
  local q, k, v, m = t(c.q), t(c.k), t(c.v), t(c.attn_mask)
  local want = t(c.out)
  near(SDPA(q, k, v, {attn_mask = qkv.where(m, 0.0, -math.huge):double()}), want, TOL.float64,
       "bool mask as float")
  lu.assertTrue((SDPA(q, k, v, {attn_mask = m:logical_not()}) - want):abs():max():item() > 1e-3)
  -- the row that takes no key gives 0, as torch's
  lu.assertEquals(want[{{}, 2}]:abs():max():item(), 0)
end

-- PyTorch's float mask (0 and -inf, added) given to qkv.attention, whose
-- mask is true (or 1) = may attend: an error that says what to use, in
-- both paths and under autograd, where read as non-zero = may attend it
-- put the weights exactly on the masked keys. Its bool form, m:eq(0), and
-- a 0/1 float mask give torch's values; so does F's attn_mask, which adds it.
function TestFunctional:testAttentionRefusesAnAdditiveMask()
  local c = P.sdpa[1]
  lu.assertEquals(c.name, "bool mask")
  local q, k, v, keep, want = t(c.q), t(c.k), t(c.v), t(c.attn_mask), t(c.out)
  local additive = qkv.where(keep, 0.0, -math.huge):double()
  near(SDPA(q, k, v, {attn_mask = additive}), want, TOL.float64, "F adds it")
  local A = "attention: mask is float64 (3, 5) with values other than 0 and 1 (from -inf to 0.0)"
  for _, weights in ipairs{true, false} do
    local msg = fails({A, "pass mask = m:eq(0)",
                       "F.scaled_dot_product_attention(q, k, v, {attn_mask = m})"},
                      qkv.attention, q, k, v, {mask = additive, weights = weights})
    lu.assertStrContains(msg, "qkv's mask is true (or 1) where a query may attend")
    fails(A, qkv.attention, q:clone():requires_grad_(), k, v, {mask = additive, weights = weights})
    near(qkv.attention(q, k, v, {mask = additive:eq(0), weights = weights}), want, TOL.float64,
         "its bool form")
    near(qkv.attention(q, k, v, {mask = keep:double(), weights = weights}), want, TOL.float64,
         "a 0/1 float mask")
    near(qkv.attention(q, k, v, {mask = keep:float(), weights = weights}), want, TOL.float64,
         "a 0/1 float32 mask")
  end
  -- the fixture's other float mask (0.25, -inf and randn values)
  local f = P.sdpa[2]
  lu.assertEquals(f.name, "float mask")
  local fq = t(f.q)
  fails("attention: mask is float64 (2, 3, 5) with values other than 0 and 1", qkv.attention,
        fq, t(f.k), t(f.v), {mask = t(f.attn_mask)})
  near(SDPA(fq, t(f.k), t(f.v), {attn_mask = t(f.attn_mask)}), t(f.out), TOL.float64, f.name)
  -- all 0: every key masked as qkv's mask, none as PyTorch's
  fails({"attention: mask is float64 (3, 5) and all 0", "pass a bool mask"},
        qkv.attention, q, k, v, {mask = qkv.zeros(3, 5, "float64")})
  -- the modules that take qkv's mask pass it to qkv.attention
  local mha = nn.MultiHeadAttention(4, 2):double()
  fails("attention: mask is float64 (3, 5) with values other than 0 and 1", mha, q[1], k[1], k[1],
        {mask = additive})
  near(mha(q[1], k[1], k[1], {mask = additive:eq(0)}), mha(q[1], k[1], k[1], {mask = keep}),
       TOL.float64, "MultiHeadAttention with the bool form")
end

-- dropout_p drops the weights (always, as torch's F does), from qkv's
-- generator: 1 drops them all
function TestFunctional:testSdpaDropout()
  local q, k, v = qkv.randn(2, 3, 4, "float64"), qkv.randn(2, 5, 4, "float64"), qkv.randn(2, 5, 3, "float64")
  lu.assertEquals(SDPA(q, k, v, {dropout_p = 1}):abs():max():item(), 0)
  qkv.seed(4)
  local a = SDPA(q, k, v, {dropout_p = 0.5})
  qkv.seed(4)
  local b = SDPA(q, k, v, {dropout_p = 0.5})
  lu.assertEquals((a - b):abs():max():item(), 0)
  lu.assertTrue((a - SDPA(q, k, v)):abs():max():item() > 1e-3)
  -- the dropped weights, by hand: those that survive scaled by 2
  local _, w = qkv.attention(q, k, v)
  qkv.seed(4)
  local want = qkv.dropout(w, 0.5):matmul(v)
  near(a, want, 1e-12, "dropout by hand")
end

function TestFunctional:testSdpaGradients()
  local q, k, v = qkv.randn(2, 3, 4, "float64"), qkv.randn(2, 5, 4, "float64"), qkv.randn(2, 5, 3, "float64")
  local fm = qkv.randn(3, 5, "float64")
  local bm = qkv.tensor{{true, false, true, true, false}, {true, true, true, false, false},
                        {false, false, false, false, true}}
  for _, o in ipairs{{}, {attn_mask = fm}, {attn_mask = bm}, {is_causal = true}, {scale = 0.5}} do
    lu.assertTrue(qkv.test.gradcheck(function(a, b, c) return SDPA(a, b, c, o) end, {q, k, v}))
  end
end

function TestFunctional:testSdpaErrors()
  local q, k, v = qkv.randn(3, 4), qkv.randn(5, 4), qkv.randn(5, 2)
  local m = qkv.ones(3, 5, "bool")
  local S = "scaled_dot_product_attention: "
  fails(S .. "attn_mask and is_causal = true together, which PyTorch refuses too: give one",
        SDPA, q, k, v, {attn_mask = m, is_causal = true})
  fails(S .. "attn_mask must be bool (true = takes part) or float (added to the scores), got int64",
        SDPA, q, k, v, {attn_mask = qkv.ones(3, 5, "int64")})
  fails(S .. "the mask comes as an option, F.scaled_dot_product_attention(q, k, v, {attn_mask = m})",
        SDPA, q, k, v, m)
  fails(S .. "enable_gqa needs Q, K and V with a heads dim (..., H, n, d), got Q (3, 4), K (5, 4) and V (5, 2)",
        SDPA, q, k, v, {enable_gqa = true})
  fails(S .. "unknown option 'attn_msk' (did you mean 'attn_mask'?)", SDPA, q, k, v, {attn_msk = m})
  fails(S .. "dropout_p must be a number in [0, 1], got 1.5", SDPA, q, k, v, {dropout_p = 1.5})
  fails(S .. "scale must be a number, got string", SDPA, q, k, v, {scale = "1"})
  fails(S .. "option 'is_causal' must be a boolean", SDPA, q, k, v, {is_causal = 1})
  fails(S .. "key must be a tensor, got nil", SDPA, q)
  fails({S, "(3, 4)", "(5, 3)"}, SDPA, q, qkv.randn(5, 3), v)
  fails(S .. "attention: mask of shape (4, 5) does not broadcast to the scores' shape (3, 5)",
        SDPA, q, k, v, {attn_mask = qkv.ones(4, 5, "bool")})
  fails(S .. "mask of shape (4, 5) does not broadcast to the scores' shape (3, 5)",
        SDPA, q, k, v, {attn_mask = qkv.ones(4, 5)})
end
