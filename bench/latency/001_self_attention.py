"""001_self_attention.py -- seed 001's worked self-attention example (X 3x4,
W_Q, W_K, W_V 4x2) in PyTorch: the python side of
scripts/001_self_attention.lua in bench/latency.lua's start-up rows.  The
document gives this example as formulas and a numpy/plotly cell with
hard-coded results; this is the straightforward torch for the formulas,
printing what the qkv script prints.  No plot: there is no plotly or
matplotlib here, while the qkv script also draws its PNG.
"""
import math

import numpy as np  # noqa: F401  (the document's cell; torch loads it anyway)
import torch

X = torch.tensor([[1., 0., 1., 0.], [0., 1., 0., 1.], [1., 1., 1., 1.]])
W_Q = torch.tensor([[1., 0.], [0., 1.], [1., 0.], [0., 1.]])
W_K = torch.tensor([[0., 1.], [1., 0.], [0., 1.], [1., 0.]])
W_V = torch.tensor([[1., 0.], [0., 1.], [1., 0.], [0., 1.]])


def show(title, t):
    print(title)
    print(t)


Q, K, V = X @ W_Q, X @ W_K, X @ W_V
show("Q = X W_Q:", Q)
show("K = X W_K:", K)
show("V = X W_V:", V)

d_k = K.size(-1)
QK = Q @ K.T
show("\nQ K^T:", QK)
scaled = QK / math.sqrt(d_k)
show(f"\nQ K^T / sqrt({d_k}):", scaled)

weights = torch.softmax(scaled, dim=-1)
show("\nAttention weights:", weights)
Attention = weights @ V
show("\nAttention(Q, K, V) = weights V:", Attention)
