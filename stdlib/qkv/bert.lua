-- bert.lua: qkv.bert, a pretrained BERT encoder (all-MiniLM-L6-v2 and its
-- kin) read from a Hugging Face model folder and run with qkv's own
-- primitives, so that its attention maps can be looked at.
--
--   local m = qkv.bert.load(dir)           -- config.json, model.safetensors, vocab.txt
--   local out = m:encode({"the river bank", "the bank account"})
--   out.attentions[l]       -- layer l's weights (B, heads, n, n)
--   out.last_hidden_state   -- (B, n, hidden); out.hidden_states[1..L+1]
--   out.embeddings          -- (B, hidden) sentence embeddings (mean-pooled, normalised)
--   out.tokens[b]           -- sentence b's word pieces, [CLS] ... [SEP]
--   m:embed(texts)          -- only the sentence embeddings, through the fused attention
--
-- A layer is BERT's post-norm block: x = LN(x + Attn(x) W_O), then
-- x = LN(x + GELU(x W_1) W_2), with the attention from qkv.project,
-- qkv.heads, qkv.attention and qkv.merge. Weights are float32 as stored.

local qkv = require "qkv"
local caller = require "qkv.caller"

local M = {}
local SOURCE = debug.getinfo(1, "S").source
-- this file's path, as require's searcher hands it to the chunk
local FILE = select(2, ...)

local function fail(msg, ...)
  error(string.format(msg, ...), caller(SOURCE, true))
end

local function readfile(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- a JSON file's value (nil when there is no such file): an object, or
-- also a list when list_ok
local function readjson(path, list_ok)
  local s = readfile(path)
  if s == nil then return nil end
  local ok, v = pcall(require("qkv.json").decode, s, path)
  if not ok then fail("bert.load: %s", (tostring(v):gsub("^json%.decode: ", ""))) end
  if type(v) ~= "table" or (#v > 0 and not list_ok) then fail("bert.load: %s is not a JSON object", path) end
  return v
end

-- the settings the encoder needs, checked: a config this code would run
-- wrongly is an error, not a silent difference
local function settings(dir, cfg)
  local function int(key)
    local v = cfg[key]
    if math.type(v) ~= "integer" or v < 1 then
      fail("bert.load: %s/config.json: %s must be a positive integer, got %s", dir, key,
           tostring(v))
    end
    return v
  end
  if cfg.model_type ~= nil and cfg.model_type ~= "bert" then
    fail("bert.load: %s/config.json: model_type is %q, not \"bert\"", dir, tostring(cfg.model_type))
  end
  local act = cfg.hidden_act or "gelu"
  if act ~= "gelu" then
    fail("bert.load: %s/config.json: hidden_act %q is not supported (only \"gelu\", the exact one)",
         dir, tostring(act))
  end
  local pos = cfg.position_embedding_type or "absolute"
  if pos ~= "absolute" then
    fail("bert.load: %s/config.json: position_embedding_type %q is not supported", dir, tostring(pos))
  end
  local s = {hidden = int("hidden_size"), heads = int("num_attention_heads"),
             layers = int("num_hidden_layers"), eps = cfg.layer_norm_eps or 1e-12}
  if s.hidden % s.heads ~= 0 then
    fail("bert.load: %s/config.json: hidden_size %d is not divisible by num_attention_heads %d",
         dir, s.hidden, s.heads)
  end
  if type(s.eps) ~= "number" or s.eps < 0 then
    fail("bert.load: %s/config.json: layer_norm_eps must be a number >= 0", dir)
  end
  return s
end

-- sentence-transformers' pooling (1_Pooling/config.json) and whether a
-- Normalize module follows (modules.json); without them, mean and normalise
local function pooling(dir)
  local p = readjson(dir .. "/1_Pooling/config.json") or {}
  local mode = p.pooling_mode_cls_token and "cls" or "mean"
  local mods = readjson(dir .. "/modules.json", true)
  local normalize = mods == nil
  for _, m in ipairs(mods or {}) do
    if type(m) == "table" and tostring(m.type):find("Normalize", 1, true) then normalize = true end
  end
  return mode, normalize
end

-- the weights, found with or without BertForX's "bert." prefix, each
-- checked against the shape the config implies
local function weights(dir, s)
  local path = dir .. "/model.safetensors"
  local w = qkv.load_safetensors(path)
  local prefix = w["bert.embeddings.word_embeddings.weight"] and "bert." or ""
  local function get(name, ...)
    local t = w[prefix .. name]
    if t == nil then fail("bert.load: %s has no tensor %s", path, prefix .. name) end
    local want = {...}
    local ok = t.ndim == #want
    for i = 1, #want do ok = ok and (want[i] < 0 or t.shape[i] == want[i]) end
    if not ok then
      fail("bert.load: %s: %s is %s, expected (%s)", path, prefix .. name, tostring(t.shape),
           (table.concat(want, ", "):gsub("%-1", "?")))
    end
    return t:float()
  end
  return get
end

local function layer(get, i, d)
  local p = "encoder.layer." .. (i - 1) .. "."
  local function lin(name, n_out, n_in)     -- nn.Linear's (out, in) weight, as project's (in, out)
    return get(p .. name .. ".weight", n_out, n_in).T, get(p .. name .. ".bias", n_out)
  end
  local wq, bq = lin("attention.self.query", d, d)
  local wk, bk = lin("attention.self.key", d, d)
  local wv, bv = lin("attention.self.value", d, d)
  local L = {}
  L.wqkv, L.bqkv = qkv.cat({wq, wk, wv}, 2), qkv.cat({bq, bk, bv})   -- one product for Q, K, V
  L.wo, L.bo = lin("attention.output.dense", d, d)
  L.ln1_w = get(p .. "attention.output.LayerNorm.weight", d)
  L.ln1_b = get(p .. "attention.output.LayerNorm.bias", d)
  local ff = get(p .. "intermediate.dense.weight", -1, d).shape[1]
  L.wi, L.bi = lin("intermediate.dense", ff, d)
  L.wo2, L.bo2 = lin("output.dense", d, ff)
  L.ln2_w = get(p .. "output.LayerNorm.weight", d)
  L.ln2_b = get(p .. "output.LayerNorm.bias", d)
  return L
end

local Model = {}
Model.__index = Model
M.BertModel = Model     -- the class, for qkv.doc

-- the model `make model` fetches: $QKV_MODEL_DIR, else build/models/ of the
-- repository this library is in (found from this file, so from any folder)
M.DEFAULT = "all-MiniLM-L6-v2"
function M.default_dir()
  local env = os.getenv("QKV_MODEL_DIR")
  if env and env ~= "" then return env end
  local here = type(FILE) == "string" and FILE or package.searchpath("qkv.bert", package.path)
               or "stdlib/qkv/bert.lua"
  local root = here:match("^(.-)/?stdlib/qkv/bert%.lua$")
  if root == nil or root == "" then root = "." end
  root = root:gsub("/[^/.][^/]*/%.%.$", "")       -- build/qkv's <exe>/.. as the repository
  return root .. "/build/models/" .. M.DEFAULT
end

function M.load(dir)
  local default = dir == nil
  if default then dir = M.default_dir() end
  if type(dir) ~= "string" then
    fail("bert.load: bad argument #1 (a model folder's path expected, got %s)", type(dir))
  end
  if dir:find("\0", 1, true) then     -- io.open would read the path before it
    fail("bert.load: bad argument #1 (the path %q has a NUL byte)", dir)
  end
  dir = dir:gsub("/+$", "")
  local cfg = readjson(dir .. "/config.json")
  if cfg == nil and default then
    fail("bert.load: %s is not in %s: run `make model` in qkv's repository to fetch it, "
         .. "or set QKV_MODEL_DIR to a copy", M.DEFAULT, dir)
  end
  if cfg == nil then
    fail("bert.load: %s has no config.json (a BERT model folder holds config.json, " ..
         "model.safetensors and vocab.txt)", dir)
  end
  local s = settings(dir, cfg)
  local tcfg = readjson(dir .. "/tokenizer_config.json") or {}
  local m = setmetatable({dir = dir, config = cfg, hidden = s.hidden, heads = s.heads,
                          eps = s.eps, layers = {}}, Model)
  -- sentence-transformers cuts at its max_seq_length (256 for MiniLM)
  local st = readjson(dir .. "/sentence_bert_config.json") or {}
  local maxlen = st.max_seq_length or cfg.max_position_embeddings
  if math.type(maxlen) ~= "integer" or maxlen < 2 then maxlen = cfg.max_position_embeddings end
  local ok, tok = pcall(require("qkv.wordpiece").load, dir .. "/vocab.txt",
    {lower = tcfg.do_lower_case ~= false, max_length = maxlen})
  if not ok then fail("bert.load: %s", (tostring(tok):gsub("^.-wordpiece%.load: ", ""))) end
  m.tokenizer = tok
  m.pooling, m.normalize = pooling(dir)
  local get, d = weights(dir, s), s.hidden
  m.word = get("embeddings.word_embeddings.weight", -1, d)
  m.position = get("embeddings.position_embeddings.weight", -1, d)
  m.token_type = get("embeddings.token_type_embeddings.weight", -1, d)
  m.ln_w, m.ln_b = get("embeddings.LayerNorm.weight", d), get("embeddings.LayerNorm.bias", d)
  for i = 1, s.layers do m.layers[i] = layer(get, i, d) end
  return m
end

-- one encoder layer on x (B, n, d); keep (B, 1, 1, n) is 1 for tokens and
-- 0 for padding; returns x and the weights (B, heads, n, n) when asked
local function block(m, L, x, keep, want_weights)
  local d = m.hidden
  local qkv_ = qkv.project(x, L.wqkv, L.bqkv)
  local q = qkv.heads(qkv_:narrow(3, 1, d), m.heads)
  local k = qkv.heads(qkv_:narrow(3, d + 1, d), m.heads)
  local v = qkv.heads(qkv_:narrow(3, 2 * d + 1, d), m.heads)
  local ctx, w = qkv.attention(q, k, v, {mask = keep, weights = want_weights})
  local a = qkv.project(qkv.merge(ctx), L.wo, L.bo)
  x = qkv.layer_norm(x + a, d, L.ln1_w, L.ln1_b, m.eps)
  local f = qkv.project(qkv.gelu(qkv.project(x, L.wi, L.bi)), L.wo2, L.bo2)
  return qkv.layer_norm(x + f, d, L.ln2_w, L.ln2_b, m.eps), w
end

local function checkids(m, ids, what)
  if not qkv.is_tensor(ids) or ids.dtype ~= "int64" or ids.ndim ~= 2 then
    fail("forward: %s must be an int64 (B, n) tensor, got %s", what,
         qkv.is_tensor(ids) and ids.dtype .. " " .. tostring(ids.shape) or type(ids))
  end
  if ids.shape[2] > m.position.shape[1] then
    fail("forward: %s has %d tokens, more than the model's %d positions", what, ids.shape[2],
         m.position.shape[1])
  end
end

-- forward's and encode's options: attentions (a boolean) alone
local function checkopts(fname, opts)
  local msg
  msg, opts = qkv._checkopts(fname, opts, {"attentions"}, {"attentions"})
  if msg then error(msg, caller(SOURCE, true)) end
  return opts
end

-- m:forward(input_ids [, attention_mask [, token_type_ids [, opts]]]):
-- Hugging Face's BertModel forward on 0-based vocabulary ids (B, n);
-- returns last_hidden_state, hidden_states (L + 1) and, unless
-- opts.attentions is false, every layer's weights
function Model:forward(ids, mask, types, opts)
  opts = checkopts("forward", opts)
  checkids(self, ids, "input_ids")
  local B, n = ids.shape[1], ids.shape[2]
  mask = mask or qkv.ones({B, n}, "int64")
  types = types or qkv.zeros({B, n}, "int64")
  local pos = qkv.arange(1, n + 1, "int64")
  local x = qkv.embedding(ids + 1, self.word) + qkv.embedding(pos, self.position)
            + qkv.embedding(types + 1, self.token_type)
  x = qkv.layer_norm(x, self.hidden, self.ln_w, self.ln_b, self.eps)
  local keep = mask:view(B, 1, 1, n)
  local want = opts.attentions ~= false
  local hidden, att = {x}, {}
  for i, L in ipairs(self.layers) do
    x, att[i] = block(self, L, x, keep, want)
    hidden[i + 1] = x
  end
  return x, hidden, want and att or nil
end

-- the sentence embeddings of hidden states h (B, n, d) under mask (B, n)
function Model:pool(h, mask)
  local e
  if self.pooling == "cls" then
    e = h:select(2, 1)
  else
    local m = mask:float():unsqueeze(3)
    e = (h * m):sum(2) / m:sum(2):clamp(1e-9)
  end
  if self.normalize then e = e / (e * e):sum(2, true):sqrt():clamp(1e-12) end
  return e
end

local function tokenize(m, texts)
  local ok, enc = pcall(m.tokenizer.encode, m.tokenizer, texts)
  if not ok then fail("encode: %s", (tostring(enc):gsub("^.-encode: ", ""))) end
  return enc
end

-- m:encode(texts): tokens, hidden states, attentions, sentence embeddings
function Model:encode(texts, opts)
  checkopts("encode", opts)
  local enc = tokenize(self, texts)
  local last, hidden, att = self:forward(enc.input_ids, enc.attention_mask, enc.token_type_ids,
                                         opts)
  return {tokens = enc.tokens, input_ids = enc.input_ids, attention_mask = enc.attention_mask,
          last_hidden_state = last, hidden_states = hidden, attentions = att,
          embeddings = self:pool(last, enc.attention_mask)}
end

-- m:embed(texts): the sentence embeddings (B, d) alone, through the fused
-- attention that never holds the n x n weights
function Model:embed(texts)
  local enc = tokenize(self, texts)
  local last = self:forward(enc.input_ids, enc.attention_mask, enc.token_type_ids,
                            {attentions = false})
  return self:pool(last, enc.attention_mask)
end

require("qkv.methods").guard(Model, "model", "BertModel")   -- model.encode() says so

return qkv._strict(M, "qkv.bert")           -- a misspelt name is an error, not nil
