"""variants_gpu_torch.py -- PyTorch's side of bench/variants_gpu.lua:
attention variants through the compiled flex_attention on the GPU, and
dense SDPA, B = 1, H = 8, d = 64, float32 unless DTYPE says.

    python3 bench/variants_gpu_torch.py N VARIANT [fwd|fwdbwd] [float32|bfloat16|float16]

VARIANT as bench/variants_gpu.lua (and bench/variants_torch.py, the CPU's
peer): dense (SDPA, no mask), sliding (window 256, causal), document (4
equal documents), alibi (score + 2^(-8h/H) (j - i)), softcap (20 tanh(s /
20)). Prints "RESULT ms first_s" (the median of 20 calls between CUDA
events after 3 warm-ups; the first call from nothing built: BlockMask,
compile, run) or "SKIP why".
"""
import sys
import time

H, D = 8, 64
WINDOW, DOCS, CAP = 256, 4, 20.0


def main():
    n, variant = int(sys.argv[1]), sys.argv[2]
    mode = sys.argv[3] if len(sys.argv) > 3 else "fwd"
    dtype = sys.argv[4] if len(sys.argv) > 4 else "float32"
    try:
        import torch
    except ImportError:
        print("SKIP no torch")
        return
    if not torch.cuda.is_available():
        print("SKIP torch sees no GPU")
        return
    dev = "cuda"
    torch.manual_seed(1)
    dt = getattr(torch, dtype)
    q, k, v = (torch.randn(1, H, n, D, device=dev).to(dt).requires_grad_(mode == "fwdbwd")
               for _ in range(3))
    g = torch.randn(1, H, n, D, device=dev).to(dt)
    t0 = time.perf_counter()
    if variant == "dense":
        def attend():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)
    else:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError:
            print("SKIP torch %s has no flex_attention" % torch.__version__)
            return
        doc = torch.arange(n, device=dev) // (n // DOCS)
        sl = torch.tensor([2.0 ** (-8.0 * h / H) for h in range(1, H + 1)], device=dev)
        masks = {"sliding": lambda b, h, i, j: (j <= i) & (i - j < WINDOW),
                 "document": lambda b, h, i, j: doc[i] == doc[j]}
        scores = {"alibi": lambda s, b, h, i, j: s + sl[h] * (j - i),
                  "softcap": lambda s, b, h, i, j: CAP * torch.tanh(s / CAP)}
        bm = masks.get(variant) and create_block_mask(masks[variant], None, None, n, n, device=dev)
        flex = torch.compile(flex_attention)

        def attend():
            return flex(q, k, v, score_mod=scores.get(variant), block_mask=bm)

    def once():
        out = attend()
        if mode == "fwdbwd":
            out.backward(g)
            q.grad = k.grad = v.grad = None

    once()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(3):
        once()
    ts = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        once()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    print("RESULT %.4f %.3f" % (ts[10], first))


if __name__ == "__main__":
    main()
