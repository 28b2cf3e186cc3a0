"""attention_backward_torch.py -- PyTorch's autograd backward of
softmax(Q K^T / sqrt(d)) V for bench/attention_backward.lua: prints
"RESULT seconds gflops peak_mb" for B = 1, H = 8, d = 64, float32, N given;
a second argument "sdpa" times F.scaled_dot_product_attention's backward
(torch >= 2.0: its fused CPU kernel) instead of the composed one."""
import math
import os
import resource
import sys
import time

import torch

H, D = 8, 64
n = int(sys.argv[1])
sdpa = len(sys.argv) > 2 and sys.argv[2] == "sdpa"
torch.set_num_threads(os.cpu_count())   # Debian's build starts with one
torch.manual_seed(1)
q, k, v = (torch.randn(1, H, n, D, requires_grad=True) for _ in range(3))
g = torch.randn(1, H, n, D)


def once():
    if sdpa:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    else:
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        out = torch.softmax(s, dim=-1) @ v
    t = time.perf_counter()
    out.backward(g)
    t = time.perf_counter() - t
    q.grad = k.grad = v.grad = None
    return t


best, total, runs = math.inf, 0.0, 0
while total < 1.0 or runs < 2:
    t = once()
    best, total, runs = min(best, t), total + t, runs + 1
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT %.6f %.2f %.1f" % (best, 10 * n * n * D * H / best / 1e9, peak))
