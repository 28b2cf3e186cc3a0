"""layers_torch.py -- PyTorch's times for the cases of bench/layers.lua:
prints "RESULT name seconds" (the median) for each, float32 on the CPU."""
import time

import torch

CASES = [("layer_norm seed", (3, 4)), ("layer_norm model", (8, 128, 768)),
         ("log_softmax seed", (3, 4)), ("log_softmax model", (8, 12, 128, 128))]


def median_time(fn, budget=0.3):
    times, total = [], 0.0
    while total < budget or len(times) < 5:
        t = time.perf_counter()
        fn()
        t = time.perf_counter() - t
        times.append(t)
        total += t
    times.sort()
    return times[(len(times) - 1) // 2]


torch.manual_seed(1)
for name, shape in CASES:
    x = torch.randn(shape)
    d = shape[-1]
    if name.startswith("layer_norm"):
        w, b = torch.randn(d), torch.randn(d)
        t = median_time(lambda: torch.nn.functional.layer_norm(x, (d,), w, b))
    else:
        t = median_time(lambda: torch.log_softmax(x, dim=-1))
    print("RESULT %s %.9f" % (name, t))
