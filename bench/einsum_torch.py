"""einsum_torch.py -- torch.einsum's time for a row of bench/einsum.lua.

    python3 bench/einsum_torch.py SPEC b h q k d budget

prints "RESULT seconds" (per call, the best of rounds of calls) for float32
operands of the shapes the spec's two terms take: bhqd and bhkd, or bhqk
and bhkd.
"""
import sys
import time

import torch


def per_call(fn, budget):
    reps, t = 1, 0.0
    while True:                      # rounds of about 10 ms
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        t = time.perf_counter() - t0
        if t >= 0.01 or reps >= 1 << 20:
            break
        reps *= 2
    best, total, rounds = float("inf"), 0.0, 0
    while total < budget or rounds < 3:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        dt = time.perf_counter() - t0
        best, total, rounds = min(best, dt / reps), total + dt, rounds + 1
    return best


def main():
    spec = sys.argv[1]
    b, h, q, k, d = (int(v) for v in sys.argv[2:7])
    budget = float(sys.argv[7])
    size = {"b": b, "h": h, "q": q, "k": k, "d": d}
    lhs = spec.split("->")[0].split(",")
    torch.manual_seed(1)
    x, y = (torch.randn(*[size[c] for c in term]) for term in lhs)
    print("RESULT %.9f" % per_call(lambda: torch.einsum(spec, x, y), budget))


if __name__ == "__main__":
    main()
