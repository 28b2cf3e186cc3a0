"""gpu_probe.py [--kernels] -- what tests/tools/gpu_check.sh's first step
asks of the GPU machine's PyTorch: its versions and where its cuDNN lies
(the library that qkv's cuDNN attention path loads); with --kernels, also
which kernels scaled_dot_product_attention launches, forward and backward,
for the bench's half-precision shapes (20 s or so)."""
import glob
import os
import sys

import torch

print("torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version())
try:
    import nvidia.cudnn as nc
    for p in nc.__path__:
        print("nvidia.cudnn at", p)
        for f in sorted(glob.glob(os.path.join(p, "lib", "*")) + glob.glob(os.path.join(p, "include", "*"))):
            print("   ", f)
except ImportError as e:
    print("nvidia.cudnn:", e)
print("sdpa flash", torch.backends.cuda.flash_sdp_enabled(), "mem_efficient",
      torch.backends.cuda.mem_efficient_sdp_enabled(), "cudnn", torch.backends.cuda.cudnn_sdp_enabled(),
      "math", torch.backends.cuda.math_sdp_enabled())
if "--kernels" not in sys.argv:
    sys.exit(0)
sdpa = torch.nn.functional.scaled_dot_product_attention
from torch.profiler import profile, ProfilerActivity  # noqa: E402
for dt in (torch.bfloat16, torch.float16):
    for h, d in ((16, 128), (32, 64)):
        for causal in (False, True):
            q, k, v = (torch.randn(4, h, 4096, d, device="cuda", dtype=dt).requires_grad_() for _ in range(3))
            sdpa(q, k, v, is_causal=causal).sum().backward()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                sdpa(q, k, v, is_causal=causal).backward(torch.ones_like(q))
                torch.cuda.synchronize()
            names = sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"})
            print("sdpa kernels", dt, h, d, "causal" if causal else "full", names)
