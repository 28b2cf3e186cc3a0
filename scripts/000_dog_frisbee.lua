-- 000_dog_frisbee.lua: "Self-Attention and Cross-Attention from Scratch",
-- sections 6-8: "A dog catches frisbee" querying a 3x3 grid of image patches.

local n_text, n_image, d_model = 4, 9, 16   -- "A dog catches frisbee", 3x3 image patches

qkv.seed(0)
local text_embeddings = qkv.randn(n_text, d_model)
local text_labels = {"A", "dog", "catches", "frisbee"}

-- rows 1-3 sky, 4-6 the dog, 7-9 ground (the document's 0-2, 3-5, 6-8): the
-- dog rows lean toward "dog", patch 5 toward "catches", 8 toward "frisbee"
local image_embeddings = qkv.randn(n_image, d_model)
for i = 4, 6 do image_embeddings[i] = image_embeddings[i] + text_embeddings[2] * 0.5 end
image_embeddings[5] = image_embeddings[5] + text_embeddings[3] * 0.3
image_embeddings[8] = image_embeddings[8] + text_embeddings[4] * 0.5
local cells = {{"sky-L", "sky-C", "sky-R"}, {"dog-L", "dog-C", "dog-R"},
               {"gnd-L", "gnd-C", "gnd-R"}}   -- the patches' names, as they lie
print("Text embeddings: " .. tostring(text_embeddings.shape))
print("Image embeddings: " .. tostring(image_embeddings.shape))

qkv.seed(42)
local cross_attn = qkv.nn.CrossAttention(d_model, 8)
local output, weights = cross_attn(text_embeddings, image_embeddings)
print("Output shape: " .. tostring(output.shape) .. " — 4 text tokens, enriched with image info")
print("Weights shape: " .. tostring(weights.shape) .. " — 4 text tokens x 9 image patches")

-- each token's weights as its 3x3 map on one colour scale, imshow's: no ticks, no colour bar
local panels, vmax = {}, weights:max():item()
for i, label in ipairs(text_labels) do
  panels[i] = {weights[i]:view(3, 3), {title = '"' .. label .. '"', cmap = "ylorrd", vmin = 0,
               vmax = vmax, annotate = "%.2f", xticks = false, yticks = false, colorbar = false}}
end
qkv.plot.grid(panels, {rows = 1, cols = 4, file = qkv.plot.out("000_cross_attention_maps.png"),
  title = "Cross-Attention: Which Image Patches Does Each Text Token Attend To?"})

-- section 7: cosine similarity before the projections, (4, 1, d) against (1, 9, d)
local sim = qkv.nn.cosine_similarity(text_embeddings:unsqueeze(2), image_embeddings:unsqueeze(1))
print("\nCosine similarity between text tokens and image patches:\n")
io.write(string.rep(" ", 12))
for _, row in ipairs(cells) do io.write(string.format("%8s%8s%8s", table.unpack(row))) end
for i, tl in ipairs(text_labels) do
  io.write(string.format("\n%12s", tl))
  for j = 1, n_image do io.write(string.format("%8.3f", sim[i][j])) end
end
print("\n\nNote: Patches we biased toward certain text tokens show higher similarity.")
print("Cross-attention learns to exploit (and refine) these similarities.")

-- section 8: each map blends grey into the token's colour, up to its own max
local text_colors = {"#3498db", "#e74c3c", "#2ecc71", "#f39c12"}
for i, label in ipairs(text_labels) do
  panels[i] = {weights[i]:view(3, 3), {title = 'Text Token: "' .. label .. '"', annotate = "%.3f",
               title_color = text_colors[i], cmap = {"#e6e6e6", text_colors[i]}, vmin = 0,
               vmax = weights[i]:max():item(), cell_labels = cells, xticks = false,
               yticks = false, colorbar = false}}
end
qkv.plot.grid(panels, {rows = 2, cols = 2, file = qkv.plot.out("000_final_maps.png"),
  title = "Cross-Attention Maps: Text Tokens Querying Image Patches"})

return {text_embeddings = text_embeddings, image_embeddings = image_embeddings, output = output,
        weights = weights, sim = sim, params = cross_attn:state_dict()}
