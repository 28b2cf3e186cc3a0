-- doc/decoder.lua: qkv.doc entries of the pieces of decoder models
-- (stdlib/qkv/rope.lua, the rotary embedding module in nn/layers.lua).
-- docs/decoder.md is the chapter.

return {
  {name = "qkv.rope", sig = "qkv.rope(x, positions [, opts])", group = "attention",
   doc = [[Rotary position embeddings: x (..., n, d), d even, with feature
pair k of the token at position p turned by (p - 1) base^(-2k/d), as
decoder models do to queries and keys before attention. Positions count
from 1 (position p is PyTorch's position_ids p - 1): an integer p (the
tokens at p, p + 1, ...), or an integer tensor (n), or (B, n) with B x's
first size. opts: base (10000), interleaved (false: Hugging Face LLaMA's
halves, feature k with k + d/2; true: GPT-J's neighbours 2k, 2k + 1).
Angles in float64, the rotation in x's dtype; differentiable, on x's
device.]],
   example = [=[local q = qkv.ones(2, 4)
print(qkv.rope(q, 1))
--> tensor([[ 1.0000,  1.0000,  1.0000,  1.0000],
-->         [-0.3012,  0.9900,  1.3818,  1.0099]])]=],
   see = {"qkv.nn.RotaryEmbedding"}},

  {name = "qkv.nn.RotaryEmbedding", sig = "qkv.nn.RotaryEmbedding(dim [, opts])", group = "modules",
   doc = [[qkv.rope with the cos and sin of positions 1 to max_len made once
(a copy per device and dtype on first use): m(x, positions) rotates x (...,
n, dim), positions as qkv.rope's; a position past max_len is an error.
opts: base (10000), max_len (2048), interleaved (false). No parameters.
As Hugging Face's LlamaRotaryEmbedding with apply_rotary_pos_emb.]],
   example = [=[local rot = qkv.nn.RotaryEmbedding(4, {max_len = 8})
print(rot(qkv.ones(2, 4), 1))
--> tensor([[ 1.0000,  1.0000,  1.0000,  1.0000],
-->         [-0.3012,  0.9900,  1.3818,  1.0099]])]=],
   see = {"qkv.rope"}},
}
