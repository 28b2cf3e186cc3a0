# cpu_best.py -- what the CPU benches' PyTorch peers share (bench/bf16_torch.py,
# precision_torch.py): best(f), the best time of at least 5 runs of f and a
# quarter of a second after one to warm up, as bench/lib/timing.lua's
# best_short on qkv's side.
import time


def best(f):
    f()
    b, n, t0 = float("inf"), 0, time.perf_counter()
    while n < 5 or time.perf_counter() - t0 < 0.25:
        t = time.perf_counter()
        f()
        b, n = min(b, time.perf_counter() - t), n + 1
    return b
