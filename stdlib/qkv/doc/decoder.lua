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

  {name = "qkv.nn.SwiGLU", sig = "qkv.nn.SwiGLU(dim, hidden [, opts])", group = "modules",
   doc = [[LLaMA's MLP: m(x) is down_proj(silu(gate_proj(x)) * up_proj(x)), three
qkv.nn.Linear layers named as Hugging Face's LlamaMLP, gate_proj and up_proj
(dim to hidden) and down_proj (hidden to dim). opts: bias (false), dtype
and device (as qkv.nn.Linear's). x must end in dim.]],
   example = [=[local m = qkv.nn.SwiGLU(4, 8)
print(m(qkv.ones(2, 4)).shape)   --> (2, 4)]=]},

  {name = "qkv.nn.KVCache", sig = "qkv.nn.KVCache(batch, heads, max_len, head_dim [, opts])",
   group = "modules",
   doc = [[One attention layer's keys and values for generation, preallocated
(batch, heads, max_len, head_dim) each, opts dtype (float32; float64,
float16 or bfloat16) and device.
cache:update(k, v) writes k and v (batch, heads, n, head_dim) after the
tokens it holds and returns the keys and values of all of them, views of
the cache; cache:reset() empties it and cache.length counts the tokens. A
cache past max_len, or k and v of another shape, dtype or device, is an
error; nn.MultiHeadAttention takes it as opts.cache.]],
   example = [=[local c = qkv.nn.KVCache(1, 2, 16, 4)
local k = c:update(qkv.ones(1, 2, 3, 4), qkv.ones(1, 2, 3, 4))
print(k.shape, c.length)   --> (1, 2, 3, 4)	3]=]},

  {name = "qkv.multinomial", sig = "qkv.multinomial(probs, num_samples [, opts])", group = "making tensors",
   doc = [[PyTorch's torch.multinomial: per row of probs (C) or (R, C),
non-negative weights, num_samples category indices counted from 1, int64
(num_samples) or (R, num_samples). opts.replacement (false: distinct
draws, at most the categories a row weighs above 0). Negative, NaN or
infinite weights, and a row summing to 0, are errors.]],
   example = [=[print(qkv.multinomial(qkv.tensor({0, 0, 1}), 2, {replacement = true}))
--> tensor([3, 3])]=],
   see = {"qkv.sample"}},

  {name = "qkv.sample", sig = "qkv.sample(logits [, opts])", group = "making tensors",
   doc = [[One token per row of logits (..., V): int64 (...), counted from 1.
The logits are divided by opts.temperature (1), cut to the top_k largest
and then to the smallest set whose probability reaches top_p (Hugging
Face's TopK and TopP warpers), and one token is drawn. temperature = 0 is
greedy: the first largest logit.]],
   example = [=[print(qkv.sample(qkv.tensor({0.5, 3, 1}), {temperature = 0}))   --> tensor(2)]=],
   see = {"qkv.multinomial"}},

  {name = "Module:update", sig = "m:update(k, v)", group = "module methods",
   doc = [[Writes k and v (batch, heads, n, head_dim) into a KVCache m after
the tokens it holds, and returns the keys and values of all of them as
views of the cache (m(k, v) is the same call). A cache past max_len, and k
or v of another shape, dtype or device, are errors. As Hugging Face's
Cache.update.]],
   example = [=[local c = qkv.nn.KVCache(1, 1, 4, 2)
c:update(qkv.ones(1, 1, 1, 2), qkv.ones(1, 1, 1, 2))
local k = c:update(qkv.zeros(1, 1, 2, 2), qkv.zeros(1, 1, 2, 2))
print(k.shape)   --> (1, 1, 3, 2)]=],
   see = {"qkv.nn.KVCache"}},

  {name = "Module:reset", sig = "m:reset()", group = "module methods",
   doc = [[Empties a KVCache m: its length goes back to 0, and the next update
writes from the first position. Returns m. The memory stays allocated.]],
   see = {"qkv.nn.KVCache"}},

  {name = "Module:get_seq_length", sig = "m:get_seq_length()", group = "module methods",
   doc = [[How many tokens a KVCache m holds, m.length. As Hugging Face's
Cache.get_seq_length. It grows with each update and is 0 after reset.]],
   see = {"qkv.nn.KVCache"}},
}
