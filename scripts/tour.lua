-- tour.lua: a short walk through qkv, shown by `make run`: the attention
-- primitives in order on seed 001's worked example, a heatmap, then heads,
-- alignment and a model from qkv.nn. Runs in a few milliseconds.

local function section(title) print("\n== " .. title) end

section("3 tokens of 4 features, and the weights of seed 001")
local X = qkv.tensor{{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 1, 1}}
local W_Q = qkv.tensor{{1, 0}, {0, 1}, {1, 0}, {0, 1}}
local W_K = qkv.tensor{{0, 1}, {1, 0}, {0, 1}, {1, 0}}
local W_V = W_Q
print(X)

section("project: Q = X W_Q  (K and V alike)")
local Q, K, V = qkv.project(X, W_Q), qkv.project(X, W_K), qkv.project(X, W_V)
print(Q)

section("scores: Q K^T / sqrt(d_k)")
local S = qkv.scores(Q, K)
print(S)

section("mask: a causal mask hides the future (-inf)")
local Sc = qkv.mask(S, qkv.causal(3))
print(Sc)

section("softmax: each row sums to 1 (all of S, then the masked one)")
local W = qkv.softmax(S)
print(W)
print(qkv.softmax(Sc))

section("the weights as a heatmap")
local names = {"x1", "x2", "x3"}
qkv.plot.heatmap(W, {title = "self-attention weights", xlabels = names, ylabels = names,
                     xlabel = "keys", ylabel = "queries"})

section("output = weights V; qkv.attention does it all in one call")
print(W:matmul(V))
local out = qkv.attention(Q, K, V)
print(out)

section("heads: (1, 10, 512) -> 8 heads of 64, and merged back")
qkv.seed(42)
local x = qkv.randn(1, 10, 512)
local h = qkv.heads(x, 8)
print(h.shape, qkv.merge(h).shape)

section("align: 16 patches of 768 features into a 512-wide text space")
local aligner = qkv.nn.TokenAligner(768, 512, "mlp")
print(aligner(qkv.randn(16, 768)).shape)

section("a model: multi-head cross-attention, 3 words over 9 patches")
local mhca = qkv.nn.MultiHeadCrossAttention(16, 4)
local o, w = mhca(qkv.randn(3, 16), qkv.randn(9, 16))
print(o.shape, w.shape, "rows sum to 1:", (w:sum(-1) - 1):abs():max():item() < 1e-6)

section("errors are Lua errors that name the function and the shapes")
print(pcall(qkv.scores, Q, qkv.randn(5, 3)))
print("\nMore: scripts/ has every example of the seed documents (scripts/README.md).")
