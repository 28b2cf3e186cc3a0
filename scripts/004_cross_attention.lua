-- Seed 004, "Self Attention & Cross Attention", the second cell:
-- encoder-decoder cross-attention, Q from the 3 decoder tokens, K and V
-- from the 5 encoder outputs.

qkv.seed(42)
local encoder_out = qkv.randn(5, 4)        -- (src_seq_len, embed_dim)
local decoder_in = qkv.randn(3, 4)         -- (tgt_seq_len, embed_dim)
local embed_dim = 4
local d_k = embed_dim

local W_q = qkv.nn.Linear(embed_dim, embed_dim, {bias = false})   -- from decoder
local W_k = qkv.nn.Linear(embed_dim, embed_dim, {bias = false})   -- from encoder
local W_v = qkv.nn.Linear(embed_dim, embed_dim, {bias = false})   -- from encoder

local Q = W_q(decoder_in)                  -- (tgt_seq_len, embed_dim)
local K = W_k(encoder_out)                 -- (src_seq_len, embed_dim)
local V = W_v(encoder_out)
local scores = qkv.scores(Q, K)            -- Q K^T / sqrt(d_k), (tgt, src)
local attn_weights = qkv.softmax(scores)   -- each decoder token over the source
local context = attn_weights:matmul(V)     -- (tgt_seq_len, embed_dim)

print("Decoder Q:"); print(Q)
print("\nEncoder K:"); print(K)
print("\nCross-attention weights:"); print(attn_weights)
print("\nCross-attention context vectors:"); print(context)

-- which source token each decoder token leans on most
local src = {"src 1", "src 2", "src 3", "src 4", "src 5"}
local tgt = {"tgt 1", "tgt 2", "tgt 3"}
qkv.plot.heatmap(attn_weights, {title = "Cross-attention weights",
  xlabels = src, ylabels = tgt, xlabel = "Source (encoder) tokens",
  ylabel = "Target (decoder) tokens", annotate = "%.3f", cmap = "viridis",
  file = qkv.plot.out("004_cross_attention.png")})

-- the same through qkv.nn.CrossAttention with these weights
local xattn = qkv.nn.CrossAttention(embed_dim, d_k)
xattn:load{W_Q = W_q.weight:t(), W_K = W_k.weight:t(), W_V = W_v.weight:t()}
local context2 = xattn(decoder_in, encoder_out)
print(string.format("\nmax |context - CrossAttention(decoder_in, encoder_out)| = %.3g",
  (context - context2):abs():max():item()))

return {encoder_out = encoder_out, decoder_in = decoder_in, Q = Q, K = K, V = V,
        W_q = W_q.weight:t(), W_k = W_k.weight:t(), W_v = W_v.weight:t(), attn_weights = attn_weights,
        context = context, module_context = context2}
