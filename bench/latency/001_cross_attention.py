"""001_cross_attention.py -- seed 001's worked cross-attention example (X_q
2x4, X_kv 3x4, one W 4x2), steps 1-5, in PyTorch: the python side of
scripts/001_cross_attention.lua in bench/latency.lua's start-up rows.  The
document gives the steps as formulas and a numpy/plotly cell; this is the
straightforward torch for them, printing what the qkv script prints.  No
plot: there is no plotly or matplotlib here, while the qkv script also
draws its PNG.
"""
import math

import numpy as np  # noqa: F401  (the document's cell; torch loads it anyway)
import torch

X_q = torch.tensor([[1., 0., 1., 0.], [0., 1., 0., 1.]])
X_kv = torch.tensor([[1., 0., 1., 0.], [0., 1., 0., 1.], [1., 1., 1., 1.]])
W_Q = torch.tensor([[1., 0.], [0., 1.], [1., 0.], [0., 1.]])
W_K, W_V = W_Q, W_Q


def show(title, t):
    print(title)
    print(t)


# 1. Q from the query sequence, K and V from the key-value sequence
Q, K, V = X_q @ W_Q, X_kv @ W_K, X_kv @ W_V
show("1. Q = X_q W_Q:", Q)
show("   K = X_kv W_K:", K)
show("   V = X_kv W_V:", V)

# 2.-3. raw scores, then scaled by sqrt(k) = sqrt(2)
QK = Q @ K.T
show("\n2. Q K^T:", QK)
scaled = QK / math.sqrt(K.size(-1))
show("\n3. Q K^T / sqrt(2):", scaled)

# 4. row-wise softmax
A = torch.softmax(scaled, dim=-1)
show("\n4. A = softmax_row(Q K^T / sqrt(2)):", A)

# 5. the output, one row per query
output = A @ V
show("\n5. Cross-Attention Output = A V:", output)
print(f"Output shape: {output.shape}")
