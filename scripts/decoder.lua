-- A decoder you can watch: a small decoder-only language model of the kind
-- LLaMA is (grouped-query attention, rotary positions, RMSNorm, a SwiGLU
-- MLP), built from qkv.nn, trained on characters for about two minutes on
-- the CPU, then asked to write, one token at a time from a key/value cache.
-- It prints the loss as it falls and the text it writes, checks that the
-- cache gives what recomputing the whole line gives, and draws the causal
-- attention maps of the line it wrote, every head of both key/value groups.
--
-- The text is the seed documents (../shared/seeds/*.txt beside the
-- repository) when they are there, qkv's own documentation otherwise.
-- QKV_DECODER_SECONDS (120) bounds the training; QKV_DECODER_STEPS, when
-- set, runs exactly that many steps instead.

local nn = qkv.nn
qkv.seed(49)

-- the repository's folder, from this script's path (runs from any folder)
local here = (arg and arg[0] or "scripts/decoder.lua"):match("^(.*)/[^/]*$") or "."
local root = here .. "/.."

local function read_all(paths)
  local parts = {}
  for _, p in ipairs(paths) do
    local f = io.open(p, "rb")
    if f then parts[#parts + 1] = f:read("a") f:close() end
  end
  return table.concat(parts, "\n")
end

local function listing(cmd)
  local names, p = {}, io.popen(cmd)
  for l in p:lines() do names[#names + 1] = l end
  p:close()
  return names
end

local text = read_all(listing("ls " .. root .. "/../shared/seeds/*.txt 2>/dev/null"))
local source = "the seed documents"
if #text < 10000 then
  text, source = read_all(listing("ls " .. root .. "/README.md " .. root .. "/docs/*.md 2>/dev/null")),
                 "qkv's documentation"
end
text = text:gsub("[^\n\32-\126]", ""):gsub("\n\n+", "\n\n")   -- printable ASCII and newlines

-- characters as tokens, counted from 1
local chars, id = {}, {}
for c in text:gmatch(".") do if not id[c] then chars[#chars + 1] = c id[c] = true end end
table.sort(chars)
for i, c in ipairs(chars) do id[c] = i end
local V = #chars
local ids = {}
for i = 1, #text do ids[i] = id[text:sub(i, i)] end
local data = qkv.tensor(ids, "int64")
print(("%d characters of %s, %d distinct"):format(#text, source, V))

-- the model: 2 blocks of d 64, 4 query heads sharing 2 key/value heads
local D, H, HKV, LAYERS, T, BATCH = 64, 4, 2, 2, 64, 16
local HD = D // H
local embed, norm, head = nn.Embedding(V, D), nn.RMSNorm(D), nn.Linear(D, V, {bias = false})
local blocks, params = {}, {}
for _ = 1, LAYERS do
  blocks[#blocks + 1] = {norm1 = nn.RMSNorm(D), norm2 = nn.RMSNorm(D),
                         wq = nn.Linear(D, H * HD, {bias = false}), wk = nn.Linear(D, HKV * HD, {bias = false}),
                         wv = nn.Linear(D, HKV * HD, {bias = false}), wo = nn.Linear(H * HD, D, {bias = false}),
                         mlp = nn.SwiGLU(D, 4 * D)}
end
for _, m in ipairs{embed, norm, head} do for _, p in ipairs(m:parameters()) do params[#params + 1] = p[2] end end
for _, b in ipairs(blocks) do
  for _, name in ipairs{"norm1", "norm2", "wq", "wk", "wv", "wo", "mlp"} do
    for _, p in ipairs(b[name]:parameters()) do params[#params + 1] = p[2] end
  end
end
local nparams = 0
for _, p in ipairs(params) do nparams = nparams + p:numel() end

-- x (B, n, D) through one block; pos: the first token's position (from
-- 1); cache: the block's KVCache or nil; weights: also return the maps
local function block(b, x, pos, cache, weights)
  local B, n = x.shape[1], x.shape[2]
  local h = b.norm1(x)
  local q = qkv.rope(b.wq(h):view(B, n, H, HD):transpose(2, 3), pos)
  local k = qkv.rope(b.wk(h):view(B, n, HKV, HD):transpose(2, 3), pos)
  local v = b.wv(h):view(B, n, HKV, HD):transpose(2, 3)
  if cache then k, v = cache:update(k, v) end
  local o, w = qkv.attention(q, k, v, {causal = true, enable_gqa = true, weights = weights == true})
  x = x + b.wo(o:transpose(2, 3):reshape(B, n, H * HD))
  return x + b.mlp(b.norm2(x)), w
end

-- logits (B, n, V) of tokens (B, n); maps: each block's attention weights
local function forward(tokens, pos, caches, maps)
  local x = embed(tokens)
  for l, b in ipairs(blocks) do
    local w
    x, w = block(b, x, pos, caches and caches[l], maps ~= nil)
    if maps then maps[l] = w end
  end
  return head(norm(x))
end

-- training: random windows of T + 1 characters, next-character loss
print(("model: %d blocks, d %d, %d query heads on %d key/value heads, %d parameters"):format(
  LAYERS, D, H, HKV, nparams))
local opt = qkv.optim.AdamW(params, {lr = 3e-3, weight_decay = 0.01})
local budget, fixed = tonumber(os.getenv("QKV_DECODER_SECONDS") or "120"), tonumber(os.getenv("QKV_DECODER_STEPS"))
local losses, start, step = {}, qkv.clock(), 0
while (fixed and step < fixed) or (not fixed and qkv.clock() - start < budget) do
  step = step + 1
  local starts = qkv.randint(1, #ids - T, {BATCH})
  local offs = qkv.arange(0, T + 1, "int64")
  local at = starts:view(BATCH, 1) + offs:view(1, T + 1)        -- (BATCH, T + 1) positions in the text
  local win = data:index_select(1, at:view(-1)):view(BATCH, T + 1)
  opt:zero_grad()
  local logits = forward(win:narrow(2, 1, T), 1)
  local loss = nn.cross_entropy(logits:reshape(BATCH * T, V), win:narrow(2, 2, T):reshape(BATCH * T))
  loss:backward()
  opt:step()
  losses[step] = loss:item()
  if step == 1 or step % 100 == 0 then print(("  step %4d  loss %.3f"):format(step, losses[step])) end
end
local seconds = qkv.clock() - start
print(("trained %d steps in %.0f s; loss %.3f -> %.3f (uniform guessing: %.3f)"):format(
  step, seconds, losses[1], losses[step], math.log(V)))

-- writing: the prompt through the caches at once, then one token a step
local prompt, NEW = "The attention ", 160
local caches = {}
for l = 1, LAYERS do caches[l] = nn.KVCache(1, HKV, #prompt + NEW, HD) end
local out, toks = {}, {}
for i = 1, #prompt do toks[i] = id[prompt:sub(i, i)] or 1 end
local t0 = qkv.clock()
qkv.no_grad(function()
  local logits = forward(qkv.tensor({toks}, "int64"), 1, caches)
  for i = 1, NEW do
    local nxt = qkv.sample(logits:select(2, logits.shape[2]), {temperature = 0.8, top_k = 20})
    local t = nxt:item()
    out[i], toks[#toks + 1] = chars[t], t
    logits = forward(nxt:view(1, 1), #toks, caches)
  end
end)
local per_token = (qkv.clock() - t0) / NEW
local written = prompt .. table.concat(out)
print("it writes:\n" .. written)
print(("%.2f ms a token from the cache (%d tokens at the end)"):format(per_token * 1e3, #toks))

-- the cache against the whole line recomputed: the last token's logits
local last, maps, diff = nil, {}, nil
qkv.no_grad(function()
  local line = qkv.tensor({toks}, "int64"):narrow(2, 1, #toks - 1)
  local full = forward(line, 1, nil, maps)
  local cs = {}
  for l = 1, LAYERS do cs[l] = nn.KVCache(1, HKV, #toks, HD) end
  forward(line:narrow(2, 1, #toks - 2), 1, cs)
  last = forward(line:narrow(2, #toks - 1, 1), #toks - 1, cs)
  diff = (last:select(2, 1) - full:select(2, #toks - 1)):abs():max():item()
end)
print(("cached step against the whole line: max |logit difference| %.2e"):format(diff))

-- the maps of the last block over the line's first 48 characters, each
-- head titled with its key/value group
local n = math.min(48, #toks - 1)
local labels = {}
for i = 1, n do labels[i] = chars[toks[i]] == "\n" and "\\n" or chars[toks[i]] end
local panels = {}
for hh = 1, H do
  local w = maps[LAYERS]:select(1, 1):select(1, hh):narrow(1, 1, n):narrow(2, 1, n)
  panels[hh] = {w, {title = ("head %d (key/value group %d)"):format(hh, (hh - 1) // (H // HKV) + 1),
                    xlabels = labels, ylabels = labels, cmap = "blues"}}
end
local fig = qkv.plot.grid(panels, {rows = 2, cols = 2, title = "causal attention of the written line, last block",
                                   file = qkv.plot.out("decoder_attention.png")})

return {losses = losses, steps = step, seconds = seconds, vocab = V, text = written, prompt = prompt,
        new = NEW, per_token = per_token, diff = diff, nparams = nparams, source = source, fig = fig}
