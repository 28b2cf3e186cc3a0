"""cuda_torch.py -- PyTorch on the GPU for the cases of bench/cuda.lua.

    python3 bench/cuda_torch.py

prints one "RESULT name milliseconds" line per case (or "SKIP why"): the
seed-sized step (project x to Q, K, V, scores, softmax, weights @ V) and
float32 attention (B = 1, H = 8, d = 64) at N = 1k, 4k, 16k, causal or
not, through scaled_dot_product_attention, with TF32 off as in qkv.  Each
is timed with CUDA events: 5 warm-up runs, then the median of 20.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from cuda_events import median_ms, torch_on_gpu  # noqa: E402

torch = torch_on_gpu()
dev = "cuda"


def seed_step():
    x = torch.randn(6, 16, device=dev)
    w = [torch.randn(16, 16, device=dev) for _ in range(3)]

    def step():
        q, k, v = x @ w[0], x @ w[1], x @ w[2]
        s = q @ k.T / 4.0
        return torch.softmax(s, dim=-1) @ v
    return step


print("RESULT seed_step %.4f" % median_ms(seed_step()))
for n in (1024, 4096, 16384):
    q, k, v = (torch.randn(1, 8, n, 64, device=dev) for _ in range(3))
    for causal in (False, True):
        f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        print("RESULT attention_%d_%s %.4f" % (n, "causal" if causal else "full", median_ms(f)))

# bfloat16 elementwise ops and a row sum, 4096 x 4096 (32 MB a tensor)
a, b = (torch.randn(4096, 4096, device=dev).bfloat16() for _ in range(2))
c = torch.randn(4096, 4096, device=dev)
print("RESULT bf16_add %.4f" % median_ms(lambda: a + b))
print("RESULT bf16_plus_f32 %.4f" % median_ms(lambda: a + c))
print("RESULT bf16_gelu %.4f" % median_ms(lambda: torch.nn.functional.gelu(a)))
print("RESULT bf16_sum_rows %.4f" % median_ms(lambda: a.sum(dim=1)))
