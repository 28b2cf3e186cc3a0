"""latency_torch.py -- PyTorch's per-call times for sections 2 and 3 of
bench/latency.lua: one tiny attention step, and each primitive on
seed-sized tensors.

    /usr/bin/python3 bench/latency_torch.py step|prim [warm batch batches]

prints "INFO ..." (torch's version and threads), then "RESULT key us" per
workload: microseconds per call, the median of `batches` batch means after
`warm` seconds of warm-up, a batch being sized to `batch` seconds
(defaults 0.1, 0.03, 15; latency.lua passes its own).  The same procedure as
latency.lua's per_call; the collector stays on, as it does in qkv, and
everything runs under torch.no_grad().  Each statement is the
straightforward PyTorch a user would write for the qkv call of the same key.
"""
import gc
import math
import statistics
import sys
import timeit

import torch
import torch.nn.functional as F


def tensors():
    """the tensors of the statements, the same shapes as latency.lua's SETUP"""
    torch.manual_seed(1)
    Q, K, V = torch.randn(4, 16), torch.randn(9, 16), torch.randn(9, 16)
    X3 = torch.randn(1, 4, 16)
    return dict(
        torch=torch, F=F, math=math, gc=gc, d=16,
        x4=torch.randn(4, 4), Q=Q, K=K, V=V,
        W=torch.randn(16, 16), b=torch.randn(16),
        W1=torch.randn(16, 16), b1=torch.randn(16), W2=torch.randn(16, 16), b2=torch.randn(16),
        S=Q @ K.T / math.sqrt(16), M=torch.ones(4, 9, dtype=torch.bool).tril(9 - 4),
        X3=X3, H=X3.view(1, 4, 2, 8).transpose(1, 2),
    )


ATTENTION = "torch.softmax(Q @ K.T / math.sqrt(d), dim=-1) @ V"

STEP = {"step": ATTENTION}

PRIM = {
    "add4": "x4 + 1",
    "softmax4": "torch.softmax(x4, dim=-1)",
    "matmul4": "x4 @ x4",
    "project": "Q @ W",
    "scores": "Q @ K.T / math.sqrt(d)",
    "mask": "S.masked_fill(~M, -math.inf)",
    "softmax49": "torch.softmax(S, dim=-1)",
    "heads": "X3.view(1, 4, 2, 8).transpose(1, 2)",
    "merge": "H.transpose(1, 2).reshape(1, 4, 16)",
    "gelu": "F.gelu(Q)",
    "align": "Q @ W + b",
    "align_mlp": "F.gelu(Q @ W1 + b1) @ W2 + b2",
    "attention": ATTENTION,
}


def per_call(stmt, warm, batch, batches):
    """seconds per call of stmt, and the calls per batch"""
    # timeit turns the collector off unless the set-up turns it back on
    timer = timeit.Timer(stmt, setup="gc.enable()", globals=tensors())
    # warm up while doubling the loop until it takes a quarter batch; size
    # the batch at the best rate seen, as a pause only ever slows a run
    n, t = 1, timer.timeit(1)
    spent, best = t, t
    while spent < warm or t < batch / 4:
        if t < batch / 4:
            n *= 2
        t = timer.timeit(n)
        spent, best = spent + t, min(best, t / n)
    n = math.ceil(batch / best)
    return statistics.median(timer.timeit(n) / n for _ in range(batches)), n


def main():
    section = sys.argv[1] if len(sys.argv) > 1 else "prim"
    warm, batch = (float(a) for a in (sys.argv[2:4] if len(sys.argv) > 3 else (0.1, 0.03)))
    batches = int(sys.argv[4]) if len(sys.argv) > 4 else 15
    cases = {"step": STEP, "prim": PRIM}[section]
    print("INFO torch %s, %d thread(s), no_grad" % (torch.__version__, torch.get_num_threads()))
    with torch.no_grad():
        for key, stmt in cases.items():
            sec, _ = per_call(stmt, warm, batch, batches)
            print("RESULT %s %.6f" % (key, sec * 1e6), flush=True)


if __name__ == "__main__":
    main()
