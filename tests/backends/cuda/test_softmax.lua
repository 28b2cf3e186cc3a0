-- test_softmax.lua: the cross-backend suite's softmax family and norms
-- (the backend's softmax, log_softmax, softmax_backward, layer_norm,
-- layer_norm_backward, rms_norm and rms_norm_backward): along every dim,
-- rows all -inf, layer_norm, rms_norm and their gradients, the backward
-- through autograd
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local C = dofile("tests/helpers/cuda_suite.lua")
local need, same, values, FLOATS = C.need, C.same, C.values, C.FLOATS
local inf = C.inf

---------------------------------------------------------------- softmax family

TestCudaSoftmax = {}

function TestCudaSoftmax:testSoftmaxAlongEveryDim()
  need()
  local shapes = {{5}, {3, 4}, {2, 3, 17}, {2, 5000}, {1, 70000}, {4, 1}, {0, 3}}
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs(shapes) do
      local x = values(s, dt)
      for d = 1, #s do
        same(("%s softmax %s dim %d"):format(dt, table.concat(s, "x"), d),
             function(v) return qkv.softmax(v, d) end, {x})
        same(("%s log_softmax %s dim %d"):format(dt, table.concat(s, "x"), d),
             function(v) return v:log_softmax(d) end, {x})
      end
    end
    -- a row all -inf: softmax gives zeros, log_softmax -inf
    local m = qkv.tensor{{1, 2, 3}, {-inf, -inf, -inf}, {0, -inf, 5}}:to(dt)
    same(dt .. " masked rows", function(v) return qkv.softmax(v), v:log_softmax() end, {m})
    -- large logits: (x - max) - log(sum), not x - (max + log(sum)), which
    -- rounds back to max (a row of 0 where it is -log 2), on both
    local big = qkv.tensor{{1e8, 1e8}, {1e4, 1e4 - 3}}:to(dt)
    if dt ~= "float32" and dt ~= "float64" then big = qkv.tensor{{6e4, 6e4}, {6e4, 6e4}}:to(dt) end
    same(dt .. " large logits", function(v) return v:log_softmax() end, {big})
    local g = big:cuda():log_softmax():cpu():double()[1][1]
    lu.assertTrue(g < -0.6, dt .. " large logits on the GPU: -log 2, got " .. tostring(g))
  end
end

function TestCudaSoftmax:testLayerNorm()
  need()
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs{{4, 8}, {2, 3, 384}, {5, 1}, {3, 1000}, {2, 3000}} do
      local x = values(s, dt) * 5 + 100
      local n = s[#s]
      same(dt .. " layer_norm " .. table.concat(s, "x"),
           function(v, w, b) return qkv.layer_norm(v, {n}, w, b), qkv.layer_norm(v, {n}) end,
           {x, values({n}, dt), values({n}, dt)})
    end
    same(dt .. " layer_norm over 2 dims", function(v) return qkv.layer_norm(v, {3, 4}) end,
         {values({2, 3, 4}, dt)})
  end
end

-- rows of a thread, a warp and a block; the sums over rows (gw, gb) with
-- and without w, and none asked for
function TestCudaSoftmax:testLayerNormBackward()
  need()
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs{{4, 8}, {2, 3, 384}, {5, 1}, {3, 1000}, {2, 3000}, {0, 6}} do
      local n = s[#s]
      same(dt .. " layer_norm backward " .. table.concat(s, "x"),
           function(v, g, w)
             local a, b, c = qkv._layer_norm_backward(v:contiguous(), g:contiguous(), n,
                                                      w:contiguous(), 1e-5, true, true)
             local d, e = qkv._layer_norm_backward(v:contiguous(), g:contiguous(), n, nil, 1e-3,
                                                   false, true)
             local f = qkv._layer_norm_backward(v:contiguous(), g:contiguous(), n)
             return a, b, c, d, e, f
           end, {values(s, dt) * 5 + 100, values(s, dt), values({n}, dt)})
    end
  end
end

-- rms_norm as layer_norm: rows of a thread, a warp and a block, with and
-- without weight, eps default and given, over 1 and 2 dims
function TestCudaSoftmax:testRMSNorm()
  need()
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs{{4, 8}, {2, 3, 384}, {5, 1}, {3, 1000}, {2, 3000}, {0, 6}} do
      local n = s[#s]
      same(dt .. " rms_norm " .. table.concat(s, "x"),
           function(v, w) return qkv.rms_norm(v, {n}, w), qkv.rms_norm(v, n, nil, 1e-3) end,
           {values(s, dt) * 5 + 1, values({n}, dt)})
    end
    same(dt .. " rms_norm over 2 dims", function(v, w) return qkv.rms_norm(v, {3, 4}, w) end,
         {values({2, 3, 4}, dt), values({3, 4}, dt)})
  end
end

function TestCudaSoftmax:testRMSNormBackward()
  need()
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs{{4, 8}, {2, 3, 384}, {5, 1}, {3, 1000}, {2, 3000}, {0, 6}} do
      local n = s[#s]
      same(dt .. " rms_norm backward " .. table.concat(s, "x"),
           function(v, g, w)
             local a, b = qkv._rms_norm_backward(v:contiguous(), g:contiguous(), n,
                                                 w:contiguous(), 1e-5, true)
             local c, d = qkv._rms_norm_backward(v:contiguous(), g:contiguous(), n, nil, nil, true)
             local e = qkv._rms_norm_backward(v:contiguous(), g:contiguous(), n)
             return a, b, c, d, e
           end, {values(s, dt) * 5 + 1, values(s, dt), values({n}, dt)},
           -- one feature: gx = inv gy (1 - x^2 inv^2) = inv gy eps / (x^2 + eps)
           -- cancels to a few digits, and the GPU's contracted multiply-adds
           -- round it otherwise than the CPU (3.7e-10 apart on an H200)
           n == 1 and dt == "float64" and 1e-8 or nil)
    end
  end
end

function TestCudaSoftmax:testBackwardThroughAutograd()
  need()
  require "qkv.autograd"
  for _, dt in ipairs(FLOATS) do
    local grads = function(x, g)
      local v = x:detach():requires_grad_()
      local y = qkv.softmax(v * 2, 2) + v:log_softmax(2) * 0.5 + qkv.layer_norm(v, {x:size(2)})
        + qkv.rms_norm(v, x:size(2)) * 0.25
      y:backward(g)
      return v.grad
    end
    same(dt .. " softmax/log_softmax/layer_norm/rms_norm backward", grads,
         {values({6, 37}, dt), values({6, 37}, dt)})
  end
end
