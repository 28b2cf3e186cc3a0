"""variants_torch.py -- PyTorch's side of bench/variants.lua: attention
variants through FlexAttention and SDPA, B = 1, H = 8, d = 64, float32,
two threads.

    python3 bench/variants_torch.py N VARIANT IMPL [fwd|fwdbwd] [--cold] [--limit S]
    python3 bench/variants_torch.py --quick [N]     smoke test: every case, N 256

VARIANT: dense, sliding (window 256, causal: keeps i - 256 < j <= i),
document (4 equal documents, not causal), alibi (score + slope[h] (j - i),
slopes 2^(-8h/H) for h = 1..H, not causal), softcap (20 tanh(score / 20)).
IMPL: flex (torch.compile(flex_attention), the mask as create_block_mask's
BlockMask, the score change as score_mod), sdpa_mask (SDPA with the mask as
an (N, N) bool tensor or ALiBi as an (1, H, N, N) float bias; softcap has
neither form: SKIP), sdpa (dense SDPA, no mask, whatever VARIANT says: the
baseline).

Prints "RESULT seconds gflops peak_mb first_s mask_s" or "SKIP why" (one
line): seconds the best warm call; gflops over the useful pairs only (4 d H
per pair forward, 14 d H forward and backward: the five products of
bench/attention_backward.lua on top); first_s the first call from nothing
built (mask or BlockMask, compile, run); mask_s the mask or BlockMask alone.
--cold compiles into a fresh inductor cache directory, so first_s is a
user's first compile (20-80 s); without it a cache left by an earlier run
may serve (a few s). --limit S (default 300): a first call still running
after S s prints SKIP and exits. Run once per case, so that the peak
resident memory and the compiled state are the case's own (after one
refused backward, torch's later compiled calls fall back to the unfused
path).
"""
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time

H, D = 8, 64
WINDOW, DOCS, CAP = 256, 4, 20.0
COLD_CACHE = None   # --cold's inductor cache directory, removed at the end
VARIANTS = ("dense", "sliding", "document", "alibi", "softcap")
IMPLS = ("flex", "sdpa_mask", "sdpa")


def pairs(variant, n):
    """the (query, key) pairs that take part, per head"""
    if variant == "sliding":
        w = min(WINDOW, n)
        return w * n - w * (w - 1) // 2   # row i (from 1) keeps min(i, w) keys
    if variant == "document":
        return DOCS * (n // DOCS) ** 2
    return n * n


def best_time(fn, budget):
    best, total, runs = math.inf, 0.0, 0
    while total < budget or (runs < 2 and total < 10):
        t = time.perf_counter()
        fn()
        t = time.perf_counter() - t
        best, total, runs = min(best, t), total + t, runs + 1
    return best


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


def slopes(torch):
    return torch.tensor([2.0 ** (-8.0 * h / H) for h in range(1, H + 1)])


def flex_parts(torch, variant, n):
    """(mask_mod or None, score_mod or None) in FlexAttention's 0-based terms"""
    doc = torch.arange(n) // (n // DOCS)
    sl = slopes(torch)
    masks = {
        "sliding": lambda b, h, i, j: (j <= i) & (i - j < WINDOW),
        "document": lambda b, h, i, j: doc[i] == doc[j],
    }
    scores = {
        "alibi": lambda s, b, h, i, j: s + sl[h] * (j - i),
        "softcap": lambda s, b, h, i, j: CAP * torch.tanh(s / CAP),
    }
    return masks.get(variant), scores.get(variant)


def sdpa_mask(torch, variant, n):
    """the mask or bias SDPA takes for the variant, or a string: why none"""
    i = torch.arange(n).view(n, 1)
    j = torch.arange(n).view(1, n)
    if variant == "dense":
        return torch.ones(n, n, dtype=torch.bool)
    if variant == "sliding":
        return (j <= i) & (i - j < WINDOW)
    if variant == "document":
        return (i // (n // DOCS)) == (j // (n // DOCS))
    if variant == "alibi":
        need = H * n * n * 4
        if need > mem_available() // 2:
            return "ALiBi bias (1, H, N, N) float32 is %.1f GiB, over half the free memory" % (need / 2**30)
        return slopes(torch).view(1, H, 1, 1) * (j - i).float()
    return "SDPA takes a mask or an additive bias; %s changes the score itself" % variant


def run_case(n, variant, impl, mode, budget, limit):
    """returns the RESULT or SKIP line of one case"""
    import torch
    f = torch.nn.functional
    if not hasattr(f, "scaled_dot_product_attention"):
        return "SKIP torch %s has no scaled_dot_product_attention" % torch.__version__
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        if impl == "flex":
            return "SKIP torch %s has no flex_attention" % torch.__version__
    torch.set_num_threads(2)
    torch.manual_seed(1)
    grad = mode == "fwdbwd"
    q, k, v = (torch.randn(1, H, n, D, requires_grad=grad) for _ in range(3))
    g = torch.randn(1, H, n, D)

    t0 = time.perf_counter()
    if impl == "flex":
        mask_mod, score_mod = flex_parts(torch, variant, n)
        bm = create_block_mask(mask_mod, None, None, n, n, device="cpu") if mask_mod else None
        mask_s = time.perf_counter() - t0
        compiled = torch.compile(flex_attention)

        def fwd():
            return compiled(q, k, v, score_mod=score_mod, block_mask=bm)
    elif impl == "sdpa_mask":
        m = sdpa_mask(torch, variant, n)
        if isinstance(m, str):
            return "SKIP " + m
        mask_s = time.perf_counter() - t0

        def fwd():
            return f.scaled_dot_product_attention(q, k, v, attn_mask=m)
    else:
        variant, mask_s = "dense", 0.0

        def fwd():
            return f.scaled_dot_product_attention(q, k, v)

    if grad:
        def once():
            fwd().backward(g)
            q.grad = k.grad = v.grad = None
    else:
        def once():
            with torch.no_grad():
                fwd()

    # the first call: flex compiles here; a compile past the limit ends the case
    def too_long(*_):
        print("SKIP %s: first call (compile) still running after %d s" % (impl, limit), flush=True)
        if COLD_CACHE:
            shutil.rmtree(COLD_CACHE, ignore_errors=True)
        os._exit(0)
    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(limit)
    try:
        once()
    except Exception as e:   # flex's CPU backward: NotImplementedError
        signal.alarm(0)
        msg = (str(e).strip().splitlines() or [""])[0]
        return "SKIP %s %s: %s: %s" % (impl, mode, type(e).__name__, msg)
    signal.alarm(0)
    first_s = time.perf_counter() - t0

    t = best_time(once, budget)
    flops = (14 if grad else 4) * D * H * pairs(variant, n)
    mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return "RESULT %.6f %.2f %.1f %.3f %.3f" % (t, flops / t / 1e9, mb, first_s, mask_s)


def quick(n):
    """every case in one process at a small N: that the script runs, not timing"""
    cases = [(v, i, "fwd") for v in VARIANTS for i in IMPLS]
    # flex's backward last: a refused backward changes later compiled calls
    cases += [("sliding", i, "fwdbwd") for i in ("sdpa_mask", "sdpa", "flex")]
    for v, i, m in cases:
        print("%-8s %-9s %-6s %s" % (v, i, m, run_case(n, v, i, m, 0.02, 300)), flush=True)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    if "--quick" in flags:
        return quick(int(args[0]) if args else 256)
    limit = 300
    if "--limit" in flags:
        limit = int(sys.argv[sys.argv.index("--limit") + 1])
        args.remove(str(limit))
    n, variant, impl = int(args[0]), args[1], args[2]
    mode = args[3] if len(args) > 3 else "fwd"
    if variant not in VARIANTS or impl not in IMPLS or mode not in ("fwd", "fwdbwd"):
        sys.exit(__doc__)
    global COLD_CACHE
    if "--cold" in flags:
        COLD_CACHE = tempfile.mkdtemp(prefix="variants_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = COLD_CACHE   # read when torch's inductor loads
    try:
        print(run_case(n, variant, impl, mode, 1.0, limit), flush=True)
    finally:
        if COLD_CACHE:
            shutil.rmtree(COLD_CACHE, ignore_errors=True)


if __name__ == "__main__":
    main()
