-- 000_self_attention.lua: "Self-Attention and Cross-Attention from Scratch",
-- section 4.2: self-attention with learned projections (Q, K, V from one x).

qkv.seed(42)
local d_model = 8   -- input embedding dimension
local d_k = 4       -- attention dimension
local seq_len = 5   -- 5 tokens

local self_attn = qkv.nn.SelfAttention(d_model, d_k)

-- random input: 5 tokens, each 8-dimensional
local x = qkv.randn(seq_len, d_model)
print("Input x shape: " .. tostring(x.shape) .. " (5 tokens, d_model=8)")

local output, weights = self_attn(x)
print("Output shape: " .. tostring(output.shape) .. " (5 tokens, d_k=4)")
print("Weights shape: " .. tostring(weights.shape) .. " (5x5 — each token attends to all 5)")

local labels = {}
for i = 0, seq_len - 1 do labels[#labels + 1] = "Token " .. i end
local opts = {title = "Self-Attention Weights (5 tokens)", cmap = "blues", vmin = 0, vmax = 1,
              xlabels = labels, ylabels = labels, xlabel = "Key Position",
              ylabel = "Query Position", annotate = true}
qkv.plot.heatmap(weights, opts)                 -- in the terminal, with the numbers
opts.annotate, opts.file = false, qkv.plot.out("000_self_attention.png")
qkv.plot.heatmap(weights, opts)                 -- imshow's look: colours and a colour bar

print("Each row sums to 1: " .. tostring(weights:sum(-1)))

return {x = x, output = output, weights = weights,
        W_Q = self_attn.W_Q, W_K = self_attn.W_K, W_V = self_attn.W_V}
