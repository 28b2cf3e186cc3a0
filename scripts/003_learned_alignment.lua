-- Seed 003, "Token Alignment and Multi-Head Cross-Attention", calls the
-- TokenAligner's projection "learned". Here it learns: a synthetic paired
-- data set of image tokens X (256 of d_vision = 32) and the text tokens Y
-- they should map to (d_text = 16), made by a fixed random two-layer map,
-- Y = tanh(X A) B / 4, plus noise of 0.01. Both aligners of seed 003, the
-- linear one and the MLP (Linear, GELU, Linear), are trained with Adam on
-- the mean squared error, and print their loss as it falls (and draw both
-- curves). The linear one can only fit the map's linear part; the MLP gets
-- further.

qkv.seed(7)
local N, d_vision, d_text, hidden = 256, 32, 16, 64
local A, B = qkv.randn(d_vision, hidden) / math.sqrt(d_vision), qkv.randn(hidden, d_text)
local X = qkv.randn(N, d_vision)
local Y = (X:matmul(A)):tanh():matmul(B) / 4 + qkv.randn(N, d_text) * 0.01

local steps, every = 300, 50
local results = {}
for _, method in ipairs{"linear", "mlp"} do
  local aligner = qkv.nn.TokenAligner(d_vision, d_text, method)
  local opt = qkv.optim.Adam(aligner, {lr = 0.01})
  local losses = {}
  print(string.format("TokenAligner(%d, %d, %q): %d parameters", d_vision, d_text, method,
                      aligner:nparams()))
  for step = 1, steps do
    opt:zero_grad()
    local loss = qkv.nn.mse_loss(aligner(X), Y)
    loss:backward()
    opt:step()
    losses[step] = loss:item()
    if step == 1 or step % every == 0 then
      print(string.format("  step %3d  loss %.5f", step, losses[step]))
    end
  end
  results[method] = losses
end
print(string.format("final loss: linear %.5f, mlp %.5f (the data's noise alone: %.5f)",
                    results.linear[steps], results.mlp[steps], 0.01 ^ 2))
local fig = qkv.plot.line({results.linear, results.mlp}, {label = {"linear", "mlp"}, xlabel = "step",
  ylabel = "MSE loss", title = "TokenAligner training loss",
  file = qkv.plot.out("003_learned_alignment_loss.png")})

return {losses = results, steps = steps, fig = fig}
