# bf16_torch.py -- bench/bf16.lua's peer on the CPU, the best of at least 5
# runs and 0.25 s, float32 and bfloat16:
#   python bf16_torch.py M K N [M K N ...]      torch.matmul
#     prints "RESULT M K N f32_seconds bf16_seconds"
#   python bf16_torch.py attention N C [N C ...]
#     scaled_dot_product_attention on B 1, H 8, d 64, N tokens, causal if C
#     is 1; prints "ATTN N C f32_seconds bf16_seconds"
import os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from cpu_best import best  # noqa: E402


if sys.argv[1] == "attention":
    a = list(map(int, sys.argv[2:]))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for i in range(0, len(a), 2):
        n, c = a[i:i + 2]
        out = []
        for dt in (torch.float32, torch.bfloat16):
            q, k, v = (torch.randn(1, 8, n, 64).to(dt) for _ in range(3))
            with torch.no_grad():
                out.append(best(lambda: sdpa(q, k, v, is_causal=bool(c))))
        print("ATTN %d %d %.6g %.6g" % (n, c, out[0], out[1]))
    sys.exit(0)

a = list(map(int, sys.argv[1:]))
for i in range(0, len(a), 3):
    m, k, n = a[i:i + 3]
    out = []
    for dt in (torch.float32, torch.bfloat16):
        x, y = torch.randn(m, k).to(dt), torch.randn(k, n).to(dt)
        out.append(best(lambda: x @ y))
    print("RESULT %d %d %d %.6g %.6g" % (m, k, n, out[0], out[1]))
