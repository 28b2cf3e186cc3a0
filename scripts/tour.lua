-- tour.lua: a short walk through qkv, shown by `make run`.
-- Attention by hand on tensors; the primitives (scores, softmax, ...) come next.

local function section(title) print("\n== " .. title) end

section("a tensor from a table, and its view transposed")
local X = qkv.tensor{{1, 0, 1, 0}, {0, 2, 0, 2}, {1, 1, 1, 1}}
print(X, X.shape)
print(X:t())

section("projections: Q = X W_Q, K = X W_K, V = X W_V")
qkv.seed(42)
local d_k = 3
local W_Q, W_K, W_V = qkv.randn(4, d_k), qkv.randn(4, d_k), qkv.randn(4, d_k)
local Q, K, V = X:matmul(W_Q), X:matmul(W_K), X:matmul(W_V)
print(Q)

section("scaled scores Q K^T / sqrt(d_k)")
local S = Q:matmul(K:t()) / math.sqrt(d_k)
print(S)

section("softmax over each row (subtract the row max first)")
local E = (S - S:max(2, true)):exp()
local W = E / E:sum(2, true)
print(W)
print("row sums:", W:sum(2))

section("output = weights V")
print(W:matmul(V))

section("batched: 8 heads of 10 tokens at once, broadcasting")
local q, k = qkv.randn(8, 10, 64), qkv.randn(8, 10, 64)
local s = q:matmul(k:transpose(2, 3)) / 8
print("scores", s.shape, "mean", s:mean():item() < 1, "argmax of head 1:", s[1]:argmax(2))

section("errors are Lua errors that name the shapes")
print(pcall(qkv.matmul, X, Q))
