# train_torch.py -- bench/train.lua's peer: the same transformer block's
# training step in PyTorch (2.x from `make bench-deps`), same shapes, same
# work: h = LN(x + MHA(x, causal)), y = h + MLP(h), MSE, Adam.
#   python train_torch.py LAYERS D H SEQ BATCH STEPS THREADS [fresh|autocast]
# prints "RESULT <seconds for STEPS steps> <ms per step>" (best of 3 after
# 5 steps to warm up; fresh: one run of STEPS from the start; autocast: the
# forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16))
import sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

layers, d, h, n, b, steps, threads = map(int, sys.argv[1:8])
fresh = sys.argv[8:9] == ["fresh"]
autocast = sys.argv[8:9] == ["autocast"]
torch.set_num_threads(threads)
torch.manual_seed(0)

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)

    def forward(self, x):
        a, _ = self.attn(x, x, x, attn_mask=self.mask, need_weights=False, is_causal=True)
        x = self.ln(x + a)
        return x + self.mlp(x)

model = nn.Sequential(*[Block() for _ in range(layers)])
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, target = torch.randn(b, n, d), torch.randn(b, n, d)

def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = F.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    return loss

for _ in range(0 if fresh else 5): step()
best = float("inf")
for _ in range(1 if fresh else 3):
    t = time.perf_counter()
    for _ in range(steps): step()
    best = min(best, time.perf_counter() - t)
print("VERSION", torch.__version__)
print("RESULT %.6f %.4f" % (best, best / steps * 1e3))
