-- test_nn_parameters.lua: what a qkv.nn module holds (docs/autograd.md,
-- "qkv.nn"): load/state_dict and to(dtype), named_parameters, a module or
-- weight held in two places listed once, a module inside itself, a
-- parameter or submodule set to nil (PyTorch's `= None`) and a module
-- assigned to a new field, through every Module method; a forward that
-- needs what was removed or replaced, or that reaches its own module
-- again. The modules' forwards are test_nn_forward.lua's.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local nn = qkv.nn

math.randomseed(20261121)
local T, close, fails = R.T, R.close, R.fails
local function rt(shape) return (R.mk(shape, "float32")) end

-- the reference of x W (+ b) for a bare (d_in, d_out) W; a Linear's is its weight:t()
local function lin(x, W, b) return R.project(T(x), T(W), b and T(b)) end

TestState = {}

function TestState:testLoadCopiesEveryWeight()
  local a, b = nn.AlignedCrossAttention(12, 8, 2, "mlp"), nn.AlignedCrossAttention(12, 8, 2, "mlp")
  local text, image = rt{3, 8}, rt{4, 12}
  lu.assertTrue((a(text, image) - b(text, image)):abs():max():item() > 0)
  b:load(a)
  lu.assertEquals((a(text, image) - b(text, image)):abs():max():item(), 0)
  -- copies, not shared: changing a leaves b alone
  qkv.no_grad(function() a.cross_attn.W_O[1] = 0 end)   -- a parameter: written under no_grad
  lu.assertTrue(b.cross_attn.W_O[1]:abs():sum():item() > 0)
  local names = {}
  for name in b:named_parameters() do names[#names + 1] = name end
  lu.assertEquals(names, {"aligner.proj.1.weight", "aligner.proj.1.bias", "aligner.proj.3.weight",
    "aligner.proj.3.bias", "cross_attn.W_Q", "cross_attn.W_K", "cross_attn.W_V", "cross_attn.W_O"})
end

function TestState:testLoadFromStateDict()
  local a, b = nn.SelfAttention(4, 2), nn.SelfAttention(4, 2)
  b:load(a:state_dict())
  lu.assertEquals((a.W_V - b.W_V):abs():max():item(), 0)
end

-- load copies into the parameters themselves, as load_state_dict does:
-- whoever holds them (an optimizer) sees the new values
function TestState:testLoadKeepsTheTensors()
  qkv.seed(4)
  local m, src = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
  local held = {}
  for name, p in m:named_parameters() do held[name] = p end
  local opt = qkv.optim.SGD(m, {lr = 0.5})
  m:load(src)
  for name, p in m:named_parameters() do
    lu.assertTrue(rawequal(p, held[name]), name .. " is the same tensor")
    lu.assertTrue(p.requires_grad and p.is_leaf, name)
    lu.assertEquals(p:tolist(), src:state_dict()[name]:tolist(), name)
  end
  -- the optimizer made before the load moves the model
  local x = rt{5, 3}
  local before = m[1].weight:clone()
  m(x):sum():backward()
  opt:step()
  lu.assertTrue((m[1].weight - before):abs():max():item() > 0, "the step moved m[1].weight")
  -- float64 sources are converted as copy_ converts
  local sd = {}
  for k, v in pairs(src:state_dict()) do sd[k] = v:to("float64") * 2 end
  m:load(sd)
  lu.assertEquals(m[1].weight.dtype, "float32")
  close(m[1].weight, T(sd["1.weight"]), nil, "from float64")
  -- a source that is one of the module's own tensors is read before any copy
  local a = nn.Sequential(nn.Linear(2, 2, {bias = false}), nn.Linear(2, 2, {bias = false}))
  local w1, w2 = a[1].weight:tolist(), a[2].weight:tolist()
  a:load({["1.weight"] = a[2].weight, ["2.weight"] = a[1].weight})
  lu.assertEquals(a[1].weight:tolist(), w2)
  lu.assertEquals(a[2].weight:tolist(), w1)
end

-- m:to(dtype), m:double(), m:float(): every parameter, children too
function TestState:testToDtype()
  local m = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
  local opt = qkv.optim.SGD(m, {lr = 0.1})
  local w = m[1].weight:tolist()
  lu.assertTrue(rawequal(m:double(), m))
  for name, p in m:named_parameters() do
    lu.assertEquals(p.dtype, "float64", name)
    lu.assertTrue(p.requires_grad and p.is_leaf, name)
  end
  close(m[1].weight, {shape = {4, 3}, data = R.flatten(w)}, 1e-12, "the values kept")
  lu.assertEquals(m(qkv.ones(2, 3, "float64")).dtype, "float64")
  fails("step: the module's parameter '1.weight' is not the tensor this optimizer was made with",
        opt.step, opt)
  lu.assertEquals(m:float()[2].weight.dtype, "float32")
  lu.assertEquals(m:to("bfloat16")[1].bias.dtype, "bfloat16")
  fails({"to", "expected a device", "or a float dtype, got int64"}, m.to, m, "int64")
  fails({"to", "got float63"}, m.to, m, "float63")
end

-- a bad entry anywhere changes nothing
function TestState:testLoadIsAllOrNothing()
  local m, src = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
  local before = {}
  for name, p in m:named_parameters() do before[name] = p:tolist() end
  local function unchanged(what)
    for name, p in m:named_parameters() do lu.assertEquals(p:tolist(), before[name], what .. ": " .. name) end
  end
  local sd = src:state_dict()
  sd["2.weight"] = qkv.ones(2, 4, "int64")
  fails({"load", "2.weight is float32 here but int64 in the source"}, m.load, m, sd)
  unchanged("an int64 weight")
  sd["2.weight"] = qkv.ones(2, 3)
  fails({"load", "2.weight is (2, 4) here but (2, 3) in the source"}, m.load, m, sd)
  unchanged("a wrong shape")
  sd["2.weight"] = nil
  fails({"load", "no tensor '2.weight'"}, m.load, m, sd)
  unchanged("a missing entry")
  sd["2.weight"], sd["2.c"] = src[2].weight, src[2].bias
  fails({"load", "unexpected '2.c'"}, m.load, m, sd)
  unchanged("an unexpected entry")
end

-- every options table refuses a key it does not know, naming the closest
function TestState:testOptionsAreChecked()
  local x = rt{2, 4, 8}
  for _, c in ipairs{
    {nn.SelfAttention(8, 4), "SelfAttention"}, {nn.MultiHeadAttention(8, 2), "MultiHeadAttention"},
  } do
    local m, name = c[1], c[2]
    fails({name, "unknown option 'casual' (did you mean 'causal'?)"}, m, x, {casual = true})
    fails({name, "unknown option 'attn_mask' (qkv's is 'mask': true = may attend"},
          m, x, {attn_mask = qkv.causal(4)})
    fails({name, "unknown option 'need_weights' (qkv's is 'weights'"}, m, x, {need_weights = false})
    m:eval()
    qkv.no_grad(function()
      fails({name, "unknown option 'casual'"}, m, x, {casual = true})
    end)
  end
  fails({"CrossAttention", "unknown option 'maks' (did you mean 'mask'?)"},
        nn.CrossAttention(8, 4), x, rt{2, 3, 8}, {maks = qkv.ones(4, 3)})
  fails({"MultiHeadCrossAttention", "unknown option 'scael'"}, nn.MultiHeadCrossAttention(8, 2),
        x, rt{2, 3, 8}, {scael = 1})
  fails({"AlignedCrossAttention", "unknown option 'is_casual' (did you mean 'is_causal'?)"},
        nn.AlignedCrossAttention(6, 8, 2), x, rt{2, 3, 6}, {is_casual = true})
  fails("Linear: unknown option 'bais' (did you mean 'bias'?)", nn.Linear, 2, 3, {bais = false})
  fails("Linear: option 'bias' must be a boolean, got number", nn.Linear, 2, 3, {bias = 0})
  fails("Linear: options must be a table, got string", nn.Linear, 2, 3, "float64")
  fails("LayerNorm: unknown option 'elementwise_afine' (did you mean 'elementwise_affine'?)",
        nn.LayerNorm, 4, {elementwise_afine = false})
  fails("LayerNorm: option 'elementwise_affine' must be a boolean", nn.LayerNorm, 4, {elementwise_affine = 0})
  fails("Embedding: unknown option 'padding_idx'", nn.Embedding, 4, 2, {padding_idx = 1})
  fails("SelfAttention: unknown option 'biass' (did you mean 'bias'?)", nn.SelfAttention, 4, 2, {biass = true})
  fails("MultiHeadAttention: unknown option 'dropout' (qkv.attention has no dropout",
        nn.MultiHeadAttention, 4, 2, {dropout = 0.1})
  -- what is known still works
  lu.assertNil(nn.Linear(2, 3, {bias = false, dtype = "float64"}).bias)
  lu.assertNil(nn.LayerNorm(4, {elementwise_affine = false, eps = 1e-6}).weight)
end

-- m:named_parameters(): parameters()'s tensors in its order, named, the module's
-- own tensors, dotted names with a Sequential's 1-based positions
TestNamedParameters = {}

local function named(m, opts)
  local names, tensors = {}, {}
  for name, p in m:named_parameters(opts) do
    names[#names + 1], tensors[#tensors + 1] = name, p
  end
  return names, tensors
end

function TestNamedParameters:testNamesAndOrder()
  local m = nn.Sequential(nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 1, {bias = false}))
  local names, tensors = named(m)
  lu.assertEquals(names, {"1.weight", "1.bias", "3.weight"})
  lu.assertTrue(rawequal(tensors[1], m[1].weight) and rawequal(tensors[2], m[1].bias) and rawequal(tensors[3], m[3].weight))
  local a = nn.AlignedCrossAttention(12, 8, 2, "mlp")
  names, tensors = named(a)
  local list = a:parameters()
  lu.assertEquals(#names, #list)
  lu.assertEquals(#names, 8)
  for i, p in ipairs(list) do
    lu.assertTrue(qkv.is_tensor(p), names[i] .. ": parameters() lists the tensors themselves")
    lu.assertTrue(rawequal(tensors[i], p), names[i])
  end
  lu.assertEquals(names[1], "aligner.proj.1.weight")
  lu.assertEquals(names[8], "cross_attn.W_O")
  lu.assertEquals(named(nn.GELU()), {})
end

function TestNamedParameters:testPrefixAndRecurse()
  local m = nn.TokenAligner(4, 4, "mlp")
  lu.assertEquals(named(m, {recurse = false}), {})
  lu.assertEquals(named(m, {prefix = "enc"}),
                  {"enc.proj.1.weight", "enc.proj.1.bias", "enc.proj.3.weight", "enc.proj.3.bias"})
  lu.assertEquals(named(m.proj[1], {prefix = "x", recurse = false}), {"x.weight", "x.bias"})
  lu.assertEquals(named(m.proj, {recurse = true}), {"1.weight", "1.bias", "3.weight", "3.bias"})
end

function TestNamedParameters:testErrors()
  local m = nn.Linear(2, 2)
  fails("named_parameters: unknown option 'recursive' (did you mean 'recurse'?)", m.named_parameters, m,
        {recursive = false})
  fails("named_parameters: option 'recurse' must be a boolean, got number", m.named_parameters, m, {recurse = 0})
  fails("named_parameters: option 'prefix' must be a string, got number", m.named_parameters, m, {prefix = 1})
  fails("named_parameters: options must be a table, got string", m.named_parameters, m, "layer")
  fails("named_parameters: called with '.', use m:named_parameters()", m.named_parameters)
  fails("named_parameters: called on a table, not a module", m.named_parameters, {_params = {}})
end

---------------------------------------------------------------- sharing
TestSharing = {}

local function names_of(m)
  local out = {}
  for name in m:named_parameters() do out[#out + 1] = name end
  return out
end

local function keys_of(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- a module held twice (tied layers): its weights are listed once, under
-- the first name, as PyTorch's parameters() lists them; state_dict names
-- both places, as PyTorch's does
function TestSharing:testASharedModuleIsListedOnce()
  qkv.seed(5)
  local lin = nn.Linear(3, 3, {dtype = "float64"})
  local m = nn.Sequential(lin, nn.Tanh(), lin)
  lu.assertEquals(names_of(m), {"1.weight", "1.bias"})
  lu.assertEquals(#m:parameters(), 2)
  lu.assertEquals(m:nparams(), 12)
  local sd = m:state_dict()
  lu.assertEquals(keys_of(sd), {"1.bias", "1.weight", "3.bias", "3.weight"})
  lu.assertIs(sd["3.weight"], lin.weight)
  -- an optimizer over it steps each tensor once, with both uses' gradient
  local opt = qkv.optim.SGD(m, {lr = 0.5})
  local x = qkv.tensor({{1, -2, 0.5}, {0.25, 1, -1}}, "float64")
  local w0 = lin.weight:clone()
  m(x):sum():backward()
  local g = lin.weight.grad:clone()
  opt:step()
  close(lin.weight, T(w0 - g * 0.5), 1e-15, "one step")
  -- its own state_dict loads back; to() keeps the two places one module
  m:load(m:state_dict())
  lu.assertIs(m:to("float32"), m)
  lu.assertIs(m[1], m[3])
  lu.assertEquals(lin.weight.dtype, "float32")
  lu.assertEquals(#m:parameters(), 2)
  lu.assertFalse(m:eval()[3].training)
end

-- a tensor two modules hold (tied weights) is one parameter; to() gives
-- both the same new tensor
function TestSharing:testASharedTensorIsListedOnce()
  local a, b = nn.Linear(2, 2), nn.Linear(2, 2)
  b.weight = a.weight
  local m = nn.Sequential(a, b)
  lu.assertEquals(names_of(m), {"1.weight", "1.bias", "2.bias"})
  lu.assertEquals(m:nparams(), 8)
  lu.assertEquals(keys_of(m:state_dict()), {"1.bias", "1.weight", "2.bias", "2.weight"})
  local opt = qkv.optim.Adam(m)                  -- was: parameter 4 is parameter 1 again
  lu.assertEquals(#opt.params, 3)
  m:double()
  lu.assertTrue(rawequal(a.weight, b.weight), "to() kept the tie")
  lu.assertEquals(b.weight.dtype, "float64")
  lu.assertTrue(a.weight.requires_grad and a.weight.is_leaf)
end

-- a module inside itself is an error naming the place, not a stack overflow
function TestSharing:testAModuleInsideItselfIsAnError()
  local lin = nn.Linear(2, 2)
  local m = nn.Sequential(nn.ReLU(), lin)
  lin.back = m
  local msg = "'2.back' is a module that holds it: a module cannot hold itself"
  fails("parameters: " .. msg, m.parameters, m)
  fails("to: " .. msg, m.to, m, "float64")
  fails("train: " .. msg, m.train, m, false)
  fails("state_dict: " .. msg, m.state_dict, m)
  fails(msg, tostring, m)
  -- each method names itself, not the one it goes through (was "to:",
  -- "train:" for double, eval; the API fuzzer's modules rule)
  for _, name in ipairs{"double", "float", "cpu", "eval"} do fails(name .. ": " .. msg, m[name], m) end
  lin.back = nil
  lu.assertEquals(#m:parameters(), 2)
end

-- a forward that reaches its own module again (s[1] = s, a layer put in
-- its own place) is an error naming the module, not "C stack overflow";
-- put right, the module runs again
function TestSharing:testAForwardInsideItselfIsAnError()
  local s = nn.Sequential(nn.Linear(2, 2))
  s[1] = s
  fails("Sequential: its forward reached the module again: a module cannot hold itself", s, rt{2})
  s[1] = nn.Identity()
  lu.assertEquals(s(qkv.tensor{1, 2}):tolist(), {1, 2})
  local t = nn.TransformerEncoderLayer(4, 2, {dropout = 0})
  local ff = t.linear1
  t.linear1 = t
  fails("TransformerEncoderLayer: its forward reached the module again", t, rt{3, 4})
  t.linear1 = ff
  lu.assertEquals(t(rt{3, 4}).shape, qkv.zeros(3, 4).shape)
end

---------------------------------------------------------------- slots
TestSlots = {}

-- m.bias = nil is PyTorch's m.bias = None: no such parameter from then on,
-- for every method, and Linear runs without it
function TestSlots:testABiasSetToNil()
  qkv.seed(6)
  local m = nn.Linear(3, 2, {dtype = "float64"})
  local opt = qkv.optim.SGD(m)
  m.bias = nil
  lu.assertEquals(m:nparams(), 6)
  lu.assertEquals(names_of(m), {"weight"})
  lu.assertEquals(keys_of(m:state_dict()), {"weight"})
  lu.assertEquals(tostring(m), "Linear(in_features=3, out_features=2, bias=false)")
  local x = qkv.tensor({{1, 2, 3}}, "float64")
  close(m(x), lin(x, m.weight:t()), 1e-15, "x W")
  fails("step: the module has 1 parameters, but had 2 when this optimizer was made", opt.step, opt)
  lu.assertIs(m:to("float32"), m)
  lu.assertEquals(m.weight.dtype, "float32")
  lu.assertNil(m.bias)
  lu.assertIs(m:zero_grad(), m)
  m:load({weight = qkv.zeros(2, 3)})
  fails("load: the source has an unexpected 'bias'", m.load, m, {weight = qkv.zeros(2, 3), bias = qkv.zeros(2)})
  lu.assertEquals(#qkv.optim.SGD(m).params, 1)
  -- a tensor put back is the parameter again; anything else is refused
  fails("Linear: 'bias' is a parameter: assign a tensor, or nil to remove it, got number",
        function() m.bias = 5 end)
  lu.assertNil(m.bias)
  m.bias = qkv.ones(2):requires_grad_()
  lu.assertEquals(names_of(m), {"weight", "bias"})
  close(m(x:float()), lin(x, m.weight:t(), m.bias), 1e-6, "x W + b")
  -- a parameter replaced by something not a tensor is an error where it is used
  m.weight = "weights"
  fails("parameters: 'weight' is a string, not a tensor: a parameter is a tensor, or nil to remove it",
        m.parameters, m)
  fails("nparams: 'weight' is a string", m.nparams, m)
  fails("Linear: 'weight' is a string, not a tensor: a parameter is a tensor, or nil to remove it", m, x:float())
end

-- the forward checks what the module holds before it runs: a parameter
-- that is not a tensor and a weight or a submodule removed are errors
-- naming them (they were "bad argument #2 to 'qkv.project'" or "attempt to
-- index a nil value" from inside the layer); a removed bias is bias=False
function TestSlots:testTheForwardChecksWhatItHolds()
  local m = nn.Linear(3, 2)
  m.weight = nil
  fails("Linear: 'weight' is nil and its forward needs it: assign a tensor back", m, rt{1, 3})
  m.weight = qkv.ones(2, 3):requires_grad_()
  m.bias = "x"
  fails("Linear: 'bias' is a string, not a tensor", m, rt{1, 3})
  m.bias = nil
  lu.assertEquals(m(qkv.ones(1, 3)):tolist(), {{3, 3}})
  local ln = nn.LayerNorm(4)
  ln.bias = 3
  fails("LayerNorm: 'bias' is a number, not a tensor", ln, rt{2, 4})
  local mha = nn.MultiHeadAttention(4, 2)
  mha.W_V = nil
  fails("MultiHeadAttention: 'W_V' is nil and its forward needs it", mha, rt{3, 4})
  local e = nn.Embedding(5, 2)
  e.weight = nil
  fails("Embedding: 'weight' is nil", e, qkv.tensor({1, 2}, "int64"))
  local a = nn.TokenAligner(4, 3)
  a.proj = nil
  fails("TokenAligner: 'proj' is nil and its forward needs it: assign a module back", a, rt{2, 4})
end

-- a submodule set to nil is gone (PyTorch's m.proj = None); a module
-- assigned to a new field is registered, as PyTorch's setattr does
function TestSlots:testSubmodulesSetAndRemoved()
  local a = nn.TokenAligner(4, 3)
  a.proj = nil
  lu.assertEquals(a:nparams(), 0)
  lu.assertEquals(tostring(a), "TokenAligner(d_vision=4, d_text=3, method=linear)")
  lu.assertIs(a:double(), a)
  fails("TokenAligner: 'proj' is nil", a, qkv.ones(2, 4))      -- an error, naming the module
  fails("TokenAligner: 'proj' is a submodule: assign a module, or nil to remove it, got table",
        function() a.proj = {} end)
  a.proj = nn.Linear(4, 3)
  lu.assertEquals(names_of(a), {"proj.weight", "proj.bias"})
  local m = nn.Linear(2, 2)
  m.extra = nn.Linear(2, 3)
  lu.assertEquals(names_of(m), {"weight", "bias", "extra.weight", "extra.bias"})
  m:double()
  lu.assertEquals(m.extra.weight.dtype, "float64")
  lu.assertFalse(m:eval().extra.training)
  m.extra = 5
  fails("parameters: 'extra' is a number, not a module: a submodule is a module, or nil to remove it",
        m.parameters, m)
end

os.exit(lu.LuaUnit.run(), true)
