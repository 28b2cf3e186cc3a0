-- real.lua: scripts/real_bank.lua and scripts/real_heads.lua on the real
-- all-MiniLM-L6-v2 (`make model`; skipped without it). The bank maps are
-- checked value by value against Hugging Face's float64 attention weights
-- (tests/fixtures/bert/bert_ref.npz, the same two sentences), the head
-- view by its one unmistakable head and its picture.
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")

local DIR = os.getenv("QKV_MODEL_DIR") or "build/models/all-MiniLM-L6-v2"
local REF = dofile("tests/fixtures/bert/bert_ref.lua")

local function run(script)
  if not io.open(DIR .. "/model.safetensors") then
    lu.skip("the real model is not in " .. DIR .. " (`make model` fetches it)")
  end
  return U.cached(script)
end

local function position(tokens, word)
  for i, t in ipairs(tokens) do if t == word then return i end end
end

local TestRealBank = {}

function TestRealBank:testMapsAreTheReferenceWeights()
  local r = run("scripts/real_bank.lua")
  local ref = qkv.loadz("tests/fixtures/bert/bert_ref.npz")
  for s, key in ipairs{"river", "account"} do
    local toks = REF.sentences[REF.pair[s]].tokens
    local bank, ctx = position(toks, "bank"), position(toks, key)
    local got = U.values(r.results[key])
    local worst = 0
    for l = 1, 6 do
      local a = ref["att_" .. ("ab"):sub(s, s) .. "_" .. l]
      for h = 1, 12 do worst = math.max(worst, math.abs(got[l][h] - a[h][bank][ctx])) end
    end
    lu.assertTrue(worst < 1e-5, key .. ": max |diff| " .. worst)
  end
  -- the head it names links bank to both words, and says so
  local L, H = r.results.layer, r.results.head
  local line = ("layer %d head %d: bank -> river "):format(L, H)
  lu.assertStrContains(r.stdout, line)
  lu.assertTrue(U.values(r.results.river)[L][H] > 0.5)
  lu.assertTrue(U.values(r.results.account)[L][H] > 0.5)
  lu.assertTrue(r.results.cosine > 0 and r.results.cosine < 1)
  U.assertPng(r, "real_bank.png", 800, 600)
end

local TestRealHeads = {}

function TestRealHeads:testTheModelView()
  local r = run("scripts/real_heads.lua")
  local names, total = r.results.names, 0
  lu.assertEquals(#names, 6)
  for l = 1, 6 do lu.assertEquals(#names[l], 12) end
  lu.assertStrContains(names[1][3], "prev")     -- layer 1, head 3 looks one token back
  for _, c in pairs(r.results.counts) do total = total + c end
  lu.assertEquals(total, 72)
  lu.assertEquals(r.results.tokens[1], "[CLS]")
  lu.assertStrContains(r.stdout, "layer 6  ")
  local img = r.images["real_heads.png"]
  lu.assertEquals(type(img), "table", tostring(img))
  lu.assertTrue(img.width > 2000 and img.height > 1000, img.width .. "x" .. img.height)
end

return {TestRealBank = TestRealBank, TestRealHeads = TestRealHeads}
