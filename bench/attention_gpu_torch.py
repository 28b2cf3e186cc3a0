"""attention_gpu_torch.py -- PyTorch's scaled_dot_product_attention on the
GPU for the cases of bench/attention_gpu.lua, and the ceilings.

    python3 bench/attention_gpu_torch.py [--quick]

prints "RESULT dtype heads d N causal milliseconds" per case (B = 16384 / N
sequences, hidden 2048 as 16 x 128 and 32 x 64; N from 512 to 16k; bf16,
fp16 and fp32 with TF32 off), timed with CUDA events (5 warm-ups, the
median of 20), then "CEILING copy_gbs X" (a 1 GiB device-to-device copy,
bytes read and written) and "CEILING bf16_gemm_tflops X" (8192^3), or
"SKIP why". Then, for bf16 and fp16, "BACKWARD dtype heads d N causal ms":
the forward and the backward (medians of 10 after 3 warm-ups).

    python3 bench/attention_gpu_torch.py --numerics FILE DTYPE HEADS D

reads q, k, v from FILE (safetensors, written by attention_gpu.lua) and
prints "NUMERICS DTYPE HEADS D CAUSAL MAX RMS" for SDPA on them in DTYPE
against SDPA in float64 on the CPU, causal and not.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from cuda_events import median_ms, torch_on_gpu  # noqa: E402

torch = torch_on_gpu()
DT = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
sdpa = torch.nn.functional.scaled_dot_product_attention

if len(sys.argv) > 1 and sys.argv[1] == "--numerics":
    from safetensors.torch import load_file
    path, name, heads, d = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    t = load_file(path)
    for causal in (False, True):
        want = sdpa(t["q"].double(), t["k"].double(), t["v"].double(), is_causal=causal)
        got = sdpa(*(t[x].to(DT[name]).cuda() for x in "qkv"), is_causal=causal).cpu().double()
        err = (got - want).abs()
        print("NUMERICS %s %d %d %d %.6e %.6e" % (name, heads, d, int(causal), err.max().item(),
                                                  err.pow(2).mean().sqrt().item()))
    sys.exit(0)
# --quick: the halves at 1k, 4k and 16k (attention_gpu.lua's variant table)
QUICK = len(sys.argv) > 1 and sys.argv[1] == "--quick"
for name in ("bfloat16", "float16") if QUICK else ("bfloat16", "float16", "float32"):
    for heads, d in ((16, 128), (32, 64)):
        for n in (1024, 4096, 16384) if QUICK else (512, 1024, 2048, 4096, 8192, 16384):
            b = 16384 // n
            q, k, v = (torch.randn(b, heads, n, d, device="cuda", dtype=DT[name]) for _ in range(3))
            for causal in (False, True):
                ms = median_ms(lambda: sdpa(q, k, v, is_causal=causal))
                print("RESULT %s %d %d %d %d %.4f" % (name, heads, d, n, int(causal), ms))
            del q, k, v

# forward and backward, the halves: "BACKWARD dtype heads d N causal ms"
for name in ("bfloat16", "float16"):
    for heads, d in ((16, 128), (32, 64)):
        for n in (4096, 16384) if QUICK else (512, 1024, 2048, 4096, 8192, 16384):
            b = 16384 // n
            q, k, v = (torch.randn(b, heads, n, d, device="cuda", dtype=DT[name]).requires_grad_()
                       for _ in range(3))
            g = torch.randn(b, heads, n, d, device="cuda", dtype=DT[name])
            for causal in (False, True):
                def step():
                    q.grad = k.grad = v.grad = None
                    sdpa(q, k, v, is_causal=causal).backward(g)
                ms = median_ms(step, warm=3, runs=10)
                print("BACKWARD %s %d %d %d %d %.4f" % (name, heads, d, n, int(causal), ms))
            del q, k, v, g

x = torch.empty(1 << 28, device="cuda")                 # 1 GiB of float32
y = torch.empty_like(x)
print("CEILING copy_gbs %.0f" % (2 * x.numel() * 4 / median_ms(lambda: y.copy_(x)) / 1e6))
a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
print("CEILING bf16_gemm_tflops %.0f" % (2 * 8192 ** 3 / median_ms(lambda: a @ b) / 1e9))
