-- doc/variants.lua: qkv.doc entries of attention's variants
-- (stdlib/qkv/variants/): qkv.block_mask and its helpers in qkv, the
-- library in qkv.variants, and the methods of a BlockMask. docs/variants.md
-- is the chapter; these say what a user needs at the prompt.

local FROM_1 = "i is the query and j the key, b and h the batch item and " ..
  "head, all counted from 1. "

return {
  ---------------------------------------------------------------- qkv
  {name = "qkv.block_mask", sig = "qkv.block_mask(mask_mod, B, H, n_q, n_k [, opts])",
   group = "attention",
   doc = [[Works out once which blocks of the n_q × n_k scores the
mask_mod (b, h, i, j) leaves empty, keeps whole or cuts, and returns a
BlockMask for qkv.attention's block_mask option. Attention then never
computes an empty block and never runs the mask on a full one, and one
block mask serves every call of those lengths (each layer, each step). B
or H nil means the mask is the same for every batch item or head; a
mask_mod that reads b or h needs them, and a call of other lengths is an
error naming block_mask. opts.block is the block size, n or {n_q_block,
n_k_block} (default 64, up to 128 queries and 256 keys). bm.kinds holds
the kinds; bm.spans, when every query keeps one run of keys (a window,
causal, a document), each query's run {first, last + 1} from 0, by which
the CPU kernels cut a partial block without running the mask (nil
otherwise). As PyTorch's create_block_mask, with indices from 1.]],
   example = [=[local bm = qkv.block_mask(qkv.variants.causal(), nil, nil, 8, 8, {block = 2})
print(bm:density())   --> 0.625]=],
   see = {"qkv.attention", "BlockMask:density", "BlockMask:to_dense"}},

  {name = "qkv.and_masks", sig = "qkv.and_masks(mask_mod, ...)", group = "attention",
   doc = [[The mask_mod that keeps a key where every mask_mod given keeps
it: their and. A sliding window inside each packed document is
qkv.and_masks(qkv.variants.document(ids), qkv.variants.sliding_window(w)).
An argument that is not a function is an error. As FlexAttention's
and_masks.]],
   see = {"qkv.or_masks"}},

  {name = "qkv.or_masks", sig = "qkv.or_masks(mask_mod, ...)", group = "attention",
   doc = [[The mask_mod that keeps a key where any mask_mod given keeps it:
their or. A window that also keeps the first token (an attention sink) is
an or of qkv.variants.sliding_window(w) and a mask of j:eq(1). An argument
that is not a function is an error. As FlexAttention's or_masks.]],
   see = {"qkv.and_masks"}},

  {name = "qkv.alibi_slopes", sig = "qkv.alibi_slopes(H)", group = "attention",
   doc = [[ALiBi's slope for each of H heads, a float32 tensor (H):
2^(-8h/H) for h = 1, ..., H when H is a power of two. Otherwise the slopes
of the power of two below H come first, then every other slope of the power
of two above, as the paper's code does (Press et al., 2022).
qkv.variants.alibi(H) adds slope_h · (j - i) to the scores with them.]],
   example = [=[print(qkv.alibi_slopes(4))   --> tensor([0.2500, 0.0625, 0.0156, 0.0039])]=]},

  ---------------------------------------------------------------- mask_mods
  {name = "qkv.variants.causal", sig = "qkv.variants.causal([offset])", group = "mask functions",
   doc = [[A mask_mod for causal attention: key j takes part for query i
when j <= i + offset. With offset 0, the default, the diagonal starts at
the first key, as PyTorch's is_causal; qkv's causal = true aligns it to
the last key instead (qkv.variants.causal_end). A positive offset lets
each query see that many keys ahead. ]] .. FROM_1,
   example = [=[local q = qkv.zeros(3, 2)
local _, w = qkv.attention(q, q, q, {mask_mod = qkv.variants.causal()})
print(w)
--> tensor([[1.0000, 0.0000, 0.0000],
-->         [0.5000, 0.5000, 0.0000],
-->         [0.3333, 0.3333, 0.3333]])]=],
   see = {"qkv.variants.causal_end", "qkv.causal"}},

  {name = "qkv.variants.causal_end", sig = "qkv.variants.causal_end(n_q, n_k)", group = "mask functions",
   doc = [[The mask_mod of qkv's causal = true: key j takes part for query
i when j <= i + n_k - n_q. The diagonal ends at the last key, as when
decoding with n_k - n_q earlier keys in a cache (FlashAttention's
alignment). It is qkv.variants.causal(n_k - n_q), and the mask of
qkv.causal(n_q, n_k).]]},

  {name = "qkv.variants.sliding_window", sig = "qkv.variants.sliding_window(w [, opts])",
   group = "mask functions",
   doc = [[A mask_mod for a sliding window of w keys: query i sees keys
i - w < j <= i, the last w up to itself, as Longformer's local attention
and Mistral's. With opts.causal = false the window is two-sided, |i - j| <
w. The fused path (weights = false) skips the blocks outside the window,
so its cost grows as n · w, not n².]],
   example = [=[local q = qkv.zeros(4, 2)
local _, w = qkv.attention(q, q, q, {mask_mod = qkv.variants.sliding_window(2)})
print(w:ne(0):int())
--> tensor([[1, 0, 0, 0],
-->         [1, 1, 0, 0],
-->         [0, 1, 1, 0],
-->         [0, 0, 1, 1]], dtype=int32)]=]},

  {name = "qkv.variants.document", sig = "qkv.variants.document(ids [, kv_ids])",
   group = "mask functions",
   doc = [[A mask_mod for packed sequences: key j takes part for query i
when ids[i] equals kv_ids[j] (kv_ids defaults to ids), so that each token
attends within its own document. ids is an integer tensor (n), or (B, n)
with a row per batch item, read by b: the tensors then need their (B, H)
dims, since with a single batch dim b is 1. The fused path skips the
blocks between documents.]],
   see = {"qkv.variants.document_lengths"}},

  {name = "qkv.variants.document_lengths", sig = "qkv.variants.document_lengths(lengths)",
   group = "mask functions",
   doc = [[qkv.variants.document from the documents' lengths: a list of
positive integers, in order, covering the n tokens. {3, 4, 1} puts tokens
1 to 3 in the first document, 4 to 7 in the second and 8 in the third.
Tokens past the lengths' sum make an index error at the call.]],
   example = [=[local q = qkv.zeros(3, 2)
local _, w = qkv.attention(q, q, q, {mask_mod = qkv.variants.document_lengths{1, 2}})
print(w:ne(0):int())
--> tensor([[1, 0, 0],
-->         [0, 1, 1],
-->         [0, 1, 1]], dtype=int32)]=]},

  {name = "qkv.variants.prefix_lm", sig = "qkv.variants.prefix_lm(p)", group = "mask functions",
   doc = [[A mask_mod for a prefix language model: key j takes part for
query i when j <= i or j <= p. The first p tokens (the input) see each
other both ways and the rest is causal, as T5's prefix LM and UniLM. With
p = 0 it is plain causal attention.]]},

  ---------------------------------------------------------------- score_mods
  {name = "qkv.variants.alibi", sig = "qkv.variants.alibi(H)", group = "score functions",
   doc = [[A score_mod for ALiBi (Press et al., 2022): score + slope_h ·
(j - i), a penalty that grows with the distance to the key, one slope per
head, in place of position embeddings. H gives qkv.alibi_slopes(H); a
float tensor (H) of slopes may be given instead, and if it requires grad
it gets its gradient. ALiBi assumes a causal mask: keys after the query
would get a bonus.]],
   see = {"qkv.alibi_slopes"}},

  {name = "qkv.variants.softcap", sig = "qkv.variants.softcap(c)", group = "score functions",
   doc = [[A score_mod that soft-caps the scores: c · tanh(score / c), which
stays within (-c, c) and is nearly the score itself when it is small.
Gemma 2 caps its attention scores so, with c = 50. The score is already
scaled (1/sqrt(d_k), or opts.scale) when it is capped, as in Gemma 2.]]},

  {name = "qkv.variants.t5_bias", sig = "qkv.variants.t5_bias(bias [, opts])",
   group = "score functions",
   doc = [[A score_mod for T5's relative position bias: score + bias[h,
bucket(j - i) + 1], bias a (H, num_buckets) tensor, learned in T5. The
bucket is qkv.variants.relative_buckets's, with opts num_buckets (default
bias:size(2)), max_distance (128) and bidirectional (true). A bias that
requires grad gets its gradient from attention's backward. T5 does not
scale its scores: pass scale = 1 to qkv.attention.]],
   see = {"qkv.variants.relative_buckets"}},

  {name = "qkv.variants.relative_buckets", sig = "qkv.variants.relative_buckets(rel [, opts])",
   group = "score functions",
   doc = [[T5's bucket, from 0, of a relative position rel = j - i: a
symbolic value, inside a score_mod or mask_mod of one's own. Distances
below half the buckets (a quarter when bidirectional) have a bucket each,
longer ones share logarithmic buckets up to max_distance, and the last
bucket holds the rest. opts: num_buckets (32), max_distance (128),
bidirectional (true: keys after the query take the upper half). t5_bias
reads its bias with it.]]},

  ---------------------------------------------------------------- BlockMask
  {name = "BlockMask:density", sig = "bm:density()", group = "block mask methods",
   doc = [[The fraction of the block mask's blocks that attention computes
(partial or full), from 0 to 1. One minus it is the share of the work a
fused call skips. PyTorch's BlockMask.sparsity() gives that other share,
in percent.]],
   example = [=[local bm = qkv.block_mask(qkv.variants.sliding_window(64), nil, nil, 1024, 1024)
print(bm:density())   --> 0.12109375]=]},

  {name = "BlockMask:to_dense", sig = "bm:to_dense()", group = "block mask methods",
   doc = [[The blocks attention computes, as a bool tensor (B', H', n_q
blocks, n_k blocks): true where a block is partial or full. B' and H' are
1 where the block mask was made with B or H nil. bm.kinds tells the kinds
apart (0 empty, 1 partial, 2 full), and tostring(bm) counts them. As
PyTorch's BlockMask.to_dense().]],
   example = [=[local bm = qkv.block_mask(qkv.variants.causal(), nil, nil, 4, 4, {block = 2})
print(bm:to_dense())
--> tensor([[[[ True, False],
-->           [ True,  True]]]])]=]},
}
