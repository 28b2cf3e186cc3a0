-- Seed 001, "Self-Attention with Example" and "Computation of Attention
-- Scores": the 3x4 worked example with every intermediate matrix, then the
-- picture of X, V and the output (2-D here, where the document uses plotly 3-D).

local X   = qkv.tensor{{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 1, 1}}
local W_Q = qkv.tensor{{1, 0}, {0, 1}, {1, 0}, {0, 1}}
local W_K = qkv.tensor{{0, 1}, {1, 0}, {0, 1}, {1, 0}}
local W_V = qkv.tensor{{1, 0}, {0, 1}, {1, 0}, {0, 1}}

local function show(title, t) print(title); print(t) end

local Q, K, V = qkv.project(X, W_Q), qkv.project(X, W_K), qkv.project(X, W_V)
show("Q = X W_Q:", Q)
show("K = X W_K:", K)
show("V = X W_V:", V)

local d_k = K:size(-1)
local QK = qkv.scores(Q, K, {scale = 1})         -- the raw scores Q K^T
show("\nQ K^T:", QK)
local scaled = qkv.scores(Q, K)                  -- divided by sqrt(d_k) = sqrt(2)
show("\nQ K^T / sqrt(" .. d_k .. "):", scaled)

-- softmax of [0, 2.83, 2.83] is [0.0287, 0.4856, 0.4856], not the
-- document's [0.106, 0.447, 0.447]; so the output differs from its table too
local weights = qkv.softmax(scaled)
show("\nAttention weights:", weights)
local Attention = weights:matmul(V)
show("\nAttention(Q, K, V) = weights V:", Attention)

-- X is drawn by its first two coordinates, as the document's x and y axes
qkv.plot.scatter({
  {X:narrow(2, 1, 2), label = "X", names = {"X1", "X2", "X3"}},
  {V, label = "V", names = {"V1", "V2", "V3"}},
  {Attention, label = "Attention", names = {"A1", "A2", "A3"}},
}, {title = "Plot of X, V, and Attention", xlabel = "X", ylabel = "Y",
    file = qkv.plot.out("001_self_attention.png")})

return {Q = Q, K = K, V = V, QK = QK, scaled = scaled, weights = weights,
        Attention = Attention, fused = qkv.attention(Q, K, V)}
