"""bert_torch.py -- the Python side of bench/bert.lua: the same encoder in
PyTorch on the same token ids, float32 on the CPU.

    python3 bench/bert_torch.py MODEL_DIR IDS.npy MASK.npy TEXTS.txt BATCH

prints "RESULT name seconds" lines:
  load       model.safetensors read into torch tensors (numpy parses it)
  forward    BERT in plain torch (F.linear, matmul, softmax, layer_norm,
             gelu) over every batch, mean-pooled and normalised
  forward_autocast  the same under torch.autocast("cpu", dtype=torch.bfloat16)
  hf_forward Hugging Face's BertModel on the same batches (only where
             transformers imports), and hf_tokenize its fast tokenizer
times are medians of 3 passes over all the sentences."""
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

DT = {"F32": np.float32, "I64": np.int64}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    w = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(raw, DT[e["dtype"]], offset=8 + n + b, count=(end - b) // np.dtype(DT[e["dtype"]]).itemsize)
        w[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return w


def encoder(w, cfg):
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    eps = cfg["layer_norm_eps"]

    def ln(x, p):
        return F.layer_norm(x, (d,), w[p + ".weight"], w[p + ".bias"], eps)

    def lin(x, p):
        return F.linear(x, w[p + ".weight"], w[p + ".bias"])

    def forward(ids, mask):
        B, n = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] +
             w["embeddings.position_embeddings.weight"][:n] +
             w["embeddings.token_type_embeddings.weight"][0])
        x = ln(x, "embeddings.LayerNorm")
        bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for i in range(cfg["num_hidden_layers"]):
            p = "encoder.layer.%d." % i

            def heads(t):
                return t.view(B, n, H, d // H).transpose(1, 2)
            q = heads(lin(x, p + "attention.self.query"))
            k = heads(lin(x, p + "attention.self.key"))
            v = heads(lin(x, p + "attention.self.value"))
            s = q @ k.transpose(-1, -2) / (d // H) ** 0.5 + bias
            c = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, n, d)
            x = ln(x + lin(c, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            f = lin(F.gelu(lin(x, p + "intermediate.dense")), p + "output.dense")
            x = ln(x + f, p + "output.LayerNorm")
        m = mask[:, :, None].float()
        e = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(e, dim=1)
    return forward


def median(fn, runs=3):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def main():
    model_dir, ids_path, mask_path, texts_path, batch = sys.argv[1:6]
    batch = int(batch)
    torch.set_grad_enabled(False)
    # Debian's torch starts with one thread here; give it every core, as qkv
    torch.set_num_threads(os.cpu_count() or 1)
    ids, mask = torch.from_numpy(np.load(ids_path)), torch.from_numpy(np.load(mask_path))
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    path = os.path.join(model_dir, "model.safetensors")
    print("RESULT load %.9f" % median(lambda: load(path), 5))
    forward = encoder(load(path), cfg)
    batches = []
    for i in range(0, ids.shape[0], batch):
        m = mask[i:i + batch]
        n = int(m.sum(1).max())          # each batch padded to its longest sentence
        batches.append((ids[i:i + batch, :n], m[:, :n]))
    print("RESULT forward %.9f" % median(lambda: [forward(i, m) for i, m in batches]))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        print("RESULT forward_autocast %.9f" % median(lambda: [forward(i, m) for i, m in batches]))
    try:
        import transformers
    except ImportError:
        return
    model = transformers.BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    print("RESULT hf_forward %.9f" % median(
        lambda: [model(input_ids=i, attention_mask=m) for i, m in batches]))
    tok = transformers.BertTokenizerFast.from_pretrained(model_dir)
    with open(texts_path) as f:
        texts = f.read().split("\n")[:-1]
    print("RESULT hf_tokenize %.9f" % median(
        lambda: [tok(texts[i:i + batch], padding=True) for i in range(0, len(texts), batch)]))


if __name__ == "__main__":
    main()
