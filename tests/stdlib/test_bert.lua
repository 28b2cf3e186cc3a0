-- test_bert.lua: qkv.bert on the real all-MiniLM-L6-v2 (`make model`)
-- against Hugging Face's BertModel run in float64 (fixtures from
-- tests/fixtures/bert/make_bert.py): token ids exactly, every layer's
-- attention weights to 1e-5, sentence embeddings to cosine 0.99999, with
-- the sentences batched and padded so that padding must not leak. A tiny
-- random BERT written with qkv.save_safetensors checks the rest (shapes,
-- the errors of load, forward and encode) without the download.
local lu = require "luaunit"
local S = dofile("tests/helpers/shell.lua")

local DIR = os.getenv("QKV_MODEL_DIR") or "build/models/all-MiniLM-L6-v2"
local FIX = "tests/fixtures/bert/"
local REF = dofile(FIX .. "bert_ref.lua")

local model, ref
local function real()
  if not io.open(DIR .. "/model.safetensors") then
    lu.skip("the real model is not in " .. DIR .. " (`make model` fetches it with pip; "
            .. "set QKV_MODEL_DIR to use another copy)")
  end
  model = model or qkv.bert.load(DIR)
  ref = ref or qkv.loadz(FIX .. "bert_ref.npz")
  return model, ref
end

-- ids of sentences (fixture rows) padded into one batch, and their mask
local function batch(rows)
  local n = 0
  for _, r in ipairs(rows) do n = math.max(n, #r.ids) end
  local ids, mask = qkv.zeros({#rows, n}, "int64"), qkv.zeros({#rows, n}, "int64")
  for b, r in ipairs(rows) do
    for j, id in ipairs(r.ids) do ids[b][j] = id; mask[b][j] = 1 end
  end
  return ids, mask
end

local function maxdiff(a, b)
  return (a:double() - b:double()):abs():max():item()
end

local function cosine(a, b)
  a, b = a:double(), b:double()
  return ((a * b):sum() / ((a * a):sum() * (b * b):sum()):sqrt()):item()
end

TestBertReal = {}

function TestBertReal:testAttentionWeightsOfEveryLayerMatch()
  local m, r = real()
  local rows = {REF.sentences[REF.pair[1]], REF.sentences[REF.pair[2]]}
  local ids, mask = batch(rows)
  local _, _, att = m:forward(ids, mask)
  lu.assertEquals(#att, 6)
  for l = 1, 6 do
    lu.assertEquals({att[l]:size(1), att[l]:size(2)}, {2, 12})
    for b, tag in ipairs{"a", "b"} do
      local n = #rows[b].ids
      local got = att[l][b]:narrow(2, 1, n):narrow(3, 1, n)
      local d = maxdiff(got, r["att_" .. tag .. "_" .. l])
      lu.assertTrue(d < 1e-5, ("layer %d sentence %d: max |diff| %g"):format(l, b, d))
      if n < ids:size(2) then   -- padded keys get exactly nothing
        lu.assertEquals(att[l][b]:narrow(3, n + 1, ids:size(2) - n):abs():max():item(), 0)
      end
    end
  end
end

function TestBertReal:testHiddenStatesMatch()
  local m, r = real()
  local rows = {REF.sentences[REF.pair[1]], REF.sentences[REF.pair[2]]}
  local ids, mask = batch(rows)
  local last, hidden = m:forward(ids, mask)
  lu.assertEquals(#hidden, 7)
  lu.assertEquals(maxdiff(hidden[7], last), 0)
  for b, tag in ipairs{"a", "b"} do
    local d = maxdiff(last[b]:narrow(1, 1, #rows[b].ids), r["hidden_" .. tag])
    lu.assertTrue(d < 1e-4, ("sentence %d: max |diff| %g"):format(b, d))
  end
end

function TestBertReal:testSentenceEmbeddingsBatchedAndPadded()
  local m, r = real()
  local ids, mask = batch(REF.sentences)
  local e = m:pool(m:forward(ids, mask, nil, {attentions = false}), mask)
  lu.assertEquals({e:size(1), e:size(2)}, {#REF.sentences, 384})
  for i = 1, #REF.sentences do
    local c = cosine(e[i], r.emb[i])
    lu.assertTrue(c > 0.99999, ("sentence %d: cosine %.8f"):format(i, c))
    lu.assertAlmostEquals((e[i]:double() * e[i]:double()):sum():item(), 1, 1e-5)
  end
end

function TestBertReal:testEncodeTokenisesAsTheReference()
  local m, r = real()
  local texts = {}
  for i, s in ipairs(REF.sentences) do texts[i] = s.text end
  local out = m:encode(texts)
  for i, s in ipairs(REF.sentences) do
    lu.assertEquals(out.tokens[i], s.tokens)
    local n = #s.ids
    local ids = out.input_ids[i]:narrow(1, 1, n)
    for j = 1, n do lu.assertEquals(ids[j], s.ids[j]) end
    lu.assertEquals(out.attention_mask[i]:sum():item(), n)
    lu.assertTrue(cosine(out.embeddings[i], r.emb[i]) > 0.99999)
  end
  lu.assertEquals(#out.attentions, 6)
  lu.assertEquals(out.last_hidden_state:size(3), 384)
  -- the fused path gives the same embeddings
  lu.assertTrue(maxdiff(m:embed(texts), out.embeddings) < 1e-5)
  -- one string is a batch of one
  local one = m:encode(texts[1])
  lu.assertEquals(one.tokens[1], REF.sentences[1].tokens)
  lu.assertTrue(cosine(one.embeddings[1], r.emb[1]) > 0.99999)
end

function TestBertReal:testREPLIndexingOfOneHead()
  local m = real()
  local w = m:encode{"he sat on the river bank"}.attentions[3][1][5]
  lu.assertEquals({w:size(1), w:size(2)}, {8, 8})
  lu.assertTrue(maxdiff(w:sum(2), qkv.ones(8)) < 1e-5)
end


-- a tiny random BERT, written as a Hugging Face folder would hold it
local TMP, cleanup = dofile("tests/helpers/npy_helpers.lua").tmpdir()
local _ <close> = cleanup
local H, NH, FF, V, P = 8, 2, 12, 12, 16
local VOCAB = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "river", "bank",
               "a", "##s", "account", ","}

local function tiny(dir, edit)
  os.execute("mkdir -p " .. S.quote(dir))
  local cfg = {model_type = '"bert"', hidden_size = H, num_attention_heads = NH,
               num_hidden_layers = 2, intermediate_size = FF, hidden_act = '"gelu"',
               layer_norm_eps = 1e-12, max_position_embeddings = P, vocab_size = V,
               type_vocab_size = 2}
  local w = {}
  qkv.seed(7)
  local function add(name, ...) w[name] = qkv.randn(...) * 0.3 end
  add("embeddings.word_embeddings.weight", V, H)
  add("embeddings.position_embeddings.weight", P, H)
  add("embeddings.token_type_embeddings.weight", 2, H)
  add("embeddings.LayerNorm.weight", H); add("embeddings.LayerNorm.bias", H)
  for l = 0, 1 do
    local p = "encoder.layer." .. l .. "."
    for _, n in ipairs{"query", "key", "value"} do
      add(p .. "attention.self." .. n .. ".weight", H, H)
      add(p .. "attention.self." .. n .. ".bias", H)
    end
    add(p .. "attention.output.dense.weight", H, H); add(p .. "attention.output.dense.bias", H)
    add(p .. "attention.output.LayerNorm.weight", H); add(p .. "attention.output.LayerNorm.bias", H)
    add(p .. "intermediate.dense.weight", FF, H); add(p .. "intermediate.dense.bias", FF)
    add(p .. "output.dense.weight", H, FF); add(p .. "output.dense.bias", H)
    add(p .. "output.LayerNorm.weight", H); add(p .. "output.LayerNorm.bias", H)
  end
  if edit then edit(cfg, w) end
  local items = {}
  for k, v in pairs(cfg) do items[#items + 1] = ('"%s": %s'):format(k, v) end
  S.write(dir .. "/config.json", "{" .. table.concat(items, ", ") .. "}")
  S.write(dir .. "/vocab.txt", table.concat(VOCAB, "\n") .. "\n")
  qkv.save_safetensors(dir .. "/model.safetensors", w)
  return dir
end

local count = 0
local function newtiny(edit)
  count = count + 1
  return tiny(TMP .. "/m" .. count, edit)
end

TestBertTiny = {}

function TestBertTiny:testEncodeShapesAndPadding()
  local m = qkv.bert.load(newtiny())
  local out = m:encode({"the river bank", "a bank"})
  lu.assertEquals(out.tokens, {{"[CLS]", "the", "river", "bank", "[SEP]"},
                               {"[CLS]", "a", "bank", "[SEP]"}})
  lu.assertEquals({out.last_hidden_state:size(1), out.last_hidden_state:size(2),
                   out.last_hidden_state:size(3)}, {2, 5, H})
  lu.assertEquals(#out.attentions, 2)
  local a = out.attentions[2]
  lu.assertEquals({a:size(1), a:size(2), a:size(3), a:size(4)}, {2, NH, 5, 5})
  lu.assertTrue(maxdiff(a:sum(4), qkv.ones(2, NH, 5)) < 1e-5)
  lu.assertEquals(a[2]:narrow(3, 5, 1):abs():max():item(), 0)   -- the pad key
  -- a padded sentence embeds as it does alone
  local alone = m:encode({"a bank"})
  lu.assertTrue(maxdiff(alone.embeddings[1], out.embeddings[2]) < 1e-5)
end

function TestBertTiny:testPrefixedWeightsLoad()
  local dir = newtiny(function(_, w)
    local names = {}
    for k in pairs(w) do names[#names + 1] = k end
    for _, k in ipairs(names) do w["bert." .. k], w[k] = w[k], nil end
  end)
  lu.assertEquals(#qkv.bert.load(dir).layers, 2)
end

local function loadfails(dir, pattern)
  local ok, err = pcall(qkv.bert.load, dir)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "bert.load: ")
  lu.assertStrContains(err, pattern)
  lu.assertStrContains(err, "test_bert.lua")    -- points at the caller's line
end

function TestBertTiny:testLoadErrors()
  loadfails(TMP .. "/nowhere", "has no config.json")
  local ok, err = pcall(qkv.bert.load, 42)
  lu.assertFalse(ok); lu.assertStrContains(err, "bad argument #1")
  loadfails(newtiny() .. "\0/elsewhere", "has a NUL byte")   -- io.open would read the folder
  local d = newtiny()
  S.write(d .. "/config.json", "{\"hidden_size\": 8,")
  loadfails(d, "config.json is not valid JSON")
  S.write(d .. "/config.json", "[1, 2]")
  loadfails(d, "is not a JSON object")
  loadfails(newtiny(function(c) c.hidden_act = '"relu"' end), 'hidden_act "relu" is not supported')
  loadfails(newtiny(function(c) c.num_attention_heads = 3 end), "not divisible")
  loadfails(newtiny(function(c) c.model_type = '"gpt2"' end), 'model_type is "gpt2"')
  loadfails(newtiny(function(c) c.num_hidden_layers = 3 end), "has no tensor encoder.layer.2.")
  loadfails(newtiny(function(_, w) w["encoder.layer.1.output.dense.bias"] = qkv.zeros(7) end),
            "encoder.layer.1.output.dense.bias is (7,), expected (8)")
  d = newtiny()
  os.remove(d .. "/vocab.txt")
  ok, err = pcall(qkv.bert.load, d)
  lu.assertFalse(ok); lu.assertStrContains(err, "vocab.txt")
end

-- load() with no folder: $QKV_MODEL_DIR, else the repository's
-- build/models/, found from the library wherever qkv is started
function TestBertTiny:testDefaultFolder()
  local root = S.sh("pwd"):gsub("%s+$", "")
  local exe = S.quote(arg[-1]:sub(1, 1) == "/" and arg[-1] or root .. "/" .. arg[-1])
  local function run(env, code)
    return S.sh("cd / && " .. env .. " " .. exe .. " -e " .. S.quote(code))
  end
  local out = run("env -u QKV_MODEL_DIR", "io.write(qkv.bert.default_dir())")
  lu.assertEquals(out, root .. "/build/models/all-MiniLM-L6-v2")
  local tinydir = newtiny()
  out = run("QKV_MODEL_DIR=" .. S.quote(tinydir), "io.write(#qkv.bert.load().layers)")
  lu.assertEquals(out, "2")
  local code
  out, code = run("QKV_MODEL_DIR=" .. S.quote(TMP .. "/nowhere"), "qkv.bert.load()")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "bert.load: all-MiniLM-L6-v2 is not in " .. TMP .. "/nowhere: run "
                       .. "`make model` in qkv's repository to fetch it, or set QKV_MODEL_DIR")
end

function TestBertTiny:testForwardAndEncodeErrors()
  local m = qkv.bert.load(newtiny())
  local ok, err = pcall(m.forward, m, qkv.ones(1, 3))
  lu.assertFalse(ok); lu.assertStrContains(err, "forward: input_ids must be an int64 (B, n) tensor")
  ok, err = pcall(m.forward, m, qkv.ones({1, P + 1}, "int64"))
  lu.assertFalse(ok); lu.assertStrContains(err, "17 tokens, more than the model's 16 positions")
  ok, err = pcall(m.forward, m, qkv.full({1, 2}, V, "int64"))
  lu.assertFalse(ok); lu.assertStrContains(err, "embedding")
  ok, err = pcall(m.encode, m, 42)
  lu.assertFalse(ok); lu.assertStrContains(err, "encode")
end

os.exit(lu.LuaUnit.run(), true)
