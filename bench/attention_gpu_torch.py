"""attention_gpu_torch.py -- PyTorch's scaled_dot_product_attention on the
GPU for the cases of bench/attention_gpu.lua, and the ceilings.

    python3 bench/attention_gpu_torch.py [--quick] [--fp32]

prints "RESULT dtype heads d N causal milliseconds" per case (B = 16384 / N
sequences, hidden 2048 as 16 x 128 and 32 x 64; N from 512 to 16k, --quick
4k and 16k (and 1k for the forward); bf16 and fp16, --fp32 adds fp32 with
TF32 off), timed with
CUDA events (5 warm-ups, the median of 20); then for bf16 and fp16
"BACKWARD dtype heads d N causal ms", the forward and the backward
(medians of 10 after 3 warm-ups); then "CEILING copy_gbs X" (a 1 GiB
device-to-device copy, bytes read and written) and "CEILING
bf16_gemm_tflops X" (8192^3); or "SKIP why".

    python3 bench/attention_gpu_torch.py --numerics FILE DTYPE HEADS D

reads q, k, v and g (the gradient of out) from FILE (safetensors, written
by attention_gpu.lua) and prints "NUMERICS DTYPE HEADS D CAUSAL MAX RMS
dQRMS dKRMS dVRMS" for SDPA on them in DTYPE on the GPU, and its autograd,
against the same in float64 on the CPU, causal and not.
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

    def run(dev, dt, causal):
        x = [t[n].to(dt).to(dev).requires_grad_() for n in "qkv"]
        o = sdpa(*x, is_causal=causal)
        o.backward(t["g"].to(dt).to(dev))
        return [y.detach().cpu().double() for y in (o, x[0].grad, x[1].grad, x[2].grad)]

    for causal in (False, True):
        want = run("cpu", torch.float64, causal)
        got = run("cuda", DT[name], causal)
        e = [(a - b).abs() for a, b in zip(got, want)]
        print("NUMERICS %s %d %d %d %.6e %s" % (name, heads, d, int(causal), e[0].max().item(),
              " ".join("%.6e" % x.pow(2).mean().sqrt().item() for x in e)))
    sys.exit(0)
QUICK, TINY = "--quick" in sys.argv, "--tiny" in sys.argv     # N 4k and 16k; a dry run
NS = (64, 128) if TINY else (4096, 16384) if QUICK else (512, 1024, 2048, 4096, 8192, 16384)
TOKENS = 256 if TINY else 16384
# the forward also at N 1k when quick: attention_gpu.lua's table of variants
NS_FWD = (1024,) + NS if QUICK and not TINY else NS
for name in ("bfloat16", "float16", "float32") if "--fp32" in sys.argv else ("bfloat16", "float16"):
    for heads, d in ((16, 128), (32, 64)):
        for n in NS_FWD:
            b = TOKENS // n
            q, k, v = (torch.randn(b, heads, n, d, device="cuda", dtype=DT[name]) for _ in range(3))
            for causal in (False, True):
                ms = median_ms(lambda: sdpa(q, k, v, is_causal=causal))
                print("RESULT %s %d %d %d %d %.4f" % (name, heads, d, n, int(causal), ms))
            del q, k, v

# forward and backward, the halves: "BACKWARD dtype heads d N causal ms"
for name in ("bfloat16", "float16"):
    for heads, d in ((16, 128), (32, 64)):
        for n in NS:
            b = TOKENS // n
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
