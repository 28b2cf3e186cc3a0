-- Seed 002, "Implementation and Analysis of Scaled Dot-Product Attention",
-- Experiment 4: The Padding Mask Experiment.

-- padded with "<PAD>" to reach max_length 5
local tokens = {"The", "cat", "sat", "<PAD>", "<PAD>"}
local seq_len = #tokens

-- 1 marks a real token, 0 padding; shape (1, 1, 5) broadcasts over the
-- queries and keys (qkv.padding({3}, 5) makes the same mask as bools)
local mask = qkv.tensor{{{1, 1, 1, 0, 0}}}

-- simulated attention scores (pre-softmax)
qkv.seed(42)
local raw_scores = qkv.randn(1, seq_len, seq_len)

-- A, without masking: <PAD> gets attention like any token
local weights_no_mask = qkv.softmax(raw_scores)

-- B, with the padding mask: the document fills -1e9, qkv.mask fills -inf;
-- both give exactly 0 after the softmax
local masked_scores = qkv.mask(raw_scores, mask)
local weights_with_mask = qkv.softmax(masked_scores)

local function panel(w, title)
  return {w, {title = title, annotate = "%.2f", cmap = "mako", colorbar = true, xlabels = tokens, ylabels = tokens}}
end
local fig = qkv.plot.grid({
  panel(weights_no_mask, "Figure A: Standard Attention (No Mask)\nNotice non-zero attention on <PAD>"),
  panel(weights_with_mask, "Figure B: Masked Attention\nAttention on <PAD> is forced to 0.00"),
}, {rows = 1, cols = 2, file = qkv.plot.out("002_padding_mask_effect_comparison.png")})
print(weights_with_mask)

return {mask = mask, raw_scores = raw_scores, weights_no_mask = weights_no_mask,
  weights_with_mask = weights_with_mask, fig = fig}
