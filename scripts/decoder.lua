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

qkv.seed(49)

-- the repository's folder, from this script's path (runs from any folder)
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
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

-- the model (scripts/lib/decoder_model.lua): 2 blocks of d 64, 4 query
-- heads sharing 2 key/value heads
local M = dofile(here .. "/lib/decoder_model.lua")
local m = M.new(V, {dim = 64, heads = 4, kv_heads = 2, layers = 2})
local T, BATCH = 64, 16
local function forward(...) return M.forward(m, ...) end

-- training: random windows of T + 1 characters, next-character loss
print(("model: %d blocks, d %d, %d query heads on %d key/value heads, %d parameters"):format(
  m.layers, m.D, m.H, m.HKV, m.nparams))
local opt = qkv.optim.AdamW(m.params, {lr = 3e-3, weight_decay = 0.01})
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
  local loss = qkv.nn.cross_entropy(logits:reshape(BATCH * T, V), win:narrow(2, 2, T):reshape(BATCH * T))
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
local caches = M.caches(m, 1, #prompt + NEW)
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
  local cs = M.caches(m, 1, #toks)
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
for hh = 1, m.H do
  local w = maps[m.layers]:select(1, 1):select(1, hh):narrow(1, 1, n):narrow(2, 1, n)
  panels[hh] = {w, {title = ("head %d (key/value group %d)"):format(hh, (hh - 1) // (m.H // m.HKV) + 1),
                    xlabels = labels, ylabels = labels, cmap = "blues"}}
end
local fig = qkv.plot.grid(panels, {rows = 2, cols = 2, title = "causal attention of the written line, last block",
                                   file = qkv.plot.out("decoder_attention.png")})

return {losses = losses, steps = step, seconds = seconds, vocab = V, text = written, prompt = prompt,
        new = NEW, per_token = per_token, diff = diff, nparams = m.nparams, source = source, fig = fig}
