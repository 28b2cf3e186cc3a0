# bf16_torch.py -- bench/bf16.lua's peer: torch.matmul in float32 and in
# bfloat16 on the CPU, best of 5, for each shape M K N on the command line
#   python bf16_torch.py M K N [M K N ...]
# prints "RESULT M K N f32_seconds bf16_seconds"
import sys, time
import torch

a = list(map(int, sys.argv[1:]))
for i in range(0, len(a), 3):
    m, k, n = a[i:i + 3]
    out = []
    for dt in (torch.float32, torch.bfloat16):
        x, y = torch.randn(m, k).to(dt), torch.randn(k, n).to(dt)
        x @ y
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            x @ y
            best = min(best, time.perf_counter() - t)
        out.append(best)
    print("RESULT %d %d %d %.6g %.6g" % (m, k, n, out[0], out[1]))
