"""generate_torch.py -- PyTorch's side of bench/generate.lua: the decoder
script's model (LLaMA's layout: RMSNorm, grouped-query attention with
rotary positions in Hugging Face's half-split form, SwiGLU) in eager
PyTorch with a static KV cache, on the weights qkv wrote.

    python generate_torch.py model.safetensors STEPS THREADS 128,512,2048

prints "CHECK max|logits - qkv's|" for the 64 tokens qkv stored with the
weights, then "RESULT context seconds_per_token" for each context: the
best of 3 runs of STEPS one-token steps after the context went through
the cache. The safetensors file is read here (no package needed).
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

BASE = 10000.0


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header, base = json.loads(data[8:8 + n]), 8 + n
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            out[name] = t
            continue
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[base + a:base + b]),
                                     dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


class Model:
    def __init__(self, w):
        self.w = w
        self.layers = 0
        while f"model.layers.{self.layers}.input_layernorm.weight" in w:
            self.layers += 1
        self.D = w["model.embed_tokens.weight"].shape[1]
        self.H = int(w["__metadata__"]["heads"])
        self.HD = w["model.layers.0.self_attn.q_proj.weight"].shape[0] // self.H
        self.HKV = w["model.layers.0.self_attn.k_proj.weight"].shape[0] // self.HD

    def rope(self, x, pos):
        # x (B, heads, n, hd); positions from pos (0-based), angles in float64
        n, hd = x.shape[2], x.shape[3]
        inv = 1.0 / (BASE ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.arange(pos, pos + n, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def forward(self, ids, pos, cache):
        w, B, n = self.w, ids.shape[0], ids.shape[1]
        x = F.embedding(ids, w["model.embed_tokens.weight"])
        for l in range(self.layers):
            p = f"model.layers.{l}."
            h = F.rms_norm(x, (self.D,), w[p + "input_layernorm.weight"])
            q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(B, n, self.H, self.HD).transpose(1, 2)
            k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(B, n, self.HKV, self.HD).transpose(1, 2)
            v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(B, n, self.HKV, self.HD).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            kc, vc = cache[l]
            kc[:, :, pos:pos + n] = k
            vc[:, :, pos:pos + n] = v
            k, v = kc[:, :, :pos + n], vc[:, :, :pos + n]
            # causal from an empty cache; one new token sees every key
            o = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1 and pos == 0, enable_gqa=True)
            x = x + F.linear(o.transpose(1, 2).reshape(B, n, self.H * self.HD), w[p + "self_attn.o_proj.weight"])
            h = F.rms_norm(x, (self.D,), w[p + "post_attention_layernorm.weight"])
            g = F.linear(h, w[p + "mlp.gate_proj.weight"])
            u = F.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(g) * u, w[p + "mlp.down_proj.weight"])
        x = F.rms_norm(x, (self.D,), w["model.norm.weight"])
        return F.linear(x, w["lm_head.weight"])

    def cache(self, max_len):
        return [(torch.zeros(1, self.HKV, max_len, self.HD), torch.zeros(1, self.HKV, max_len, self.HD))
                for _ in range(self.layers)]


def main():
    path, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    contexts = [int(c) for c in sys.argv[4].split(",")]
    torch.set_num_threads(threads)
    w = load(path)
    m = Model(w)
    with torch.inference_mode():
        ids = w["check.tokens"]
        got = m.forward(ids, 0, m.cache(ids.shape[1]))
        print("CHECK %.6g" % (got - w["check.logits"]).abs().max().item())
        torch.manual_seed(1)
        V = w["lm_head.weight"].shape[0]
        tokens = torch.randint(0, V, (1, max(contexts) + steps))
        for ctx in contexts:
            best = float("inf")
            for _ in range(3):
                cache = m.cache(ctx + steps)
                m.forward(tokens[:, :ctx], 0, cache)
                t0 = time.perf_counter()
                for i in range(steps):
                    m.forward(tokens[:, ctx + i:ctx + i + 1], ctx + i, cache)
                best = min(best, (time.perf_counter() - t0) / steps)
            print("RESULT %d %.9f" % (ctx, best))


if __name__ == "__main__":
    main()
