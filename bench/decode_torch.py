"""decode_torch.py -- PyTorch's side of bench/decode.lua: SDPA with
enable_gqa=True, B = 1, H = 32, H_kv = 8, d = 128, float32 (decode16:
bfloat16).

    python decode_torch.py decode|decode16|prefill N THREADS
        prints "RESULT seconds gflops peak_mb", as bench/decode.lua's cases
"""
import resource
import sys
import time

import torch
import torch.nn.functional as F

H, HKV, D = 32, 8, 128


def main():
    kind, n, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    # decode16: decode with bfloat16 q, k, v
    dt = torch.bfloat16 if kind.endswith("16") else torch.float32
    kind = kind.removesuffix("16")
    nq = 1 if kind == "decode" else n
    q = torch.randn(1, H, nq, D).to(dt)
    k, v = torch.randn(1, HKV, n, D).to(dt), torch.randn(1, HKV, n, D).to(dt)
    # decoding: the one query sees every key (no mask); prefill: causal
    causal = kind != "decode"

    def f():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    f()
    best, spent = float("inf"), 0.0
    while spent < 1.0 or best == float("inf"):
        t0 = time.perf_counter()
        f()
        t = time.perf_counter() - t0
        best, spent = min(best, t), spent + t
    flops = 4 * D * H * n if kind == "decode" else 2 * D * H * n * n
    mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT %.6f %.2f %.1f" % (best, flops / best / 1e9, mb))


if __name__ == "__main__":
    main()
