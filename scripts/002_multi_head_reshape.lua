-- Seed 002, "Implementation and Analysis of Scaled Dot-Product Attention",
-- Experiment 5: Multi-Head Attention vs. Computational Efficiency.

local d_model = 512
local num_heads = 8
local d_k = d_model // num_heads  -- each head gets a subspace of 64 dimensions

-- a sequence of 10 words
local batch_size = 1
local seq_len = 10
qkv.seed(42)
local x = qkv.randn(batch_size, seq_len, d_model)

print(string.format("Original Shape: %s (1 Batch, 10 Words, 512 Features)", x.shape))

-- (batch, seq_len, d_model) -> (batch, heads, seq_len, d_k): 8 "views"
-- processed in parallel; a view, nothing is copied
local x_multi_head = qkv.heads(x, num_heads)

print(string.format("Multi-Head Shape: %s (1 Batch, 8 Heads, 10 Words, 64 Features)", x_multi_head.shape))
print(string.format("\nResult: The model now has %d independent 'detectives', each focusing on a %d-dimensional subspace.",
  num_heads, d_k))

-- merge is the inverse: the heads concatenate back into x
local merged = qkv.merge(x_multi_head)
print(string.format("Merged back: %s, max |merged - x| = %g", merged.shape, (merged - x):abs():max():item()))

-- Analysis 2, O(n^2): one n x n score matrix per head
for _, n in ipairs{512, 16000} do
  print(string.format("n = %5d: %d x %d = %d elements per head, %.1f MB of float32 for %d heads",
    n, n, n, n * n, n * n * 4 * num_heads / 1e6, num_heads))
end

return {x = x, x_multi_head = x_multi_head, merged = merged,
  elements_512 = 512 * 512, elements_16000 = 16000 * 16000}
