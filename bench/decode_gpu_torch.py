"""decode_gpu_torch.py -- PyTorch's side of bench/decode_gpu.lua: SDPA with
enable_gqa=True, B 1, H 32, H_kv 8, d 128, one query a head, on the GPU.

    python3 decode_gpu_torch.py float32|bfloat16 N
        prints "RESULT ms", the median of 50 runs between CUDA events
"""
import sys

import torch
import torch.nn.functional as F

H, HKV, D = 32, 8, 128


def main():
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[sys.argv[1]]
    n = int(sys.argv[2])
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(1)
    q = torch.randn(1, H, 1, D, device="cuda").to(dt)
    k = torch.randn(1, HKV, n, D, device="cuda").to(dt)
    v = torch.randn(1, HKV, n, D, device="cuda").to(dt)
    with torch.no_grad():
        for _ in range(5):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        ts = []
        for _ in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
    ts.sort()
    print("RESULT %.6f" % ts[25])


if __name__ == "__main__":
    main()
