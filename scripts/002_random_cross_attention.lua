-- Seed 002, "Implementation and Analysis of Scaled Dot-Product Attention",
-- Experiment 1: Basic Cross-Attention on random Q, K, V.
-- The document's scaled_dot_product_attention is qkv.attention.

qkv.seed(42)
local batch_size, seq_len = 1, 4
local d_k, d_v = 8, 8  -- dimensions of keys/queries and of values

-- Query = "searching for", Key = "content tags", Value = "actual content"
local query = qkv.randn(batch_size, seq_len, d_k)
local key = qkv.randn(batch_size, seq_len, d_k)
local value = qkv.randn(batch_size, seq_len, d_v)

local output, weights = qkv.attention(query, key, value)

print("Output shape: " .. tostring(output.shape))
print("Attention Weights shape: " .. tostring(weights.shape))

-- The document's analysis (a bright cell at (2, 2), column 4 drawing rows 3
-- and 4) reads PyTorch's draws; qkv's generator draws other numbers, so the
-- bright cells fall elsewhere here.
print(weights)
qkv.plot.heatmap(weights, {title = "Random Cross-Attention Weights",
  annotate = "%.2f", cmap = "viridis",
  xlabel = "Keys (Input Sequence Positions)",
  ylabel = "Queries (Output Sequence Positions)",
  file = qkv.plot.out("002_random_cross_attention_weights.png")})

return {query = query, key = key, value = value, output = output, weights = weights}
