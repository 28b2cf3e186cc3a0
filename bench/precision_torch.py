# precision_torch.py -- bench/precision.lua's peer on the CPU: float32
# products under torch.set_float32_matmul_precision, the best of at least
# 5 runs and 0.25 s, and the error against float64 (||c - ref|| / ||ref||)
#   python precision_torch.py M K N [M K N ...]
#     prints "RESULT M K N precision seconds error" for highest, high, medium
import os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from cpu_best import best  # noqa: E402


a = list(map(int, sys.argv[1:]))
torch.manual_seed(1)
for i in range(0, len(a), 3):
    m, k, n = a[i:i + 3]
    x, y = torch.randn(m, k), torch.randn(k, n)
    ref = x.double() @ y.double()
    for p in ("highest", "high", "medium"):
        torch.set_float32_matmul_precision(p)
        with torch.no_grad():
            t = best(lambda: x @ y)
            err = ((x @ y).double() - ref).norm() / ref.norm()
        print("RESULT %d %d %d %s %.6g %.6g" % (m, k, n, p, t, err))
    torch.set_float32_matmul_precision("highest")
