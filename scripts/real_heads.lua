-- bertviz's model view in qkv: every head of all-MiniLM-L6-v2 (6 layers x
-- 12 heads) on one sentence, as a 6 x 12 grid of attention maps in a PNG,
-- and in the terminal each head named by what it mostly does. (`make model`)
local m = qkv.bert.load()      -- $QKV_MODEL_DIR, else what `make model` fetched
local text = "the cat sat on the mat because it was tired"
local out = m:encode(text)
local tokens, n = out.tokens[1], #out.tokens[1]

-- a head's habit: where its queries' weight goes on average
local eye = qkv.eye(n - 1)
local function habit(w)                                  -- w (n, n)
  local share = {
    ["[CLS]"] = w:select(2, 1):mean():item(),
    ["[SEP]"] = w:select(2, n):mean():item(),
    self = (w * qkv.eye(n)):sum():item() / n,
    prev = (w:narrow(1, 2, n - 1):narrow(2, 1, n - 1) * eye):sum():item() / (n - 1),
    next = (w:narrow(1, 1, n - 1):narrow(2, 2, n - 1) * eye):sum():item() / (n - 1),
  }
  local best, v = "broad", 0.4                           -- none over 40%: spread out
  for name, s in pairs(share) do if s > v then best, v = name, s end end
  return best, v
end

local panels, names, counts = {}, {}, {}
for l = 1, 6 do
  local row = {}
  for h = 1, 12 do
    local w = out.attentions[l][1][h]
    local kind = habit(w)
    row[h] = ("%-6s"):format(kind)
    counts[kind] = (counts[kind] or 0) + 1
    panels[#panels + 1] = {w, {title = l == 1 and "head " .. h or nil,
      ylabel = h == 1 and "layer " .. l or nil, cmap = "blues", vmin = 0, vmax = 1,
      annotate = false, colorbar = false, xticks = false, yticks = false}}
  end
  names[l] = row
  print(("layer %d  %s"):format(l, table.concat(row, " ")))
end
for _, kind in ipairs{"[CLS]", "[SEP]", "self", "prev", "next", "broad"} do
  print(("%-6s %2d heads"):format(kind, counts[kind] or 0))
end

qkv.plot.grid(panels, {rows = 6, cols = 12, file = qkv.plot.out("real_heads.png"),
  title = ('all-MiniLM-L6-v2, every head: "%s"'):format(text)})
-- the one head drawn large with its tokens: layer 1, head 3 (previous token)
qkv.plot.heatmap(out.attentions[1][1][3], {title = "layer 1, head 3", xlabels = tokens,
  ylabels = tokens, annotate = "%.1f", cmap = "blues"})

return {names = names, counts = counts, tokens = tokens}
