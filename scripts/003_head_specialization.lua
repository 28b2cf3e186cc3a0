-- Seed 003, "Token Alignment and Multi-Head Cross-Attention": section 6,
-- head specialization: each head's attention for every text token.

qkv.seed(7)   -- a structured scenario to see head specialization
local d_model, num_heads, n_text, n_image = 32, 4, 4, 9   -- 3x3 image grid

local text_labels = {"A", "dog", "catches", "frisbee"}
local patch_labels = {"sky-L", "sky-C", "sky-R",
                      "dog-L", "dog-C", "dog-R",
                      "gnd-L", "frisbee", "gnd-R"}

local text_emb = qkv.randn(n_text, d_model)
local image_emb = qkv.randn(n_image, d_model)

-- Bias patches to be related to text tokens (rows count from 1:
-- the document's image_emb[3] is image_emb[4] here)
image_emb[4] = image_emb[4] + text_emb[2] * 0.8   -- dog-L <- dog
image_emb[5] = image_emb[5] + text_emb[2] * 1.0   -- dog-C <- dog (strongest)
image_emb[6] = image_emb[6] + text_emb[2] * 0.6   -- dog-R <- dog
image_emb[8] = image_emb[8] + text_emb[4] * 1.0   -- frisbee patch <- frisbee token
image_emb[5] = image_emb[5] + text_emb[3] * 0.4   -- dog-C also relevant to "catches"

local mhca = qkv.nn.MultiHeadCrossAttention(d_model, num_heads)
local output, attn_weights = mhca(text_emb, image_emb)

-- one 3x3 map: token t's weights over the patches in head h (no ticks, row names level)
local function panel(t, h, opts)
  opts.cmap, opts.vmin, opts.annotate, opts.colorbar = "ylorrd", 0, "%.2f", false
  opts.xticks, opts.yticks, opts.ylabel_rotation = false, false, 0
  return {attn_weights[h][t]:view(3, 3), opts}
end

-- All 4 heads for the "dog" token, on one colour scale
local dog = attn_weights:select(2, 2)   -- (heads, patches)
local heads = {}
for h = 1, num_heads do heads[h] = panel(2, h, {title = "Head " .. h, vmax = dog:max():item()}) end
qkv.plot.grid(heads, {rows = 1, cols = num_heads,
  title = 'Multi-Head Attention for Text Token "dog" — Each Head Has Its Own Focus',
  file = qkv.plot.out("003_dog_heads.png")})
qkv.plot.heatmap(dog, {title = '"dog": attention per head', xlabels = patch_labels,
  ylabels = {"Head 1", "Head 2", "Head 3", "Head 4"}, cmap = "ylorrd", annotate = "%.2f"})

print("Notice: different heads attend to different parts of the image!")
print("This is the power of multi-head attention — parallel, diverse perspectives.")

-- Every text token x every head
local all = {}
for t = 1, n_text do
  for h = 1, num_heads do
    all[#all + 1] = panel(t, h, {title = t == 1 and "Head " .. h or nil,
                                 ylabel = h == 1 and '"' .. text_labels[t] .. '"' or nil})
  end
end
qkv.plot.grid(all, {rows = n_text, cols = num_heads,
  title = "Multi-Head Cross-Attention: Every Text Token x Every Head",
  file = qkv.plot.out("003_all_heads.png")})

return {text_emb = text_emb, image_emb = image_emb, output = output,
        attn_weights = attn_weights, mhca = mhca:state_dict()}
