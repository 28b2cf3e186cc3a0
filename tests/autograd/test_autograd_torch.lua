-- test_autograd_torch.lua: qkv.autograd against PyTorch's autograd on a
-- composite graph: one multi-head cross-attention block
-- (qkv.nn.MultiHeadCrossAttention, with a key padding mask) and a mean
-- squared error, in float64. The gradients of the loss with respect to the
-- inputs and every weight must agree with the ones PyTorch 1.13 computed
-- (tests/fixtures/grad/torch_grads.lua, written by torch_grads.py there) to
-- 1e-5 relative, through both attention paths.
local lu = require "luaunit"
local F = dofile("tests/fixtures/grad/torch_grads.lua")

local function T(t) return qkv.tensor(t, "float64") end

-- ‖got - want‖ / ‖want‖
local function relerr(got, want)
  local d = (got - want):pow(2):sum():sqrt():item()
  return d / want:pow(2):sum():sqrt():item()
end

TestAgainstTorch = {}

local function run(weights)
  local m = qkv.nn.MultiHeadCrossAttention(8, 2)
  for _, n in ipairs{"W_Q", "W_K", "W_V", "W_O"} do m[n] = T(F[n]):requires_grad_() end
  local text, image = T(F.text):requires_grad_(), T(F.image):requires_grad_()
  local pad = qkv.tensor(F.pad)
  local out = m(text, image, {key_padding_mask = pad, weights = weights})
  local loss = qkv.nn.mse_loss(out, T(F.target))
  loss:backward()
  return loss, {text = text.grad, image = image.grad, W_Q = m.W_Q.grad, W_K = m.W_K.grad,
                W_V = m.W_V.grad, W_O = m.W_O.grad}
end

function TestAgainstTorch:testGradients()
  for _, weights in ipairs{true, false} do
    local loss, grads = run(weights)
    lu.assertAlmostEquals(loss:item(), F.loss, 1e-12 * math.abs(F.loss))
    for name, g in pairs(grads) do
      local e = relerr(g, T(F.grads[name]))
      lu.assertTrue(e < 1e-5, string.format("%s (weights = %s): relative error %.3g",
                                            name, tostring(weights), e))
    end
  end
end

os.exit(lu.LuaUnit.run(), true)
