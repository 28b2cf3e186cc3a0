-- Seed 002's "bank" disambiguation, on a real trained model: which of
-- all-MiniLM-L6-v2's 72 heads (6 layers x 12) make "bank" look at "river"
-- in one sentence and at "account" in the other? (`make model` fetches it.)
local m = qkv.bert.load()      -- $QKV_MODEL_DIR, else what `make model` fetched
local texts = {"he sat on the river bank", "she opened a bank account"}
local context = {"river", "account"}
local out = m:encode(texts)

local function find(tokens, word)
  for i, t in ipairs(tokens) do if t == word then return i end end
end

-- weight from "bank" to the context word, per layer (rows) and head (cols)
local heads, layers, maps = {}, {}, {}
for h = 1, 12 do heads[h] = "h" .. h end
for l = 1, 6 do layers[l] = "layer " .. l end
for s, text in ipairs(texts) do
  local tokens = out.tokens[s]
  local bank, ctx = find(tokens, "bank"), find(tokens, context[s])
  local w = qkv.zeros(6, 12)
  for l = 1, 6 do w[l] = out.attentions[l][s]:select(2, bank):select(2, ctx) end
  maps[s] = {w = w, tokens = tokens, bank = bank, ctx = ctx}
  qkv.plot.heatmap(w, {title = ('"%s": bank -> %s'):format(text, context[s]),
    xlabels = heads, ylabels = layers, annotate = "%.2f", cmap = "ylorrd", vmin = 0})
  local v, i = w:view(72):topk(3)
  for r = 1, 3 do
    local k = i[r] - 1
    print(("  layer %d head %2d: bank -> %s %.3f"):format(k // 12 + 1, k % 12 + 1, context[s], v[r]))
  end
end

-- the head that separates them best, and both sentences' maps in it
local both = qkv.minimum(maps[1].w, maps[2].w)
local k = both:view(72):argmax():item() - 1
local L, H = k // 12 + 1, k % 12 + 1
print(("layer %d head %d: bank -> river %.3f, bank -> account %.3f"):format(L, H,
  maps[1].w[L][H], maps[2].w[L][H]))
local panels = {}
for s = 1, 2 do
  panels[s] = {out.attentions[L][s][H]:narrow(1, 1, #maps[s].tokens):narrow(2, 1, #maps[s].tokens),
    {title = texts[s], xlabels = maps[s].tokens, ylabels = maps[s].tokens, cmap = "ylorrd",
     annotate = "%.2f", xrotation = 45, colorbar = false}}
end
panels[3] = {maps[1].w, {title = "bank -> river", xlabels = heads, ylabels = layers, cmap = "ylorrd"}}
panels[4] = {maps[2].w, {title = "bank -> account", xlabels = heads, ylabels = layers, cmap = "ylorrd"}}
qkv.plot.grid(panels, {rows = 2, cols = 2, file = qkv.plot.out("real_bank.png"),
  title = ("all-MiniLM-L6-v2: what \"bank\" attends to (top: layer %d, head %d)"):format(L, H)})

return {river = maps[1].w, account = maps[2].w, layer = L, head = H,
        cosine = (out.embeddings[1] * out.embeddings[2]):sum():item()}
