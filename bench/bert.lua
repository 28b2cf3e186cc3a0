-- bert.lua -- qkv.bert on the real all-MiniLM-L6-v2 (`make model`): the
-- model's load time, and 1,000 sentences of about 12 tokens encoded in
-- batches of 32 on the CPU, as sentences per second, against PyTorch on the
-- same token ids in the same run (bench/bert_torch.py: the encoder in plain
-- torch, and Hugging Face's BertModel where transformers imports), PyTorch
-- 2.x from `make bench-deps` (bench/lib/timing.lua's peer_python).
-- FLOPs: 2 (4 d^2 + 2 d d_ff) per token and layer for the products (the
-- attention's 4 n d is under 2% at n = 12), 21.2 MFLOP a token here.
--
--   build/qkv bench/bert.lua          (run by `make bench`)

local DIR = os.getenv("QKV_MODEL_DIR") or "build/models/all-MiniLM-L6-v2"
local N, BATCH = 1000, 32
local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local PY, VERSION = U.peer_python()

if not io.open(DIR .. "/model.safetensors") then
  print("bert: no model in " .. DIR .. " (`make model` fetches it); skipped")
  return
end

-- 1,000 plain sentences of 10 words, the same every run
local W = {
  {"the", "a", "my", "our", "this", "that"},
  {"old", "young", "quiet", "busy", "small", "bright", "tired", "clever"},
  {"teacher", "river", "bank", "doctor", "engine", "garden", "city", "model", "student"},
  {"slowly", "quickly", "often", "never", "always", "rarely"},
  {"opened", "crossed", "watched", "followed", "painted", "measured", "remembered"},
  {"the", "a", "every", "one"},
  {"green", "long", "narrow", "heavy", "distant", "empty"},
  {"account", "bridge", "window", "letter", "market", "station", "question", "road"},
  {"after", "before", "during", "without"},
  {"lunch", "dawn", "winter", "school", "work"},
}
math.randomseed(42)
local texts = {}
for i = 1, N do
  local w = {}
  for j, list in ipairs(W) do w[j] = list[math.random(#list)] end
  texts[i] = table.concat(w, " ")
end

local function median(fn, runs)
  local t = {}
  for i = 1, runs do
    local t0 = qkv.clock()
    fn()
    t[i] = qkv.clock() - t0
  end
  table.sort(t)
  return t[(runs + 1) // 2]
end

local path = DIR .. "/model.safetensors"
local t_st = median(function() return qkv.load_safetensors(path) end, 5)
local t_load = median(function() return qkv.bert.load(DIR) end, 5)
local m = qkv.bert.load(DIR)
local batches = {}
for i = 1, N, BATCH do batches[#batches + 1] = table.move(texts, i, math.min(i + BATCH - 1, N), 1, {}) end

local t_tok = median(function() for _, b in ipairs(batches) do m.tokenizer:encode(b) end end, 3)
local all = m.tokenizer:encode(texts)
local tokens = all.attention_mask:sum():item()
local t_embed = median(function() for _, b in ipairs(batches) do m:embed(b) end end, 3)
local t_encode = median(function() for _, b in ipairs(batches) do m:encode(b) end end, 3)
-- under bfloat16 autocast (issue 51), and how near its embeddings are to
-- float32's: the least cosine similarity over the sentences
local AC = {device_type = "cpu", dtype = "bfloat16"}
local t_autocast = median(function()
  qkv.autocast(AC, function() for _, b in ipairs(batches) do m:embed(b) end end)
end, 3)
local least_cos = math.huge
for _, b in ipairs(batches) do
  local e32, e16 = m:embed(b), qkv.autocast(AC, m.embed, m, b):float()
  least_cos = math.min(least_cos, qkv.cosine_similarity(e32, e16, 2):min():item())
end

-- the peer, on the very same ids
local torch = {}
if PY then
  local tmp = os.tmpname()
  qkv.save(tmp .. "_ids.npy", all.input_ids)
  qkv.save(tmp .. "_mask.npy", all.attention_mask)
  local f = assert(io.open(tmp .. "_texts.txt", "w"))
  f:write(table.concat(texts, "\n"), "\n")
  f:close()
  local py = arg[0]:gsub("bert%.lua$", "bert_torch.py")
  local p = io.popen(table.concat({PY, U.quote(py), U.quote(DIR), U.quote(tmp .. "_ids.npy"),
    U.quote(tmp .. "_mask.npy"), U.quote(tmp .. "_texts.txt"), BATCH, "2>&1"}, " "))
  for line in p:lines() do
    local name, t = line:match("^RESULT (%S+) (%S+)$")
    if name then torch[name] = tonumber(t) end
  end
  p:close()
  os.execute("rm -f " .. U.quote(tmp) .. "*")
end

local flop = 21.2e6 * tokens
print(("bert: all-MiniLM-L6-v2, %d sentences, %d tokens (%.1f a sentence), batches of %d, float32")
  :format(N, tokens, tokens / N, BATCH))
print(PY and ("torch " .. VERSION .. " (" .. PY .. ")") or "torch: not found (`make bench-deps`), skipped")
print(("%-40s %10s %12s %10s"):format("", "qkv", "torch", "torch/qkv"))
local function row(name, t, tt, unit)
  local fmt = unit == "ms" and function(x) return ("%.1f ms"):format(x * 1e3) end
                           or function(x) return ("%.0f/s"):format(N / x) end
  print(("%-40s %10s %12s %10s"):format(name, fmt(t), tt and fmt(tt) or "-",
                                        tt and ("%.2f"):format(tt / t) or "-"))
end
row("load model.safetensors (90 MB)", t_st, torch.load, "ms")
row("qkv.bert.load (weights, vocab, config)", t_load, nil, "ms")
row("tokenize (sentences/s)", t_tok, torch.hf_tokenize)
row("embed: forward, fused attention", t_embed, torch.forward)
row("encode: + every layer's weights", t_encode, nil)
row("embed under bfloat16 autocast", t_autocast, torch.forward_autocast)
row("Hugging Face BertModel forward", t_embed, torch.hf_forward)
print(("embed: %.0f GFLOP/s"):format(flop / t_embed / 1e9))
print(("autocast: %.2fx float32's sentences/s; embeddings' least cosine similarity to float32's %.5f")
  :format(t_embed / t_autocast, least_cos))
