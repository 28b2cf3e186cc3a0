"""cuda_events.py -- what bench/cuda_torch.py and attention_gpu_torch.py
share: torch on the GPU (TF32 off, as in qkv), and a GPU time in
milliseconds with CUDA events around each run."""
import statistics
import sys


def torch_on_gpu():
    """torch with TF32 off; prints "SKIP why" and exits without torch or a GPU."""
    try:
        import torch
    except ImportError:
        print("SKIP no torch")
        sys.exit(0)
    if not torch.cuda.is_available():
        print("SKIP torch sees no GPU")
        sys.exit(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def median_ms(fn, warm=5, runs=20):
    """The median of `runs` timed runs of fn after `warm` untimed ones."""
    import torch
    for _ in range(warm):
        fn()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)
