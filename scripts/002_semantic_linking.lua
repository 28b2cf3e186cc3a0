-- Seed 002, "Implementation and Analysis of Scaled Dot-Product Attention",
-- Resolving Ambiguity through Semantic Linking: which token does
-- "Bank (Shore)" attend to?

-- features: [Financial, Nature/Water, Building, Shore/Surface]
local river = qkv.tensor{0.0, 1.0, 0.0, 0.5}         -- high Nature, medium Shore
local water = qkv.tensor{0.0, 1.2, 0.0, 0.0}         -- very high Nature
local bank_finance = qkv.tensor{1.2, 0.0, 1.0, 0.0}  -- high Financial, high Building (distractor)
local bank_shore = qkv.tensor{0.1, 0.9, 0.0, 1.0}    -- high Nature, high Shore (target)

local semantic_embeddings = qkv.stack{river, water, bank_finance, bank_shore}:unsqueeze(1)

-- self-attention, step by step: Q K^T / sqrt(d_k), then softmax
local q, k = semantic_embeddings, semantic_embeddings
local scores = qkv.scores(q, k)
local weights = qkv.softmax(scores)

local labels = {"River", "Water", "Bank(Finance)", "Bank(Shore)"}
qkv.plot.heatmap(weights, {title = "Semantic Linking & Disambiguation",
  annotate = "%.2f", cmap = "ylgnbu", xlabels = labels, ylabels = labels,
  xlabel = "Keys (Contextual Evidence)", ylabel = "Queries (Target Words)",
  file = qkv.plot.out("002_semantic_linking_disambiguation.png")})
print(weights)

-- The document reads River "0.28+" and Water "0.24+" and Bank(Finance)
-- "virtually ignored": the weights are a little under those, Bank(Finance)
-- still gets about a seventh, and Bank(Shore) attends most to itself.
local row = weights[1][4]
for j, name in ipairs(labels) do
  print(string.format("Bank(Shore) -> %-13s %.4f", name, row[j]))
end

return {scores = scores, weights = weights}
