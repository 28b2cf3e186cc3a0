-- Seed 004, "Self Attention & Cross Attention", the first cell: toy
-- self-attention over 5 random word embeddings, by hand and then through
-- qkv.nn.SelfAttention with the same weights.

qkv.seed(42)
local x = qkv.randn(5, 4)                  -- (seq_len, embed_dim)
local embed_dim = x:size(2)
local d_k = embed_dim

-- learnable projections, bias-free as in the document
local W_q = qkv.nn.Linear(embed_dim, embed_dim, {bias = false})
local W_k = qkv.nn.Linear(embed_dim, embed_dim, {bias = false})
local W_v = qkv.nn.Linear(embed_dim, embed_dim, {bias = false})

local Q, K, V = W_q(x), W_k(x), W_v(x)     -- (5, 4) each
local scores = qkv.scores(Q, K)            -- Q K^T / sqrt(d_k), (5, 5)
local attn_weights = qkv.softmax(scores)   -- along the keys
local output = attn_weights:matmul(V)      -- (5, 4)

print("Input embeddings:"); print(x)
print("\nSelf-Attention weights:"); print(attn_weights)
print("\nContextualized representations:"); print(output)

-- the same layer as one module: load the three weights, then call it
local attn = qkv.nn.SelfAttention(embed_dim, d_k)
attn:load{W_Q = W_q.weight:t(), W_K = W_k.weight:t(), W_V = W_v.weight:t()}   -- (in, out): the transposes of Linear's weights
local out2, weights2 = attn(x)
print("\n" .. tostring(attn))
print(string.format("max |output - attn(x)| = %.3g, max |weights - attn weights| = %.3g",
  (output - out2):abs():max():item(), (attn_weights - weights2):abs():max():item()))

print("\nSelf-Attention weights (rows: queries, columns: keys):")
qkv.plot.heatmap(attn_weights, {annotate = "%.2f", cmap = "viridis",
  xlabels = {"k1", "k2", "k3", "k4", "k5"}, ylabels = {"q1", "q2", "q3", "q4", "q5"}})

return {x = x, Q = Q, K = K, V = V, W_q = W_q.weight:t(), W_k = W_k.weight:t(), W_v = W_v.weight:t(),
        attn_weights = attn_weights, output = output,
        module_output = out2, module_weights = weights2}
