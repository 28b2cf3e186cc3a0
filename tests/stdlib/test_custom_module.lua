-- test_custom_module.lua: a module of the script's own, written as
-- docs/from-pytorch.md "Your own modules" shows (qkv.nn.Module(name),
-- init and forward, submodules and qkv.nn.Parameter by assignment, a
-- buffer): registration, the Module methods on it (named_modules,
-- children, apply, requires_grad_, buffers, to), an attention block with a
-- residual and a causal-mask buffer trained, saved as a checkpoint and
-- loaded into a fresh one, and the errors.
local lu = require "luaunit"
local fails = dofile("tests/helpers/attn_ref.lua").fails
local nn = qkv.nn

-- the block of the docs: pre-norm attention with a residual, a learnable
-- gain, and its causal mask as a buffer
local Block = nn.Module("Block")
function Block:init(d, heads, n)
  self.norm = nn.LayerNorm(d)
  self.attn = nn.MultiHeadAttention(d, heads)
  self.gain = nn.Parameter(qkv.ones(d))
  self:register_buffer("causal", qkv.ones(n, n):tril():to("bool"))
end
function Block:forward(x)
  local h = self.norm(x)
  return x + self.attn(h, h, h, {mask = self.causal}) * self.gain
end

local function keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

TestCustomModule = {}

function TestCustomModule:testRegisteredByAssignment()
  local b = Block(8, 2, 5)
  local names = {}
  for name in b:named_parameters() do names[#names + 1] = name end
  -- its own parameter first, then each child's, as PyTorch's
  lu.assertEquals(names, {"gain", "norm.weight", "norm.bias", "attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O"})
  lu.assertEquals(keys(b:state_dict()), {"attn.W_K", "attn.W_O", "attn.W_Q", "attn.W_V", "causal", "gain",
                                         "norm.bias", "norm.weight"})
  local bufs = {}
  for name, t in b:named_buffers() do bufs[#bufs + 1] = name .. " " .. tostring(t.shape) end
  lu.assertEquals(bufs, {"causal (5, 5)"})
  local mods = {}
  for name, m in b:named_modules() do mods[#mods + 1] = name .. "=" .. getmetatable(m).__name end
  lu.assertEquals(mods, {"=Block", "norm=LayerNorm", "attn=MultiHeadAttention"})
  lu.assertEquals(#b:children(), 2)
  local order = {}
  b:apply(function(m) order[#order + 1] = getmetatable(m).__name end)
  lu.assertEquals(order, {"MultiHeadAttention", "LayerNorm", "Block"})   -- children first
  -- a plain tensor in a field is not a parameter, as in PyTorch
  b.scratch = qkv.ones(3):requires_grad_()
  lu.assertNil(b:state_dict().scratch)
  -- a buffer that is not persistent stays out of state_dict
  b:register_buffer("cache", qkv.zeros(2), false)
  lu.assertNil(b:state_dict().cache)
  lu.assertEquals(#b:buffers(), 2)
end

function TestCustomModule:testMovesAndFreezes()
  local b = Block(4, 2, 3)
  b:register_buffer("scale", qkv.ones(4))
  b:double()
  lu.assertEquals(b.gain.dtype, "float64")
  lu.assertEquals(b.scale.dtype, "float64")      -- a float buffer takes the dtype
  lu.assertEquals(b.causal.dtype, "bool")        -- a bool one keeps its own
  lu.assertTrue(b.gain.requires_grad)
  b:requires_grad_(false)
  for _, p in ipairs(b:parameters()) do lu.assertFalse(p.requires_grad) end
  b:bfloat16()
  lu.assertEquals(b.norm.weight.dtype, "bfloat16")
end

-- trained a few steps, saved as a checkpoint, loaded into a fresh block
-- (other weights): the same outputs, buffer included
function TestCustomModule:testTrainSaveLoad()
  qkv.seed(11)
  local b = Block(8, 2, 6)
  local opt = qkv.optim.AdamW(b, {lr = 0.02})
  local x, target = qkv.randn(4, 6, 8), qkv.randn(4, 6, 8)
  local first, last
  for step = 1, 40 do
    opt:zero_grad()
    local loss = nn.mse_loss(b(x), target)
    loss:backward()
    opt:step()
    if step == 1 then first = loss:item() end
    last = loss:item()
  end
  lu.assertTrue(last < 0.8 * first, string.format("loss %g -> %g", first, last))
  lu.assertNotNil(b.gain.grad)
  b.causal[{1, 2}] = true                        -- a buffer changed: saved as it is now
  local path = os.tmpname()
  qkv.save(path, {model = b:state_dict(), optim = opt:state_dict()})
  qkv.seed(12)
  local c = Block(8, 2, 6)
  lu.assertFalse(qkv.allclose(c(x), b(x)))
  local ck = qkv.load(path)
  os.remove(path)
  c:load(ck.model)
  lu.assertTrue(c.causal[{1, 2}])
  lu.assertTrue(qkv.allclose(c(x), b(x), 0, 0))
  local opt2 = qkv.optim.AdamW(c)
  opt2:load_state_dict(ck.optim)
  for _, pair in ipairs{{b, opt}, {c, opt2}} do
    pair[2]:zero_grad()
    nn.mse_loss(pair[1](x), target):backward()
    pair[2]:step()
  end
  lu.assertTrue(qkv.allclose(c(x), b(x), 0, 0))
end

function TestCustomModule:testErrors()
  fails("Module: name must be a name", nn.Module, "two words")
  fails("Module: name must be a name", nn.Module, 3)
  fails("Parameter: t must be a tensor, got string", nn.Parameter, "w")
  fails("Parameter: only float tensors can require grad, got int64", nn.Parameter, qkv.tensor({1}, "int64"))
  local b = Block(4, 2, 3)
  fails("register_buffer: Block's 'gain' is a parameter already", b.register_buffer, b, "gain", qkv.ones(1))
  fails("register_buffer: name must be a non-empty string", b.register_buffer, b, "", qkv.ones(1))
  -- a field that holds something else is an error at the next forward
  b.causal = 3
  fails("Block: 'causal' is a number, not a tensor: a buffer is a tensor, or nil to remove it",
        function() return b(qkv.randn(2, 3, 4)) end)
  b.causal = nil
  fails("register_buffer: t must be a tensor, got number", b.register_buffer, b, "extra", 3)
  b:register_buffer("causal", qkv.ones(3, 3):tril():to("bool"))
  -- a state_dict without the buffer, or with one of another shape
  local sd = b:state_dict()
  sd.causal = nil
  fails("load: the source has no tensor 'causal'", b.load, b, sd)
  sd.causal = qkv.ones(2, 2):to("bool")
  fails("causal is (3, 3) here but (2, 2) in the source", b.load, b, sd)
  -- an error in the forward names the class
  fails("Block: ", function() return b(qkv.randn(2, 3, 5)) end)
  -- no init: a class that needs no arguments
  local Id = nn.Module("Id")
  function Id:forward(x) return x end
  lu.assertEquals(Id()(qkv.ones(2)):tolist(), {1, 1})
end

-- a field a module does not have is an error naming the closest; one it
-- registered and set to nil (or made without: bias = false) reads nil
function TestCustomModule:testFieldsItDoesNotHave()
  local lin = nn.Linear(2, 3)
  fails("Linear: has no field 'W' (did you mean 'weight'?)", function() return lin.W end)
  fails("Linear: has no field 'b' (did you mean 'bias'?)", function() return lin.b end)
  fails("Linear: has no field 'wieght' (did you mean 'weight'?)", function() return lin.wieght end)
  fails("Linear: has no field 'paramters' (did you mean 'parameters'?)", function() return lin.paramters end)
  lu.assertNil(nn.Linear(2, 3, {bias = false}).bias)
  lu.assertNil(nn.LayerNorm(3, {elementwise_affine = false}).weight)
  lu.assertNil(nn.MultiHeadAttention(4, 2).b_Q)
  lu.assertNil(nn.CrossEntropyLoss().weight)
  lin.bias = nil
  lu.assertNil(lin.bias)
  local b = Block(4, 2, 3)
  fails("Block: has no field 'causl' (did you mean 'causal'?)", function() return b.causl end)
  lu.assertNil(b._private)                       -- '_' names stay probes
  local s = nn.Sequential(nn.Linear(2, 2))
  fails("Sequential: has no field 'weight'", function() return s.weight end)
  lu.assertNil(s[2])                             -- past the end: ipairs stops
end
