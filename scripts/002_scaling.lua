-- Seed 002, "Implementation and Analysis of Scaled Dot-Product Attention",
-- Experiment 3: Impact of Scaling (d_k): raw vs scaled scores at d_k = 512.

qkv.seed(42)
local seq_len = 4
local large_d_k = 512
local q_large = qkv.randn(1, seq_len, large_d_k)
local k_large = qkv.randn(1, seq_len, large_d_k)

-- Without scaling: the variance is about d_k and the weights spike
local scores_raw = qkv.scores(q_large, k_large, {scale = 1})
local var_raw = scores_raw:var():item()
print(string.format("Variance of scores WITHOUT scaling: %.2f", var_raw))
local weights_no_scale = qkv.softmax(scores_raw)

-- With scaling by 1/sqrt(d_k): the variance comes back to about 1
local scores_scaled = scores_raw / math.sqrt(large_d_k)
local var_scaled = scores_scaled:var():item()
print(string.format("Variance of scores WITH scaling: %.2f", var_scaled))
local weights_scaled = qkv.softmax(scores_scaled)

local row_no_scale, row_scaled = weights_no_scale[1][1], weights_scaled[1][1]
print("\nComparing the first row of softmax weights:")
print("No Scale (Peaky):", row_no_scale)
print("Scaled (Smoother):", row_scaled)

-- The figures: 10 queries and 10 keys, from seed 42 again
local d_k = 512
seq_len = 10
qkv.seed(42)
local q, k = qkv.randn(1, seq_len, d_k), qkv.randn(1, seq_len, d_k)
scores_raw = qkv.scores(q, k, {scale = 1})
scores_scaled = qkv.scores(q, k)  -- the default scale, 1/sqrt(d_k)
weights_no_scale, weights_scaled = qkv.softmax(scores_raw), qkv.softmax(scores_scaled)

local function panel(w, title)
  return {w, {title = title, cmap = "viridis", annotate = false, colorbar = true, xlabel = "Keys", ylabel = "Queries"}}
end
qkv.plot.grid({
  panel(weights_no_scale, string.format("Figure A: No Scaling (d_k=%d)\nVariance ≈ %.1f",
    d_k, scores_raw:var():item())),
  panel(weights_scaled, string.format("Figure B: With Scaling (1/sqrt(d_k))\nVariance ≈ %.1f",
    scores_scaled:var():item())),
}, {rows = 1, cols = 2, file = qkv.plot.out("002_scaling_effect_comparison.png")})

return {q_large = q_large, k_large = k_large, var_raw = var_raw, var_scaled = var_scaled,
  row_no_scale = row_no_scale, row_scaled = row_scaled, q = q, k = k, scores_raw = scores_raw,
  scores_scaled = scores_scaled, weights_no_scale = weights_no_scale, weights_scaled = weights_scaled}
