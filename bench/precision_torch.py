# precision_torch.py -- bench/precision.lua's peer on the CPU: float32
# products under torch.set_float32_matmul_precision, the best of at least
# 5 runs and 0.25 s, and the error against float64 (||c - ref|| / ||ref||)
#   python precision_torch.py M K N [M K N ...]
#     prints "RESULT M K N precision seconds error" for highest, high, medium
import sys, time
import torch


def best(f):
    f()
    b, n, t0 = float("inf"), 0, time.perf_counter()
    while n < 5 or time.perf_counter() - t0 < 0.25:
        t = time.perf_counter()
        f()
        b, n = min(b, time.perf_counter() - t), n + 1
    return b


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
