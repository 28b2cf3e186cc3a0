-- Seed 002, "Implementation and Analysis of Scaled Dot-Product Attention",
-- says that dividing the scores by sqrt(d_k) "prevents vanishing gradients".
-- Measured here: the logits z = Q K^T * scale go through softmax, and a loss
-- L = <softmax(z), G> (G random, fixed) is sent back to z, for d_k = 8, 64
-- and 512, with scale 1 and with 1/sqrt(d_k). Without the scale z's
-- variance grows as d_k, the softmax saturates (each row nearly one-hot, its
-- Jacobian nearly zero) and dL/dz vanishes; with it dL/dz keeps its size.

qkv.seed(42)
local n = 16                       -- tokens
local trials = 8                   -- random draws averaged per cell
local dks = {8, 64, 512}

-- mean |dL/dz| over the logits
local function mean_grad(q, k, g, scale)
  local z = qkv.scores(q, k, {scale = scale}):detach():requires_grad_()
  local loss = (qkv.softmax(z) * g):sum()
  loss:backward()
  return z.grad:abs():mean():item()
end

local rows, cells = {}, {}
print(string.format("%6s  %20s  %20s  %8s", "d_k", "mean |dL/dz|, scale 1", "scale 1/sqrt(d_k)", "ratio"))
for i, d_k in ipairs(dks) do
  local raw, scaled = 0, 0
  for _ = 1, trials do
    local q, k, g = qkv.randn(n, d_k), qkv.randn(n, d_k), qkv.randn(n, n)
    raw = raw + mean_grad(q, k, g, 1) / trials
    scaled = scaled + mean_grad(q, k, g, 1 / math.sqrt(d_k)) / trials
  end
  print(string.format("%6d  %20.3e  %20.3e  %8.1f", d_k, raw, scaled, scaled / raw))
  rows[i] = {d_k = d_k, raw = raw, scaled = scaled}
  cells[i] = {math.log(raw, 10), math.log(scaled, 10)}
end

qkv.plot.heatmap(cells, {
  title = "log10 mean |dL/dlogits| (seed 002's claim, measured)",
  xlabels = {"scale 1", "scale 1/sqrt(d_k)"},
  ylabels = {"d_k = 8", "d_k = 64", "d_k = 512"},
  annotate = "%.2f", cmap = "viridis", colorbar = true,
  file = qkv.plot.out("002_vanishing_gradients.png")})

return {rows = rows, n = n, trials = trials}
