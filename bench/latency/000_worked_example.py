"""000_worked_example.py -- seed 000, sections 3 and 4.1, as the document
writes them in PyTorch: the python side of scripts/000_worked_example.lua
in bench/latency.lua's start-up rows.  The document's own cells (set-up
imports, its scaled_dot_product_attention, the test cell), plus the prints
the qkv script adds (section 3's two softmax values, the checkpoint's
weights) so that both print the same numbers; no matplotlib here, and the
example draws nothing.
"""
import math

import numpy as np  # noqa: F401  (the document's set-up cell; torch loads it anyway)
import torch
import torch.nn.functional as F

torch.manual_seed(42)
np.random.seed(42)

# section 3: a raw score of 3.0 next to a 0, with d_k = 3
peaked = F.softmax(torch.tensor([3.0, 0.0]), dim=-1)[0]
gentle = F.softmax(torch.tensor([3.0 / math.sqrt(3), 0.0]), dim=-1)[0]
print(f"Without scaling: softmax([3.0, 0]) = {peaked:.4f} (very peaked)")
print(f"With scaling: softmax([3.0/1.73, 0]) = {gentle:.4f} (gentler)\n")


def scaled_dot_product_attention(Q, K, V):
    """
    Compute scaled dot-product attention manually.

    Args:
        Q: Query tensor of shape (seq_len_q, d_k)
        K: Key tensor of shape (seq_len_k, d_k)
        V: Value tensor of shape (seq_len_k, d_v)

    Returns:
        output: (seq_len_q, d_v) — weighted combination of values
        weights: (seq_len_q, seq_len_k) — attention weight matrix
    """
    d_k = Q.size(-1)

    # Step 1: Compute raw scores
    scores = torch.matmul(Q, K.transpose(-2, -1))  # (seq_q, seq_k)
    print(f"  Raw scores shape: {scores.shape}")
    print(f"  Raw scores:\n{scores}")

    # Step 2: Scale
    scores_scaled = scores / math.sqrt(d_k)
    print(f"\n  Scaled scores:\n{scores_scaled}")

    # Step 3: Softmax (row-wise)
    weights = F.softmax(scores_scaled, dim=-1)
    print(f"\n  Attention weights (each row sums to 1):\n{weights}")
    print(f"  Row sums: {weights.sum(dim=-1)}")

    # Step 4: Weighted sum of values
    output = torch.matmul(weights, V)  # (seq_q, d_v)

    return output, weights


# Test with the exact example from the article
Q = torch.tensor([[1.0, 0.0, 1.0],
                  [0.0, 1.0, 0.0]])

K = torch.tensor([[1.0, 1.0, 0.0],
                  [0.0, 0.0, 1.0]])

V = torch.tensor([[1.0, 2.0],
                  [3.0, 4.0]])

print("=== Self-Attention Example ===")
print(f"Q shape: {Q.shape} (2 tokens, d_k=3)")
print(f"K shape: {K.shape} (2 tokens, d_k=3)")
print(f"V shape: {V.shape} (2 tokens, d_v=2)")
print()

output, weights = scaled_dot_product_attention(Q, K, V)
print(f"\n  Output:\n{output}")
print(f"  Output shape: {output.shape}")

# the checkpoint, as the qkv script prints it
w = weights.tolist()
print(f"\nToken 1 weights: [{w[0][0]:.4f}, {w[0][1]:.4f}] -> the average of V's rows")
print(f"Token 2 weights: [{w[1][0]:.4f}, {w[1][1]:.4f}] -> leans toward token 1's value")
