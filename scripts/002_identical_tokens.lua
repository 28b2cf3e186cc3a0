-- Seed 002, "Implementation and Analysis of Scaled Dot-Product Attention",
-- Experiment 2: Self-Attention (Q = K = V) with two identical tokens.

local sequence_embeddings = qkv.tensor{
  {1, 0, 1, 0},  -- Token 0
  {0, 1, 0, 1},  -- Token 1 (different: no feature in common with token 0)
  {1, 0, 1, 0},  -- Token 2 (same as Token 0)
}:unsqueeze(1)

local q, k, v = sequence_embeddings, sequence_embeddings, sequence_embeddings

local output_self, weights_self = qkv.attention(q, k, v)

print("Visualizing Self-Attention (Note: Token 0 and 2 are identical)")
local fig = qkv.plot.heatmap(weights_self, {title = "Exp 2: Self-Attention (Look for patterns)",
  annotate = "%.2f", cmap = "viridis",
  xlabels = {"0", "1", "2"}, ylabels = {"0", "1", "2"},
  xlabel = "Keys (Input Sequence Positions)",
  ylabel = "Queries (Output Sequence Positions)",
  file = qkv.plot.out("002_exp2_self_attention.png")})
print(weights_self)

-- The scaled scores are 2/sqrt(4) = 1 between like tokens and 0 between
-- unlike ones, and softmax of small scores stays soft: token 1 keeps
-- e/(e+2) for itself, not "nearly 100%", and tokens 0 and 2 each give
-- e/(2e+1) to themselves and their twin but still 1/(2e+1) to token 1.
print(string.format("Token 1 -> itself: %.4f = e/(e+2); -> tokens 0, 2: %.4f each",
  weights_self[1][2][2], weights_self[1][2][1]))
print(string.format("Token 0 -> tokens 0, 2: %.4f = e/(2e+1) each; -> token 1: %.4f",
  weights_self[1][1][1], weights_self[1][1][2]))

return {output_self = output_self, weights_self = weights_self, fig = fig}
