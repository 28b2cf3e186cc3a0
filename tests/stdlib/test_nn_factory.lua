-- test_nn_factory.lua: PyTorch's factory keywords, dtype= and device=, in
-- every built-in module constructor that makes parameters (issue 50):
-- Linear(4, 2, {dtype = "bfloat16"}) holds the numbers of
-- Linear(4, 2):to("bfloat16") (the same seed), every parameter and the
-- forward alike, on the device asked for; float64 ones are made in
-- float64; a half module trains; and a bad dtype, device or misspelt key
-- is an error naming the module.
local lu = require "luaunit"
local fails = dofile("tests/helpers/attn_ref.lua").fails
local nn = qkv.nn

-- each constructor: its arguments (the options last, filled in), and the
-- inputs of a forward, made on the default device
local X = function(...) return qkv.randn(...) end
local MODULES = {
  {"Linear", {4, 3}, function() return {X(2, 4)} end},
  {"LayerNorm", {4}, function() return {X(2, 4)} end},
  {"RMSNorm", {4}, function() return {X(2, 4)} end},
  {"Embedding", {10, 4}, function() return {qkv.tensor({{1, 4, 9}}, "int64")} end},
  {"SelfAttention", {8, 4, {bias = true}}, function() return {X(3, 8)} end},
  {"CrossAttention", {8, 4}, function() return {X(3, 8), X(5, 8)} end},
  {"MultiHeadAttention", {8, 2, {bias = true}}, function() return {X(1, 3, 8)} end},
  {"MultiHeadCrossAttention", {8, 2}, function() return {X(3, 8), X(5, 8)} end},
  {"TokenAligner", {6, 8, "mlp"}, function() return {X(5, 6)} end},
  {"AlignedCrossAttention", {6, 8, 2}, function() return {X(3, 8), X(5, 6)} end},
  {"TransformerEncoderLayer", {8, 2, {dim_feedforward = 16, dropout = 0}},
   function() return {X(1, 3, 8)} end},
  {"SwiGLU", {4, 6}, function() return {X(2, 4)} end},
}

-- nn[name] made with these options beside its own (seeded, so that two
-- makings draw the same numbers)
local function make(spec, extra)
  local args = {table.unpack(spec[2])}
  local last = args[#args]
  local opts = {}
  if type(last) == "table" then
    for k, v in pairs(last) do opts[k] = v end
    args[#args] = nil
  end
  for k, v in pairs(extra or {}) do opts[k] = v end
  if next(opts) then args[#args + 1] = opts end
  qkv.seed(11)
  return nn[spec[1]](table.unpack(args))
end

-- the parameters of m as name -> tensor
local function params(m)
  local out, n = {}, 0
  for name, p in m:named_parameters() do out[name], n = p, n + 1 end
  return out, n
end

-- a and b hold the same parameters (names, dtype, device, values) and
-- give the same forward on the same inputs
local function same_module(a, b, spec, what)
  local pa, na = params(a)
  local pb, nb = params(b)
  lu.assertEquals(na, nb, what .. ": parameters")
  lu.assertTrue(na > 0, what .. ": has parameters")
  for name, p in pairs(pa) do
    local q = pb[name]
    lu.assertNotNil(q, what .. ": " .. name)
    lu.assertEquals(p.dtype, q.dtype, what .. ": " .. name .. " dtype")
    lu.assertEquals(p.device, q.device, what .. ": " .. name .. " device")
    lu.assertTrue(p.requires_grad, what .. ": " .. name .. " requires grad")
    lu.assertTrue(p:eq(q):all():item(), what .. ": " .. name .. " values")
  end
  local first = next(pa) and pa[next(pa)]
  local inputs = spec[3]()
  for i, x in ipairs(inputs) do
    inputs[i] = x:to(first.device)
    if x.dtype ~= "int64" then inputs[i] = inputs[i]:to(first.dtype) end
  end
  local ya, yb = a(table.unpack(inputs)), b(table.unpack(inputs))
  lu.assertEquals(ya.dtype, first.dtype, what .. ": forward's dtype")
  lu.assertTrue(ya:eq(yb):all():item(), what .. ": forward")
  return pa
end

TestFactory = {}

function TestFactory:testHalvesAreMadeThenConverted()
  for _, spec in ipairs(MODULES) do
    for _, dt in ipairs{"float16", "bfloat16"} do
      local what = spec[1] .. " " .. dt
      local pa = same_module(make(spec, {dtype = dt}), make(spec):to(dt), spec, what)
      for name, p in pairs(pa) do lu.assertEquals(p.dtype, dt, what .. ": " .. name) end
    end
  end
end

-- float64 draws in float64 (as Linear's dtype option always has); float32
-- is the default, the same as no option
function TestFactory:testFloat64AndFloat32()
  for _, spec in ipairs(MODULES) do
    for name, p in pairs(params(make(spec, {dtype = "float64"}))) do
      lu.assertEquals(p.dtype, "float64", spec[1] .. ": " .. name)
    end
    same_module(make(spec, {dtype = "float32"}), make(spec), spec, spec[1] .. " float32")
  end
  qkv.seed(3)
  local a = nn.Linear(3, 2, {dtype = "float64"})
  qkv.seed(3)
  local w = qkv.rand(3, 2, "float64")
  -- drawn as (d_in, d_out) and held as PyTorch's (d_out, d_in): its transpose
  qkv.test.assertClose(a.weight, ((w * 2 - 1) / math.sqrt(3)):t())
end

function TestFactory:testDevice()
  local dev = qkv.default_device()
  for _, spec in ipairs(MODULES) do
    for _, p in pairs(params(make(spec, {device = "cpu"}))) do lu.assertEquals(p.device, "cpu") end
    same_module(make(spec, {device = "cpu", dtype = "bfloat16"}), make(spec):to("bfloat16"):to("cpu"),
                spec, spec[1] .. " cpu bfloat16")
  end
  lu.assertEquals(qkv.default_device(), dev)
  local ok = qkv.cuda_available()
  if ok then
    for _, spec in ipairs(MODULES) do
      same_module(make(spec, {device = "cuda"}), make(spec):to("cuda"), spec, spec[1] .. " cuda")
      same_module(make(spec, {device = "cuda", dtype = "float16"}), make(spec):to("float16"):to("cuda"),
                  spec, spec[1] .. " cuda float16")
    end
  else
    fails({"Linear: ", "cuda is not available"}, nn.Linear, 2, 2, {device = "cuda"})
  end
end

-- the options the constructor had keep their meaning beside dtype
function TestFactory:testOtherOptionsStay()
  local m = nn.Linear(4, 2, {bias = false, dtype = "bfloat16"})
  lu.assertNil(m.bias)
  lu.assertEquals(m.weight.dtype, "bfloat16")
  local ln = nn.LayerNorm(4, {elementwise_affine = false, dtype = "float16"})
  lu.assertNil(ln.weight)
  local tel = nn.TransformerEncoderLayer(8, 2, {bias = false, dtype = "bfloat16"})
  lu.assertNil(tel.linear1.bias)
  lu.assertEquals(tel.norm1.weight.dtype, "bfloat16")
  lu.assertNil(nn.MultiHeadAttention(8, 2, {dtype = "float16"}).b_Q)
  lu.assertEquals(nn.TokenAligner(4, 6, {dtype = "float16"}).method, "linear")
  lu.assertEquals(nn.TokenAligner(4, 4, "identity", {dtype = "float16"}).method, "identity")
  local c = nn.KVCache(1, 2, 4, 3, {dtype = "bfloat16", device = "cpu"})
  lu.assertEquals(c.k.dtype, "bfloat16")
  lu.assertEquals(c.k.device, "cpu")
end

-- a bfloat16 Linear made so learns: a few SGD steps lower its loss
function TestFactory:testAHalfModuleTrains()
  qkv.seed(2)
  local m = nn.Linear(4, 1, {dtype = "bfloat16"})
  local x = qkv.randn(16, 4):to("bfloat16")
  local y = (x:float():matmul(qkv.tensor{{1}, {-2}, {0.5}, {3}}) + 1):to("bfloat16")
  local opt = qkv.optim.SGD(m:parameters(), {lr = 0.05})
  local function loss() return ((m(x) - y) ^ 2):mean() end
  local first = loss():float():item()
  for _ = 1, 30 do
    opt:zero_grad()
    loss():backward()
    opt:step()
  end
  lu.assertEquals(m.weight.dtype, "bfloat16")
  lu.assertTrue(loss():float():item() < first / 4, "the loss falls")
end

function TestFactory:testErrors()
  fails("Linear: dtype must be 'float32', 'float64', 'float16' or 'bfloat16', got int64",
        nn.Linear, 4, 2, {dtype = "int64"})
  fails("Embedding: device must be 'cpu' or 'cuda', got gpu", nn.Embedding, 4, 2, {device = "gpu"})
  fails("MultiHeadAttention: unknown option 'devise' (did you mean 'device'?)",
        nn.MultiHeadAttention, 8, 2, {devise = "cpu"})
  fails("TransformerEncoderLayer: unknown option 'dtyp' (did you mean 'dtype'?)",
        nn.TransformerEncoderLayer, 8, 2, {dtyp = "float16"})
  fails("SwiGLU: device must be 'cpu' or 'cuda', got 1", nn.SwiGLU, 4, 6, {device = 1})
  fails("TokenAligner: expected at most a method and an options table after the sizes",
        nn.TokenAligner, 4, 6, "mlp", {}, {})
  fails("AlignedCrossAttention: unknown option 'dtpye' (did you mean 'dtype'?)",
        nn.AlignedCrossAttention, 6, 8, 2, {dtpye = "float16"})
end

os.exit(lu.LuaUnit.run(), true)
