-- Seed 001, "Cross-Attention Example": queries from X_q (2x4), keys and
-- values from X_kv (3x4), all three W the same; every step, then the
-- picture of X_q, X_kv and the outputs (2-D, for the document's plotly 3-D).

local X_q  = qkv.tensor{{1, 0, 1, 0}, {0, 1, 0, 1}}
local X_kv = qkv.tensor{{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 1, 1}}
local W_Q  = qkv.tensor{{1, 0}, {0, 1}, {1, 0}, {0, 1}}
local W_K, W_V = W_Q, W_Q

local function show(title, t) print(title); print(t) end

-- 1. Q from the query sequence, K and V from the key-value sequence
local Q, K, V = qkv.project(X_q, W_Q), qkv.project(X_kv, W_K), qkv.project(X_kv, W_V)
show("1. Q = X_q W_Q:", Q)
show("   K = X_kv W_K:", K)
show("   V = X_kv W_V:", V)

-- 2.-3. raw scores, then scaled by sqrt(k) = sqrt(2)
local QK = qkv.scores(Q, K, {scale = 1})
show("\n2. Q K^T:", QK)
local scaled = qkv.scores(Q, K)
show("\n3. Q K^T / sqrt(2):", scaled)

-- 4. softmax of [2.83, 0, 2.83] is not the document's [0.5, 0, 0.5]:
-- exp(0) = 1 gives the middle key a small but nonzero share
local A = qkv.softmax(scaled)
show("\n4. A = softmax_row(Q K^T / sqrt(2)):", A)

-- 5. the output, one row per query: (2, 2), not (3, 2)
local output = A:matmul(V)
show("\n5. Cross-Attention Output = A V:", output)
print("Output shape: " .. tostring(output.shape))

-- the document's cell plots a stale Attention_cross; these are the outputs.
-- X_q is X_kv's first two rows: without the document's z they coincide,
-- so X_q goes on top and one label names both
qkv.plot.scatter({
  {X_kv:narrow(2, 1, 2), label = "X_kv", names = {"Xkv1 = Xq1", "Xkv2 = Xq2", "Xkv3"}},
  {X_q:narrow(2, 1, 2), label = "X_q"},
  {output, label = "Cross-Attention", names = {"CA1", "CA2"}},
}, {title = "Plot of Cross-Attention Components", xlabel = "X", ylabel = "Y",
    file = qkv.plot.out("001_cross_attention.png")})

return {Q = Q, K = K, V = V, QK = QK, scaled = scaled, A = A, output = output,
        fused = qkv.attention(Q, K, V)}
