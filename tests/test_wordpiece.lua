-- test_wordpiece.lua: qkv.wordpiece (and qkv.text under it) against
-- Hugging Face's tokenizers package on all-MiniLM-L6-v2's vocabulary:
-- 30 hand-picked texts from a fixture (tests/fixtures/tokenizer/
-- make_tokens.py: accents, CJK, Greek, special tokens, long words, odd
-- whitespace and control characters), and random texts tokenised by both
-- in the same run when build/pyref has the package (`make peers`). A tiny
-- vocabulary checks the rest without the model: pieces, [UNK], padding,
-- cutting to max_length, decode and the errors.
local lu = require "luaunit"
local S = dofile("tests/shell.lua")
local H = dofile("tests/npy_helpers.lua")

local DIR = os.getenv("QKV_MODEL_DIR") or "build/models/all-MiniLM-L6-v2"
local PY = "build/pyref/bin/python"
local TMP, cleanup = H.tmpdir()
local _ <close> = cleanup

local function real()
  if not io.open(DIR .. "/vocab.txt") then
    lu.skip("the real model is not in " .. DIR .. " (`make model` fetches it)")
  end
  return qkv.wordpiece.load(DIR .. "/vocab.txt")
end

local function row(t, b) return t[b]:narrow(1, 1, t:size(2)):tolist() end

TestWordpieceReference = {}

function TestWordpieceReference:testTheFixturesTexts()
  local tok = real()
  local ref = dofile("tests/fixtures/tokenizer/tokens_ref.lua")
  lu.assertEquals(#ref, 30)
  for i, r in ipairs(ref) do
    local e = tok:encode(r.text)
    lu.assertEquals(e.tokens[1], r.tokens, "text " .. i)
    lu.assertEquals(row(e.input_ids, 1), r.ids, "text " .. i)
  end
end

-- random texts from pieces that exercise every rule, tokenised by both
local ALPHABET = {"a", "b", "e", "the", "bank", "river", "ing", "un", "Q", "Z", " ", " ", "  ",
  "\t", "\n", ".", ",", "!", "'", "-", "$", "^", "`", "~", "é", "É", "ñ", "ü", "ß", "œ",
  "北", "京", "の", "テ", "한", "α", "Σ", "Ω", "й", "Ж", "ا", "😀", "©", "™", "…", "—", "«",
  "\u{00a0}", "\u{2003}", "\u{200b}", "\u{2028}", "\u{0301}", "\u{0308}", "\u{ff21}",
  "\u{fb01}", "İ", "[MASK]", "[SEP]", "[UNK]", "1", "42", "3.14", "\7", "\0", "\u{fffd}",
  "x", "y", "antidisestablishmentarianism"}

function TestWordpieceReference:testRandomTextsAgainstTheTokenizersPackage()
  local tok = real()
  local f = io.open(PY)
  if not f then lu.skip("no " .. PY .. " with tokenizers (`make peers`)") end
  f:close()
  local rng, texts = 7, {}
  local function rand(n)
    rng = (rng * 1103515245 + 12345) % 2147483648
    return rng % n + 1
  end
  for i = 1, 300 do
    local parts = {}
    for j = 1, rand(12) do parts[j] = ALPHABET[rand(#ALPHABET)] end
    texts[i] = table.concat(parts)
  end
  local hex = {}
  for i, t in ipairs(texts) do hex[i] = (t:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
  S.write(TMP .. "/texts.hex", table.concat(hex, "\n") .. "\n")
  local out, code = S.sh(PY .. " -c " .. S.quote([[
import sys, tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
tok.no_padding(); tok.no_truncation()
for line in open(sys.argv[2]):
    print(" ".join(map(str, tok.encode(bytes.fromhex(line.strip()).decode()).ids)))
]]) .. " " .. S.quote(DIR .. "/tokenizer.json") .. " " .. S.quote(TMP .. "/texts.hex") .. " 2>&1")
  lu.assertEquals(code, 0, out)
  local i = 0
  for line in out:gmatch("([^\n]*)\n") do
    i = i + 1
    local want = {}
    for id in line:gmatch("%d+") do want[#want + 1] = tonumber(id) end
    lu.assertEquals(row(tok:encode(texts[i]).input_ids, 1), want, ("%q"):format(texts[i]))
  end
  lu.assertEquals(i, #texts)
end

-- a tiny vocabulary
local VOCAB = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "river", "bank", "##s",
               "un", "##believ", "##able", ",", "é", "北"}

local function tiny(opts, vocab)
  local path = TMP .. "/vocab" .. tostring(opts and next(opts) or "") .. ".txt"
  S.write(path, table.concat(vocab or VOCAB, "\n") .. "\n")
  return qkv.wordpiece.load(path, opts)
end

TestWordpieceTiny = {}

function TestWordpieceTiny:testPiecesAndUnknowns()
  local tok = tiny()
  lu.assertEquals(tok:tokenize("The banks, UNBELIEVABLE river"),
                  {"the", "bank", "##s", ",", "un", "##believ", "##able", "river"})
  lu.assertEquals(tok:tokenize("unbelievablex banky"), {"[UNK]", "[UNK]"})
  lu.assertEquals(tok:tokenize("the " .. ("s"):rep(101)), {"the", "[UNK]"})
  lu.assertEquals(tok:tokenize("北北 é"), {"北", "北", "[UNK]"})         -- é lowered and stripped: e
  lu.assertEquals(tok:tokenize(""), {})
  lu.assertEquals(tok:tokenize("the [MASK] river[SEP]"), {"the", "[MASK]", "river", "[SEP]"})
  local cased = tiny({lower = false})
  lu.assertEquals(cased:tokenize("é The"), {"é", "[UNK]"})
  lu.assertEquals(tiny({strip_accents = false}):tokenize("É"), {"é"})
end

function TestWordpieceTiny:testEncodePadsAndCuts()
  local tok = tiny()
  local e = tok:encode({"the river bank", "banks"})
  lu.assertEquals(e.tokens, {{"[CLS]", "the", "river", "bank", "[SEP]"},
                             {"[CLS]", "bank", "##s", "[SEP]"}})
  lu.assertEquals(e.input_ids:tolist(), {{2, 5, 6, 7, 3}, {2, 7, 8, 3, 0}})
  lu.assertEquals(e.attention_mask:tolist(), {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 0}})
  lu.assertEquals(e.token_type_ids:tolist(), {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}})
  lu.assertEquals(e.input_ids.dtype, "int64")
  local short = tiny({max_length = 4})
  lu.assertEquals(short:encode("the river bank river").tokens[1], {"[CLS]", "the", "river", "[SEP]"})
  lu.assertEquals(tok:decode(e.input_ids[2]), "[CLS] banks [SEP]")
  lu.assertEquals(tok:decode({5, 6, 8}), "the rivers")
end

function TestWordpieceTiny:testErrors()
  local tok = tiny()
  local function fails(want, f, ...)
    local ok, err = pcall(f, ...)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), want)
    lu.assertStrContains(tostring(err), "test_wordpiece.lua")   -- the caller's line
  end
  fails("wordpiece.load: cannot open", qkv.wordpiece.load, TMP .. "/none.txt")
  fails("bad argument #1", qkv.wordpiece.load, 3)
  fails("wordpiece.load: cannot read " .. TMP, qkv.wordpiece.load, TMP)   -- a folder
  S.write(TMP .. "/empty.txt", "")
  fails("holds no tokens", qkv.wordpiece.load, TMP .. "/empty.txt")
  fails("max_length must be an integer >= 2", tiny, {max_length = 1})
  fails("has no [CLS] token", tiny, nil, {"[PAD]", "[UNK]", "[SEP]", "a"})
  fails("encode: texts must be a string or a non-empty list of strings, got number",
        tok.encode, tok, 5)
  fails("encode: texts must be a string or a non-empty list of strings, got an empty table",
        tok.encode, tok, {})
  fails("encode: text 2 is a boolean", tok.encode, tok, {"a", true})
  fails("encode: text 1: the text is not valid UTF-8 (at byte 2)", tok.encode, tok, "a\255")
  fails("tokenize: bad argument #1", tok.tokenize, tok, nil)
  fails("decode: id 2 is 99", tok.decode, tok, {1, 99})
  fails("decode: bad argument #1", tok.decode, tok, "x")
end

os.exit(lu.LuaUnit.run(), true)
