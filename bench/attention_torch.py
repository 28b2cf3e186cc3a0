"""attention_torch.py -- PyTorch's time for the shapes of bench/attention.lua.

    python3 bench/attention_torch.py N causal manual|sdpa

prints "RESULT seconds gflops peak_mb" (or "SKIP why") for B = 1, H = 8,
d = 64, float32: `manual` is softmax(Q K^T / sqrt(d)) V written out, `sdpa`
torch.nn.functional.scaled_dot_product_attention (torch >= 2.0).  Run once
per case, so that the peak resident memory is the case's own.
"""
import math
import os
import resource
import sys
import time

import torch

H, D = 8, 64
# the manual form holds H x N x N scores twice (scores, then softmax); past
# this many bytes it goes one head at a time, the same FLOPs in less memory
MAX_SCORES = 2 << 30


def manual(q, k, v, causal):
    n = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def manual_by_head(q, k, v, causal):
    return torch.cat([manual(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1], causal)
                      for h in range(q.shape[1])], dim=1)


def best_time(fn, budget=1.0):
    best, total, runs = math.inf, 0.0, 0
    while total < budget or (runs < 2 and total < 10):
        t = time.perf_counter()
        fn()
        t = time.perf_counter() - t
        best, total, runs = min(best, t), total + t, runs + 1
    return best


def main():
    n, causal, kind = int(sys.argv[1]), sys.argv[2] == "true", sys.argv[3]
    f = torch.nn.functional
    if kind == "sdpa" and not hasattr(f, "scaled_dot_product_attention"):
        print("SKIP torch %s has no scaled_dot_product_attention" % torch.__version__)
        return
    # Debian's torch starts with one thread here; give it every core, as qkv
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, H, n, D) for _ in range(3))
    if kind == "sdpa":
        def fn():
            return f.scaled_dot_product_attention(q, k, v, is_causal=causal)
    elif H * n * n * 4 > MAX_SCORES:
        def fn():
            return manual_by_head(q, k, v, causal)
    else:
        def fn():
            return manual(q, k, v, causal)
    with torch.no_grad():
        t = best_time(fn)
    flops = 4 * n * n * D * H / (2 if causal else 1)
    mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT %.6f %.2f %.1f" % (t, flops / t / 1e9, mb))


if __name__ == "__main__":
    main()
